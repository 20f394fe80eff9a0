// The model's matrix products. On the CPU in fp32 they run in oneDNN's sgemm when the build has
// oneDNN (Debian's LibTorch already loads it): measured here on 2 cores it does 310-420 GFLOP/s
// on every shape of the benchmark models, where LibTorch's own path (OpenBLAS, under the
// OPENBLAS_CORETYPE this machine's environment forces) does 100-115 on the tiny model's shapes
// and ~200 on large ones, and its batched matmul runs one product at a time on one thread.
// Everywhere else (GPU, bf16, a build without oneDNN) they are at::linear and at::matmul.
#pragma once

#include <ATen/core/Tensor.h>

namespace trainer::model {

// y = x wᵀ (+ b) over the last dim of x: at::linear's contract (b may be undefined).
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

// a · b over the last two dims; a and b have the same leading (batch) dims.
at::Tensor matmul(const at::Tensor& a, const at::Tensor& b);

// Whether linear/matmul on tensors like `t` run in oneDNN.
bool uses_onednn(const at::Tensor& t);

}  // namespace trainer::model
