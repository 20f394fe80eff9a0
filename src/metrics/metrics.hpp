// What a run reports: the startup summary, one step line per logging.interval steps, and the
// same figures as one JSON object per line in <logging.dir>/metrics.jsonl (doubles at full
// precision, counts as integers, a non-finite figure as null: JSON has no NaN or infinity) and
// as TensorBoard scalars in <logging.dir>/events.out.tfevents.*.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "distributed/comm.hpp"
#include "metrics/tensorboard.hpp"
#include "model/params.hpp"

namespace trainer::metrics {

struct StepTimes {
  // seconds; compute is what is left of total: forward, backward, data
  double total = 0, compute = 0, optimizer = 0, comm = 0, bubble = 0;
};

// Bytes this rank put into each group's operations during one step (the communication layer's
// counters): what shows that bf16 halves the TP and PP traffic.
struct StepBytes {
  std::int64_t tp = 0, pp = 0, dp = 0;
};

// One optimizer step's figures, as logged.
struct StepRecord {
  int step = 0;  // 1-based: steps done
  double loss = 0, lr = 0, grad_norm = 0;
  StepTimes times;
  StepBytes bytes;
  int skipped = 0;             // steps skipped so far for a non-finite gradient norm
  int max_in_flight = 0;       // most microbatches whose activations the printing stage held
  int buckets_overlapped = 0;  // DP buckets whose reduction started while backward ran
  int buckets = 0;
};

// TFLOP/s achieved per process and MFU (0 when the peak is unknown).
struct Throughput {
  double tokens_per_s = 0, tflops_per_rank = 0, mfu = 0;
};
Throughput throughput(const ModelConfig& m, double tokens_per_step, double step_seconds,
                      int world_size, double peak_tflops);

double peak_rss_mb();

class StepLogger {
 public:
  // `prints` is true on the one rank that owns the loss and reports it.
  StepLogger(const Config& cfg, distributed::Comm& comm, bool prints);
  // Rank 0 prints the layout, parameters and the planner's predicted memory of every rank
  // (`predicted_bytes`: this rank's, src/plan/); `bubble` is the schedule's theoretical bubble
  // fraction (pipeline_parallel::theoretical_bubble).
  void startup(const std::vector<model::Param>& params, std::int64_t optimizer_bytes, int microbatches,
               double bubble, double predicted_bytes);
  // Rank 0 prints every rank's measured peak memory so far; `when` says at which point.
  void peak_memory(const std::string& when);
  void step(const StepRecord& r);
  // A validation result: mean loss over the evaluation batches, and its perplexity.
  void eval(int step, double loss);

 private:
  const Config& cfg_;
  distributed::Comm& comm_;
  bool prints_;
  std::ofstream jsonl_;
  std::optional<TensorBoardWriter> tensorboard_;
  double elapsed_ = 0;
};

}  // namespace trainer::metrics
