// `trainer train`: joins the job, builds the grid, the model chunks of this rank, data
// parallelism and the optimizer, and runs the loop.
#pragma once

#include <memory>
#include <string>

#include "config/config.hpp"
#include "distributed/comm.hpp"
#include "distributed/job_env.hpp"
#include "model/gpt.hpp"

namespace trainer {

struct TrainOptions {
  bool resume = true;             // continue from checkpoint.dir/latest when it exists
  int exit_after = -1;            // checkpoint and stop once this many steps are done
  std::string dump_dir;           // if set: final parameters and gradients, and losses, for tests
  int inject_nonfinite_step = -1;  // poison one gradient at this step (tests the skip path)
};

// Returns the process exit code.
int run_training(const Config& cfg, const distributed::JobEnv& job, const TrainOptions& opts);

// Joins the job: threads, device, the grid and every process group of this rank.
std::unique_ptr<distributed::Comm> join(const Config& cfg, const distributed::JobEnv& job);
// The model chunks this rank owns (parameters initialised from the seed).
model::GPT build_model(const Config& cfg, distributed::Comm& comm);

// Intra-op threads for this process: runtime.threads, or cores / local processes.
int threads_for(const Config& cfg, const distributed::JobEnv& job);

}  // namespace trainer
