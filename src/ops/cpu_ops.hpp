// The model's heavy operations, routed on the CPU in fp32 to faster implementations than
// LibTorch's defaults (the measurements are in docs/tuning.md):
// - the linear layers' matrix products run in oneDNN's sgemm, loaded at run time from Debian's
//   libdnnl.so.2 when it is installed (attention is LibTorch's fused kernel, see model/gpt.cpp);
// - tanh-GELU is computed through its exact sigmoid form, 0.5(1 + tanh z) = sigmoid(2z): the
//   vectorised exp behind sigmoid is faster than the tanh behind at::gelu.
// - bf16 products on a CPU without bf16 units (AVX512-BF16 or AMX-BF16, as ATen and oneDNN
//   may use them) keep bf16 storage and compute in fp32: each block of rows is converted,
//   multiplied in sgemm and rounded to bf16 once (LibTorch's bf16 GEMM there is a scalar loop,
//   ~100x slower than sgemm). The fp32 copies go in per-thread scratch kept for the process
//   (two of the largest weight's size and three blocks of at most 8 MiB; plan/plan.cpp counts
//   them). Chosen once per process from what the CPU offers, or set by
//   runtime.cpu_bf16_matmul through compute_cpu_bf16_in_fp32().
// On a GPU, in bf16 with bf16 units, or without libdnnl they are LibTorch's own ops.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

namespace trainer::ops {

// y = x wᵀ (+ b) over the last dim of x: at::linear's contract (b may be undefined).
at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b);

// GELU with the tanh approximation: at::gelu(x, "tanh").
at::Tensor gelu_tanh(const at::Tensor& x);

// Whether this process runs the CPU fp32 linear layers in oneDNN (libdnnl.so.2 could be loaded).
bool onednn_matmuls();

// Whether linear on tensors like `t` runs in oneDNN.
bool uses_onednn(const at::Tensor& t);

// What this CPU offers for bf16 products, detected once: `native` when the CPU has bf16 units and
// neither ATen's kernels (ATEN_CPU_CAPABILITY) nor oneDNN's (ONEDNN_MAX_CPU_ISA) are capped
// below them; `why` says what was found, for the log.
struct CpuBf16 {
  bool native = false;
  std::string why;
};
const CpuBf16& cpu_bf16();

// Makes every CPU bf16 product of this process compute in fp32 (true) or in LibTorch's bf16
// kernels (false). Until called: fp32 exactly when cpu_bf16() is not native.
void compute_cpu_bf16_in_fp32(bool in_fp32);
// Whether this process computes its CPU bf16 products in fp32 (as set, or as detected).
bool cpu_bf16_in_fp32();

// Whether products of tensors like `t` (CPU bf16) are computed in fp32: linear does it itself,
// and model::causal_attention converts its inputs.
bool computes_in_fp32(const at::Tensor& t);

}  // namespace trainer::ops
