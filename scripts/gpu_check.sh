#!/usr/bin/env bash
# The GPU check, unattended, in one go (about 8 minutes on one H200): build exactly as
# scripts/setup.sh does, against the CUDA LibTorch inside the pip `torch` of $PYTHON (default:
# the machine's python3; nothing is installed), run the GPU tests, then measure throughput of a
# ~1B Llama-style model and GPT-2 124M at bf16 (tokens/s, MFU against the measured bf16 matmul
# peak, GPU memory). Needs CMake, ninja and a C++17 compiler; no network (yaml-cpp, spdlog, fmt,
# CLI11, nlohmann/json, Catch2 and the Gloo and PCRE2 headers come from third_party/).
#
#   scripts/gpu_check.sh OUT_DIR     -> OUT_DIR/gpu_check.log, OUT_DIR/gpu_check.json
set -uo pipefail
OUT=${1:?usage: scripts/gpu_check.sh OUT_DIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/.."
exec > >(tee "$OUT/gpu_check.log") 2>&1
PY=${PYTHON:-python3}
BUILD=${BUILD_DIR:-build-gpu}
START=$(date +%s)
status=()   # "name=ok|failed" per stage, for the JSON

stage() {  # stage NAME TIMEOUT_S COMMAND...: run with a limit, record the outcome
  local name=$1 limit=$2
  shift 2
  echo "=== $name ($(($(date +%s) - START)) s in)"
  if timeout "$limit" "$@"; then status+=("$name=ok"); else status+=("$name=failed"); echo "=== $name FAILED"; fi
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'

stage build 420 env PYTHON="$PY" BUILD_DIR="$BUILD" JOBS="$(nproc)" scripts/setup.sh
T="$BUILD/trainer"
stage gpu_tests 180 "$BUILD/trainer_tests" "[gpu]"
stage cpu_equivalence 120 "$BUILD/trainer_tests" "every layout trains exactly like 1x1x1 (fp32 - 10 steps)"
# Context parallelism's CUDA path (the raw flash kernel and its backward, bf16): cp 2 on this one
# GPU over Gloo (NCCL refuses two ranks on one device) against cp 1; the losses go to the log.
for cp in 1 2; do
  stage "cp${cp}_cuda" 120 "$BUILD/trainer" launch --nproc "$cp" -- train configs/tiny-llama.yaml --no-resume \
    --set parallel.cp="$cp" --set runtime.device=cuda --set runtime.precision=bf16 --set runtime.backend=gloo \
    --set train.steps=5 --set logging.interval=1 --set checkpoint.dir=
done

peak=0
if out=$(timeout 60 "$T" bench-peak --device cuda --dtype bf16 --size 8192 --seconds 3); then
  echo "$out"
  peak=$(echo "$out" | sed -n 's/.*: \([0-9.e+-]*\) TFLOP\/s.*/\1/p' | head -1)
fi

bench() {  # bench NAME CONFIG SETS...: 20 steps at bf16 on the GPU, metrics into OUT/NAME
  local name=$1 config=$2
  shift 2
  local sets=()
  for s in "$@" "train.steps=20" "logging.interval=1" "logging.dir=$OUT/$name" "checkpoint.dir=" \
           "runtime.device=cuda" "runtime.precision=bf16" "runtime.tf32=true" "runtime.peak_tflops=$peak"; do
    sets+=(--set "$s")
  done
  stage "bench_$name" 150 "$T" train "$config" --no-resume "${sets[@]}"
  # The planner's prediction for the same run on this GPU (all three runs are 1x1x1).
  "$T" plan "$config" --gpu h200 --layout 1x1x1 --json "${sets[@]}" > "$OUT/$name/plan.json" || true
}
bench llama-1b configs/llama-1b.yaml
bench gpt2-124m configs/gpt2-124m.yaml parallel.dp=1 parallel.pp=1 parallel.tp=1 \
  parallel.micro_batch_size=16 train.global_batch_size=16
# Llama 3's attention on the GPU: 4 key/value heads for 16 query heads, full recomputation.
bench llama-1b-gqa-recompute configs/llama-1b.yaml model.kv_heads=4 parallel.recompute=full

$PY - "$OUT" "$peak" "${status[@]}" <<'PYEOF'
import json, os, statistics, sys
out, peak, stages = sys.argv[1], float(sys.argv[2] or 0), dict(s.split("=", 1) for s in sys.argv[3:])
result = {"stages": stages, "bf16_peak_tflops": peak, "benchmarks": {}}
names = ("llama-1b", "gpt2-124m", "llama-1b-gqa-recompute")
for name in names:
    path = os.path.join(out, name, "metrics.jsonl")
    if not os.path.exists(path):
        continue
    rows = [json.loads(l) for l in open(path) if '"tokens_per_s"' in l][3:]  # drop warm-up steps
    if rows:
        med = lambda k: statistics.median(r[k] for r in rows)
        result["benchmarks"][name] = {
            "tokens_per_s": med("tokens_per_s"), "mfu": med("mfu"), "tflops": med("tflops_per_rank"),
            "step_s": med("step_s"), "gpu_max_allocated_mb": max(r["gpu_max_allocated_mb"] for r in rows),
            "gpu_max_reserved_mb": max(r["gpu_max_reserved_mb"] for r in rows)}
        plan = os.path.join(out, name, "plan.json")
        if os.path.exists(plan) and os.path.getsize(plan):  # trainer plan's prediction (docs/plan.md)
            p = json.load(open(plan))
            p = (p["layouts"] + p["not_fitting"])[0]
            result["benchmarks"][name].update(
                predicted_memory_gb=p["memory_gb"], predicted_step_s=p["time_s"]["step"], predicted_mfu=p["mfu"])
            # bf16 peak against the prediction: the allocator's reserved peak holds every term but
            # the runtime one (CUDA context, cuBLAS workspaces, NCCL buffers).
            b = result["benchmarks"][name]
            b["reserved_over_predicted_without_runtime"] = (
                b["gpu_max_reserved_mb"] / 1e3 / (p["memory_gb"]["total"] - p["memory_gb"]["runtime"]))
result["passed"] = bool(stages) and all(v == "ok" for v in stages.values()) and len(result["benchmarks"]) == len(names)
json.dump(result, open(os.path.join(out, "gpu_check.json"), "w"), indent=1)
print(json.dumps(result, indent=1))
sys.exit(0 if result["passed"] else 1)
PYEOF
rc=$?
echo "=== done in $(($(date +%s) - START)) s, exit $rc"
exit $rc
