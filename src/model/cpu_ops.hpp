// The model's heavy operations, routed on the CPU in fp32 to faster implementations than
// LibTorch 1.13's defaults (measured on this 2-core machine):
// - matrix products run in oneDNN's sgemm when the build has oneDNN (Debian's LibTorch already
//   loads it): 300-420 GFLOP/s on every shape of the benchmark models, where LibTorch's path
//   (OpenBLAS under the OPENBLAS_CORETYPE this machine's environment forces) does 100-115 on the
//   tiny model's shapes and ~200 on large ones, and its batched matmul runs one product at a
//   time on one thread;
// - tanh-GELU is computed through its exact sigmoid form, 0.5(1 + tanh z) = sigmoid(2z): the
//   vectorised exp behind sigmoid is ~5x faster than the tanh behind at::gelu.
// On a GPU, in bf16, or in a build without oneDNN they are LibTorch's own ops.
#pragma once

#include <ATen/core/Tensor.h>

namespace trainer::model {

// y = x wᵀ (+ b) over the last dim of x: at::linear's contract (b may be undefined).
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

// scale · (a · b) over the last two dims; a and b have the same leading (batch) dims. (The scale
// rides in the product: attention's 1/sqrt(d) costs no pass over the scores.)
at::Tensor matmul(const at::Tensor& a, const at::Tensor& b, double scale = 1.0);

// GELU with the tanh approximation: at::gelu(x, "tanh").
at::Tensor gelu_tanh(const at::Tensor& x);

// Whether this build runs the CPU fp32 matmuls in oneDNN.
bool onednn_matmuls();

// Whether linear/matmul on tensors like `t` run in oneDNN.
bool uses_onednn(const at::Tensor& t);

}  // namespace trainer::model
