// The model's heavy operations, routed on the CPU in fp32 to faster implementations than
// LibTorch's defaults (the measurements are in docs/tuning.md):
// - the linear layers' matrix products run in oneDNN's sgemm, loaded at run time from Debian's
//   libdnnl.so.2 when it is installed (attention is LibTorch's fused kernel, see model/gpt.cpp);
// - tanh-GELU is computed through its exact sigmoid form, 0.5(1 + tanh z) = sigmoid(2z): the
//   vectorised exp behind sigmoid is faster than the tanh behind at::gelu.
// On a GPU, in bf16, or without libdnnl they are LibTorch's own ops.
#pragma once

#include <ATen/core/Tensor.h>

namespace trainer::ops {

// y = x wᵀ (+ b) over the last dim of x: at::linear's contract (b may be undefined).
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

// GELU with the tanh approximation: at::gelu(x, "tanh").
at::Tensor gelu_tanh(const at::Tensor& x);

// Whether this process runs the CPU fp32 linear layers in oneDNN (libdnnl.so.2 could be loaded).
bool onednn_matmuls();

// Whether linear on tensors like `t` runs in oneDNN.
bool uses_onednn(const at::Tensor& t);

}  // namespace trainer::ops
