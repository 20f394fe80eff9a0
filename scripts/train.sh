#!/usr/bin/env bash
# Sets up if needed, then trains the default model (configs/tiny.yaml) on 8 local processes
# at dp=2 x pp=2 x tp=2. Extra arguments go to `trainer train`, e.g. --set train.steps=100.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
CONFIG=${CONFIG:-configs/tiny.yaml}
NPROC=$(build/trainer check-config "$CONFIG" "$@" | awk '/world_size:/ {print $2}')
exec build/trainer launch --nproc "$NPROC" -- train "$CONFIG" --set logging.dir=runs/tiny "$@"
