// A process group carried through an autograd function's saved data (for the collectives its
// backward runs), as an integer: groups outlive every graph. Included only by .cpp files that
// define autograd functions (it pulls in LibTorch's autograd headers).
#pragma once

#include <torch/csrc/autograd/custom_function.h>

#include "distributed/comm.hpp"

namespace trainer::distributed {

inline void save_group(torch::autograd::AutogradContext* ctx, Group* g) {
  ctx->saved_data["group"] = reinterpret_cast<int64_t>(g);
}

inline Group& group_of(torch::autograd::AutogradContext* ctx) {
  return *reinterpret_cast<Group*>(ctx->saved_data["group"].toInt());
}

}  // namespace trainer::distributed
