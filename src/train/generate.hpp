// `trainer generate`: sample text from a checkpoint, in one process (any saved layout).
#pragma once

#include <cstdint>
#include <string>

namespace trainer {

struct GenerateOptions {
  std::string checkpoint;     // a step directory, or a checkpoint.dir with `latest`
  std::string prompt;
  int max_new_tokens = 64;
  double temperature = 1.0;   // 0 = greedy
  int top_k = 0;              // 0 = all tokens
  std::int64_t seed = 0;
  std::string vocab_file, merges_file;  // GPT-2 BPE; byte-level when empty
};

// Returns the prompt followed by the generated text.
std::string generate(const GenerateOptions& opts);

}  // namespace trainer
