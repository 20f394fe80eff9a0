#!/usr/bin/env python3
"""trainer plan's predicted peak memory per rank against the peak RSS `trainer train` measures.

  bench/memory_vs_plan.py [--trainer build/trainer] [--precision fp32 bf16] [--only NAME...]

Each layout of configs/small.yaml (the same list as the planner's memory test) trains for 3 steps;
train logs the planner's prediction for every rank before it starts and each rank's peak RSS at
the end. Prints a Markdown table of the most loaded rank: measured, predicted, ratio, per
precision, and the bf16/fp32 ratio of the measured peaks."""
import argparse, os, re, subprocess, sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = [  # (name, dp, pp, tp, --set overrides)
    ("1x1x1", 1, 1, 1, []),
    ("1x1x1 selective", 1, 1, 1, ["parallel.recompute=selective"]),
    ("1x1x1 full", 1, 1, 1, ["parallel.recompute=full"]),
    ("1x1x2", 1, 1, 2, []),
    ("1x1x2 SP", 1, 1, 2, ["parallel.sequence_parallel=true"]),
    ("2x1x1 ZeRO-1", 2, 1, 1, ["optim.zero_stage=1", "train.global_batch_size=16"]),
    ("2x1x1 ZeRO-2", 2, 1, 1, ["optim.zero_stage=2", "train.global_batch_size=16"]),
    ("2x1x1 ZeRO-3", 2, 1, 1, ["optim.zero_stage=3", "train.global_batch_size=16"]),
    ("1x2x1 1F1B", 1, 2, 1, ["train.global_batch_size=32"]),
    ("1x2x1 interleaved v2", 1, 2, 1,
     ["model.layers=8", "train.global_batch_size=32", "parallel.schedule=interleaved-1f1b", "parallel.virtual_stages=2"]),
    ("1x2x1 GPipe", 1, 2, 1, ["train.global_batch_size=32", "parallel.schedule=gpipe"]),
    ("1x4x1 1F1B", 1, 4, 1, ["model.layers=8", "train.global_batch_size=16", "parallel.micro_batch_size=4"]),
    ("1x4x1 interleaved v2", 1, 4, 1,
     ["model.layers=8", "train.global_batch_size=16", "parallel.micro_batch_size=4",
      "parallel.schedule=interleaved-1f1b", "parallel.virtual_stages=2"]),
    ("seq 1024 mb 8", 1, 1, 1, ["model.seq_len=1024"]),
    ("seq 1024 mb 8, pp 2 1F1B", 1, 2, 1, ["model.seq_len=1024", "train.global_batch_size=32"]),
    ("seq 1024 mb 8, tp 2 SP", 1, 1, 2, ["model.seq_len=1024", "parallel.sequence_parallel=true"]),
    ("weights-heavy GPipe", 1, 2, 1,
     ["model.hidden=1024", "model.heads=8", "model.ffn=4096", "model.layers=8", "model.seq_len=32",
      "parallel.micro_batch_size=1", "train.global_batch_size=8", "parallel.schedule=gpipe"]),
]


def numbers_after(output, marker):
    for line in output.splitlines():
        if marker in line:
            return [float(x) for x in line[line.rfind(": ") + 2:].split()]
    sys.exit(f"memory_vs_plan: no line with '{marker}' in:\n{output[-3000:]}")


def measure(case, precision):
    name, dp, pp, tp, extra = case
    sets = [f"parallel.dp={dp}", f"parallel.pp={pp}", f"parallel.tp={tp}", "train.steps=3", "logging.interval=1000",
            f"runtime.precision={precision}"] + extra
    cmd = [ARGS.trainer, "launch", "--nproc", str(dp * pp * tp), "--", "train",
           os.path.join(ROOT, "configs", "small.yaml")] + [a for s in sets for a in ("--set", s)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    text = out.stdout + out.stderr
    if out.returncode != 0:
        sys.exit(f"memory_vs_plan: {' '.join(cmd)} failed ({out.returncode}):\n{text[-3000:]}")
    return max(numbers_after(text, "peak memory per rank at the end")), max(
        numbers_after(text, "predicted peak memory per rank"))


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--trainer", default=os.path.join(ROOT, "build", "trainer"))
    p.add_argument("--precision", nargs="+", default=["fp32", "bf16"])
    p.add_argument("--only", nargs="*", default=None, help="layout names to run (default: all)")
    ARGS = p.parse_args()
    header = " | ".join(f"{x} MB measured / predicted (ratio)" for x in ARGS.precision)
    both = ARGS.precision == ["fp32", "bf16"]
    print(f"| layout (most loaded rank) | {header} |" + (" bf16 / fp32 measured |" if both else ""))
    print("|---|" + "---|" * (len(ARGS.precision) + both))
    for case in CASES:
        if ARGS.only and case[0] not in ARGS.only:
            continue
        results = [measure(case, precision) for precision in ARGS.precision]
        cells = [f"{m:.0f} / {p:.0f} ({p / m:.3f})" for m, p in results]
        ratio = f" {results[1][0] / results[0][0]:.3f} |" if both else ""
        print(f"| {case[0]} | " + " | ".join(cells) + " |" + ratio, flush=True)


if __name__ == "__main__":
    main()
