// Activation recomputation (Chen et al. 2016; Megatron's "full" and "selective"): a function
// of tensors whose forward keeps nothing for backward but its inputs, and that is run again,
// with the same random state, when the gradient reaches it.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

namespace trainer::model {

using TensorFn = std::function<at::Tensor(const std::vector<at::Tensor>& inputs)>;

// fn(inputs), computed without keeping its intermediate tensors. In backward, fn runs again on
// the saved inputs (random generator of their device restored to where it was, so dropout
// draws the same mask), and its gradients flow to the inputs and to every parameter fn uses.
// Collectives inside fn run again too, in the same order on every rank. Without grad mode (or
// when nothing requires grad) it is just fn(inputs).
at::Tensor recompute(const TensorFn& fn, const std::vector<at::Tensor>& inputs);

}  // namespace trainer::model
