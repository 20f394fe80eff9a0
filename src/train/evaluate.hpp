// `trainer eval`: the mean next-token loss and perplexity of a checkpoint on a prepared dataset,
// at any layout (run it under a launcher like `train`).
#pragma once

#include <string>

#include "config/config.hpp"
#include "distributed/job_env.hpp"

namespace trainer {

struct EvalOptions {
  std::string checkpoint;  // a run's checkpoint.dir (latest step), a step directory, or a Hugging Face model
  std::string data;        // a Megatron .bin/.idx prefix
  int windows = 64;        // how many windows to score
};

// Scores the first `windows` consecutive, non-overlapping windows of seq_len + 1 tokens of the
// dataset's token stream (documents back to back, as written): each window's first seq_len
// tokens predict its last seq_len. The rank holding the loss prints
//   eval: W windows x S tokens: loss L, perplexity P
// `cfg` is the checkpoint's model with this run's layout. Returns the exit code.
int run_evaluation(const Config& cfg, const distributed::JobEnv& job, const EvalOptions& opts);

}  // namespace trainer
