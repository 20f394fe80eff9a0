// Where training samples come from. A global batch is a pure function of (seed, step): the same
// samples in the same order whatever the layout; each DP rank then takes its slice.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <vector>

#include "config/config.hpp"
#include "data/microbatch.hpp"

namespace trainer::data {

class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // Samples [first, first + count) of the stream, as [count, seq_len + 1] int64 token ids.
  virtual at::Tensor samples(std::int64_t first, std::int64_t count) const = 0;
};

// "synthetic": each sample is an arithmetic sequence (start + k * t) mod vocab with a random
// start and stride, so a model can learn it from context and the loss visibly falls.
// "tokens": windows of a raw uint16 token file (nanoGPT layout), memory-mapped.
std::unique_ptr<BatchSource> make_source(const Config& cfg);
// Validation samples: the synthetic stream under another seed, or data.valid_path.
std::unique_ptr<BatchSource> make_validation_source(const Config& cfg);

// This DP rank's microbatches of the global batch of `step`, on `device`.
std::vector<data::MicroBatch> local_microbatches(const BatchSource& src, const Config& cfg,
                                                     std::int64_t step, int dp_rank, c10::Device device);

}  // namespace trainer::data
