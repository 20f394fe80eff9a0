#!/usr/bin/env bash
# Sets up if needed, then trains the default model (configs/tiny.yaml) on 8 local processes at
# dp=2 x pp=2 x tp=2 on the King James Bible (public domain; Debian's bible-kjv package, whose
# `bible` command prints it), one document per chapter, tokenized byte-level on the first run
# and cached in data/cache/. Extra arguments go to `trainer train`, e.g. --set train.steps=500.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
CONFIG=${CONFIG:-configs/tiny.yaml}
CACHE=data/cache
if [ ! -f "$CACHE/kjv_train.idx" ]; then
  if ! command -v bible >/dev/null; then
    echo "train.sh: installing bible-kjv (the training text)"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends bible-kjv >/dev/null \
      || { $SUDO apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends bible-kjv >/dev/null; }
  fi
  rm -rf "$CACHE/kjv" && mkdir -p "$CACHE/kjv"
  # `bible` prints a heading line ("Genesis 1") before each chapter's verses: one file each,
  # numbered so that the files sort in the Bible's order.
  COLUMNS=10000 bible gen1:1-rev22:21 | awk -v dir="$CACHE/kjv" '
    /^[1-3 ]*[A-Z][A-Za-z ]* [0-9]+$/ { n++; file = sprintf("%s/%04d.txt", dir, n); print > file; next }
    file { print > file }'
  build/trainer prepare-data --input "$CACHE"/kjv/*.txt --tokenizer byte --append-eod --val-fraction 0.05 \
    --output "$CACHE/kjv"
fi
data_args=(--set data.source=indexed --set data.path="$CACHE/kjv_train" --set data.valid_path="$CACHE/kjv_val"
           --set model.vocab_size=257 --set model.seq_len=64 --set train.steps=200 --set train.eval_interval=50
           --set train.eval_iters=4 --set logging.interval=10)
NPROC=$(build/trainer check-config "$CONFIG" "${data_args[@]}" "$@" | awk '/world_size:/ {print $2}')
exec build/trainer launch --nproc "$NPROC" -- train "$CONFIG" --set logging.dir=runs/tiny "${data_args[@]}" "$@"
