// One microbatch of samples: what the data layer produces and the pipeline runner feeds the
// model (the runner includes it from here).
#pragma once

#include <ATen/core/Tensor.h>

namespace trainer::data {

struct MicroBatch {
  at::Tensor tokens;   // [B, S] int64 (used by the first stage)
  at::Tensor targets;  // [B, S] int64 (used by the last stage)
};

}  // namespace trainer::data
