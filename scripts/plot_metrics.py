#!/usr/bin/env python3
"""Plot a run's metrics.jsonl.

usage: plot_metrics.py METRICS_JSONL OUT_DIR

Writes OUT_DIR/loss.png (training loss, and validation loss where the file has eval records),
OUT_DIR/throughput.png (tokens/s of the global batch) and OUT_DIR/time_split.png (each step's
compute, comm and bubble seconds stacked: together they make the step time).
Needs matplotlib (Debian: apt-get install python3-matplotlib).
"""
import json
import math
import os
import sys


def number(value):
    # The trainer writes non-finite figures as null; NaN leaves a gap in the plot.
    return math.nan if value is None else float(value)


def read_records(path):
    """Step records and eval records by step; a later line for the same step wins, so a run
    appended to the file after a restart shows once."""
    train, evals = {}, {}
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"error: {path}:{lineno}: not JSON ({e})")
            if "eval_loss" in record:
                evals[record["step"]] = record
            elif "loss" in record:
                train[record["step"]] = record
    return [train[s] for s in sorted(train)], [evals[s] for s in sorted(evals)]


def column(records, key):
    return [number(r.get(key)) for r in records]


def plot_loss(plt, train, evals, path):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(column(train, "step"), column(train, "loss"), label="train")
    if evals:
        ax.plot(column(evals, "step"), column(evals, "eval_loss"), "o-", label="validation")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_throughput(plt, train, path):
    fig, ax = plt.subplots(figsize=(8, 4.5))
    ax.plot(column(train, "step"), column(train, "tokens_per_s"))
    ax.set_xlabel("step")
    ax.set_ylabel("tokens/s (global batch)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_time_split(plt, train, path):
    steps = column(train, "step")
    fig, ax = plt.subplots(figsize=(8, 4.5))
    bottom = [0.0] * len(train)
    for key, label in (("compute_s", "compute"), ("optimizer_s", "optimizer"), ("comm_s", "comm"), ("bubble_s", "bubble")):
        seconds = [0.0 if math.isnan(x) else x for x in column(train, key)]
        ax.bar(steps, seconds, bottom=bottom, width=0.8, label=label)
        bottom = [b + x for b, x in zip(bottom, seconds)]
    ax.set_xlabel("step")
    ax.set_ylabel("seconds")
    ax.grid(alpha=0.3, axis="y")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    metrics_path, out_dir = argv[1], argv[2]
    try:
        import matplotlib
        matplotlib.use("Agg")  # files only: no display needed
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("error: matplotlib is not installed; fix: apt-get install python3-matplotlib")
    try:
        train, evals = read_records(metrics_path)
    except OSError as e:
        sys.exit(f"error: cannot read {metrics_path}: {e.strerror}")
    if not train:
        sys.exit(f"error: {metrics_path} has no step records (is logging.dir set?)")
    os.makedirs(out_dir, exist_ok=True)
    plot_loss(plt, train, evals, os.path.join(out_dir, "loss.png"))
    plot_throughput(plt, train, os.path.join(out_dir, "throughput.png"))
    plot_time_split(plt, train, os.path.join(out_dir, "time_split.png"))
    print(f"wrote loss.png, throughput.png, time_split.png to {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
