#!/usr/bin/env python3
"""trainer plan's predicted step time, and its split, against `trainer train`'s own measurement.

  bench/plan_vs_measured.py --trainer build/trainer [--steps 8] [--out bench-out]

For each layout (configs/small.yaml, as the memory tests): runs `trainer plan --gpu cpu --layout
DPxPPxTP --json` (this machine measured: matmul peak, copy bandwidth, Gloo loopback), then trains
the same config for --steps steps and averages its metrics.jsonl from step 3 on (the first steps
allocate). Trainer's split maps onto plan's as: compute = compute, optimizer = optimizer, comm =
tp_comm + dp_exposed, bubble = bubble + pp_comm (a stage waiting on a transfer is waiting on its
neighbour). Prints a Markdown table and writes OUT/plan_vs_measured.json."""
import argparse, json, os, statistics, subprocess, sys, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CASES = [  # (name, dp, pp, tp, --set overrides)
    ("1x1x1 mb8", 1, 1, 1, []),
    ("1x1x1 mb4", 1, 1, 1, ["parallel.micro_batch_size=4"]),
    ("1x1x1 full recompute", 1, 1, 1, ["parallel.recompute=full"]),
    ("1x1x1 selective", 1, 1, 1, ["parallel.recompute=selective"]),
    ("1x1x2 sp", 1, 1, 2, ["parallel.sequence_parallel=true"]),
    ("2x1x1 zero1", 2, 1, 1, ["optim.zero_stage=1", "train.global_batch_size=16"]),
    ("1x2x1 1f1b m4", 1, 2, 1, ["train.global_batch_size=32"]),
    ("1x2x1 gpipe m4", 1, 2, 1, ["train.global_batch_size=32", "parallel.schedule=gpipe"]),
    ("1x4x1 1f1b m4", 1, 4, 1, ["model.layers=8", "train.global_batch_size=16", "parallel.micro_batch_size=4"]),
]


def run(cmd):
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"plan_vs_measured: {' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return out.stdout


def sets(items):
    return [a for s in items for a in ("--set", s)]


def measure(case, steps, logdir):
    name, dp, pp, tp, extra = case
    overrides = [f"parallel.dp={dp}", f"parallel.pp={pp}", f"parallel.tp={tp}", f"train.steps={steps}",
                 f"logging.dir={logdir}", "logging.interval=1"] + extra
    run([ARGS.trainer, "launch", "--nproc", str(dp * pp * tp), "--", "train", CONFIG] + sets(overrides))
    rows = [json.loads(line) for line in open(os.path.join(logdir, "metrics.jsonl")) if '"step_s"' in line]
    rows = [r for r in rows if r["step"] >= 3]
    mean = lambda key: statistics.mean(r[key] for r in rows)
    return {"step": mean("step_s"), "compute": mean("compute_s"), "optimizer": mean("optimizer_s"),
            "comm": mean("comm_s"), "bubble": mean("bubble_s")}


def predict(case):
    name, dp, pp, tp, extra = case
    out = json.loads(run([ARGS.trainer, "plan", CONFIG, "--gpu", "cpu", "--layout", f"{dp}x{pp}x{tp}", "--json"]
                         + sets(extra)))
    layout = (out["layouts"] + out["not_fitting"])[0]
    t = layout["time_s"]
    return {"step": t["step"], "compute": t["compute"], "optimizer": t["optimizer"],
            "comm": t["tp_comm"] + t["dp_exposed"], "bubble": t["bubble"] + t["pp_comm"], "hardware": out["hardware"]}


def main():
    global ARGS, CONFIG
    p = argparse.ArgumentParser()
    p.add_argument("--trainer", default=os.path.join(ROOT, "build", "trainer"))
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--out", default=os.path.join(ROOT, "bench-out"))
    ARGS = p.parse_args()
    CONFIG = os.path.join(ROOT, "configs", "small.yaml")
    os.makedirs(ARGS.out, exist_ok=True)
    results = []
    print("| layout | step s measured / predicted | ratio | compute | optimizer | comm | bubble |")
    print("|---|---|---|---|---|---|---|")
    for case in CASES:
        predicted = predict(case)
        with tempfile.TemporaryDirectory() as logdir:
            measured = measure(case, ARGS.steps, logdir)
        results.append({"layout": case[0], "measured": measured, "predicted": predicted})
        cell = lambda k: f"{measured[k]:.3f} / {predicted[k]:.3f}"
        print(f"| {case[0]} | {cell('step')} | {predicted['step'] / measured['step']:.2f} | {cell('compute')} | "
              f"{cell('optimizer')} | {cell('comm')} | {cell('bubble')} |", flush=True)
    hw = results[0]["predicted"]["hardware"]
    print(f"\nhardware as measured by the first plan: {hw['fp32_tflops']:.3f} TFLOP/s, memory {hw['memory_gbs']:.1f} GB/s, "
          f"Gloo {hw['intra_gbs']:.2f} GB/s and {hw['intra_latency_us']:.0f} us")
    json.dump(results, open(os.path.join(ARGS.out, "plan_vs_measured.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
