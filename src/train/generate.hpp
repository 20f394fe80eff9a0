// `trainer generate`: sample text from a checkpoint, in one process (any saved layout).
#pragma once

#include <cstdint>
#include <string>

#include "data/tokenizer.hpp"

namespace trainer {

struct GenerateOptions {
  std::string checkpoint;     // a step directory, or a checkpoint.dir with `latest`
  std::string prompt;
  int max_new_tokens = 64;
  double temperature = 1.0;   // 0 = greedy
  int top_k = 0;              // 0 = all tokens
  std::int64_t seed = 0;
  data::TokenizerFiles tokenizer;
};

// Returns the prompt followed by the generated text.
std::string generate(const GenerateOptions& opts);

}  // namespace trainer
