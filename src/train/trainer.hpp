// `trainer train`: joins the job, builds the grid, the model chunks of this rank, data
// parallelism and the optimizer, and runs the loop.
#pragma once

#include <string>

#include "config/config.hpp"
#include "dist/job_env.hpp"

namespace trainer {

struct TrainOptions {
  std::string dump_dir;      // if set: final parameters and gradients, and losses, for tests
  int inject_nonfinite_step = -1;  // poison one gradient at this step (tests the skip path)
};

// Returns the process exit code.
int run_training(const Config& cfg, const dist::JobEnv& job, const TrainOptions& opts);

// Intra-op threads for this process: runtime.threads, or cores / local processes.
int threads_for(const Config& cfg, const dist::JobEnv& job);

}  // namespace trainer
