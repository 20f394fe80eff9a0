// `trainer plan`: for a model, a global batch and N devices, which layouts fit in memory and how
// fast each would train. Every figure is a formula of the config and the hardware (the formulas
// and their sources are in docs/plan.md); nothing here runs a model or touches the network, so
// `train` and `check-config` use the memory model as a pre-flight before any allocation.
//
// Placement follows the grid (src/distributed/grid.hpp): tp varies fastest, then dp, then pp, so
// a TP group sits inside a node, DP groups leave it once tp·dp exceeds a node, and PP crosses
// nodes last.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "config/layout.hpp"
#include "plan/hardware.hpp"

namespace trainer::plan {

// Bytes on the most loaded rank, by term.
struct Memory {
  double weights = 0, gradients = 0, optimizer = 0;
  double activations = 0;  // kept for backward by the in-flight microbatches, with temporaries
  double logits = 0;       // the head's logits, softmax and their gradients (last stage)
  double buffers = 0;      // pipeline receive buffers, reduced-precision gradient copies
  double runtime = 0;      // the process (CPU) or the CUDA context and NCCL (GPU)
  int stage = 0;           // the pipeline stage of that rank
  // Every term by name ("weights", ... "runtime"), the names the JSON report uses.
  std::vector<std::pair<const char*, double>> terms() const;
  double total() const;
  std::pair<std::string, double> biggest() const;  // the largest term's name and bytes
};

// Seconds of one optimizer step, by term (the slowest pipeline stage).
struct Time {
  double compute = 0;     // forward, backward and recomputation of every microbatch
  double tp_comm = 0;     // tensor-parallel collectives (not overlapped)
  double cp_comm = 0;     // context parallelism's key/value all-gathers and reduce-scatters (not overlapped)
  double pp_comm = 0;     // pipeline sends and receives on the critical path
  double bubble = 0;      // pipeline fill and drain
  double dp_exposed = 0;  // DP collectives compute does not hide: gradient reduction, parameter gathers
  double optimizer = 0;   // gradient norm and AdamW
  // Every term by name ("compute", ... "optimizer"), the names the JSON report uses.
  std::vector<std::pair<const char*, double>> terms() const;
  double step() const;
};

struct Prediction {
  Layout layout;
  Memory memory;
  std::vector<double> stage_totals;  // total bytes of a rank of each pipeline stage
  double available = 0;  // bytes a rank has (GPU: the device; CPU: the machine's ÷ its ranks)
  bool fits = false;
  Time time;
  double tokens_per_s = 0;
  double model_tflops = 0;     // per device, model FLOPs (model/flops.hpp) per second
  double hardware_tflops = 0;  // per device, counting recomputation
  double mfu = 0;              // model_tflops / peak
};

// The prediction for `layout` of cfg's model and global batch on `hw` (cfg.plan: assumptions
// and efficiencies; cfg.runtime: precision). `with_time` false: memory only (no rates needed).
// A CPU's memory holds all its ranks, so there `fits` compares their sum with the machine's.
Prediction predict(const Config& cfg, const Layout& layout, const Hardware& hw, bool with_time = true);

// Every layout of `gpus` devices that the trainer accepts for this model and batch (dp, pp,
// tp, virtual stages, micro-batch size ≤ 64, recomputation, ZeRO stage 0-3 with ZeRO-3's
// fsdp_reshard_after_forward either way where it matters (no PP), sequence parallelism),
// predicted, fastest first.
std::vector<Prediction> search(const Config& cfg, int gpus, const Hardware& hw, bool with_time = true);

// cfg as the planner reads it: no data files or initial weights to look for.
Config for_planning(Config cfg);

}  // namespace trainer::plan
