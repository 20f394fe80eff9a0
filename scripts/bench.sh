#!/usr/bin/env bash
# Sets up (the project's .venv holds the PyTorch side), then runs the benchmark: trainer against a
# plain PyTorch GPT in the same invocation. Results in bench-out/ (table, JSON, chart).
set -euo pipefail
cd "$(dirname "$0")/.."
WITH_TEST_DEPS=1 scripts/setup.sh
exec .venv/bin/python bench/bench.py --trainer build/trainer --out bench-out "$@"
