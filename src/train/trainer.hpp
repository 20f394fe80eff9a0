// `trainer train`: joins the job, builds the grid, the model chunks of this rank, data
// parallelism and the optimizer, and runs the loop.
#pragma once

#include <memory>
#include <string>

#include "config/config.hpp"
#include "distributed/comm.hpp"
#include "distributed/job_env.hpp"
#include "model/gpt.hpp"
#include "pipeline_parallel/runner.hpp"

namespace trainer {

// What the tests use to look inside a run and to provoke a fault; off by default (hidden
// options of `trainer train`).
struct TestHooks {
  std::string dump_dir;            // losses.txt (loss, gradient norm per step), final parameters and gradients
  int inject_nonfinite_step = -1;  // poison one gradient at this step (the skip and abort paths)
};

struct TrainOptions {
  bool resume = true;   // continue from checkpoint.dir/latest when it exists
  int exit_after = -1;  // checkpoint and stop once this many steps are done
  TestHooks hooks;
};

// Returns the process exit code.
int run_training(const Config& cfg, const distributed::JobEnv& job, const TrainOptions& opts);

// Joins the job: threads, device, the grid and every process group of this rank.
std::unique_ptr<distributed::Comm> join(const Config& cfg, const distributed::JobEnv& job);
// The model chunks this rank owns (parameters initialised from the seed).
model::GPT build_model(const Config& cfg, distributed::Comm& comm);

// The loss lives on the last pipeline stage, a share on each DP rank: the sum over DP there (on
// other stages `local` comes back unchanged and means nothing).
double global_loss(double local, const pipeline_parallel::Runner& runner, distributed::Comm& comm);
// The one rank that reports the loss: the last stage's dp 0, tp 0.
bool reports_loss(const pipeline_parallel::Runner& runner, const distributed::Comm& comm);

}  // namespace trainer
