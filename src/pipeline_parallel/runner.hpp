// Executes a pipeline schedule (schedule.hpp) on this rank's model chunks: forward and
// backward compute, activations and their gradients sent to the neighbouring stages with
// non-blocking point-to-point operations over the PP group (on NCCL, in the batches
// transfer_batches makes).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <map>
#include <utility>
#include <vector>

#include "config/config.hpp"
#include "data/microbatch.hpp"
#include "distributed/comm.hpp"
#include "model/gpt.hpp"
#include "pipeline_parallel/schedule.hpp"

namespace trainer::pipeline_parallel {

struct InFlight;  // runner.cpp: one (microbatch, chunk) between its forward and backward
class Mailbox;

struct StepStats {
  double loss = 0;            // sum of this rank's scaled microbatch losses (last stage only)
  double wait_seconds = 0;    // blocked on a receive: the pipeline bubble as this stage sees it
  int max_in_flight = 0;      // most microbatches whose activations were held at once
};

// How a stage starts its point-to-point transfers, chosen once per run.
enum class Transfers {
  Local,        // every chunk on this rank (pp = 1 with virtual stages): handed over in memory
  OneByOne,     // each transfer alone, a receive posted one compute action ahead (Gloo)
  OrderPaired,  // in batches every stage agrees on (NCCL pairs messages by their order)
};

class Runner {
 public:
  Runner(const Config& cfg, model::GPT& model, distributed::Comm& comm);

  // One training step's forward+backward over `microbatches` (whole sequences: the runner keeps
  // this CP rank's chunks of each, context_parallel.hpp). Each microbatch loss is
  // multiplied by `loss_scale` (1 / tokens in the global batch), so gradients accumulate to
  // the gradient of the mean loss. `before_last_backward(chunk)` runs just before the last
  // backward of each local chunk (where data-parallel reduction may start).
  StepStats train_step(const std::vector<data::MicroBatch>& microbatches, double loss_scale,
                       const std::function<void(int chunk)>& before_last_backward);

  // Forward only, no gradients, no dropout (evaluation); returns the summed scaled loss on the
  // last stage.
  double eval_step(const std::vector<data::MicroBatch>& microbatches, double loss_scale);

  bool holds_loss() const;  // this rank owns the last model chunk

 private:
  // The one walk of this stage's action list, for training (with backward) or evaluation.
  StepStats run(const std::vector<data::MicroBatch>& microbatches, double loss_scale, bool training,
                const std::function<void(int chunk)>& before_last_backward);
  void forward(const Action& a, const data::MicroBatch& mb, double loss_scale, bool training,
               std::map<std::pair<int, int>, InFlight>& live, StepStats& stats, at::Tensor& loss_total);
  void backward(const Action& a, std::map<std::pair<int, int>, InFlight>& live, StepStats& stats);
  at::Tensor activation_buffer() const;
  int tag(const Message& msg, int microbatches) const;
  // A stage's actions for one step: the schedule (training) or its forward actions alone.
  std::vector<Action> actions_of(int stage, bool training, int microbatches) const;
  const std::vector<Batch>& transfer_batches(bool training, int microbatches) const;
  void start_transfers(const std::vector<Action>& actions, const Batch& batch, int microbatches,
                       std::map<std::pair<int, int>, InFlight>& live, Mailbox& mailbox) const;

  const Config& cfg_;
  model::GPT& model_;
  distributed::Comm& comm_;
  int stage_, stages_, chunks_;
  Transfers transfers_;
  mutable std::map<std::pair<bool, int>, std::vector<Batch>> batches_;  // by (training, microbatches)
};

}  // namespace trainer::pipeline_parallel
