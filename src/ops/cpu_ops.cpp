#include "ops/cpu_ops.hpp"

#include "ops/mapped.hpp"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include <ATen/Version.h>
#include <ATen/cpu/Utils.h>

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <optional>

#include <stdexcept>
#include <string>
#include <vector>

namespace trainer::ops {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

namespace {

// oneDNN's row-major sgemm: C = alpha·op(A)·op(B) + beta·C (status 0 = success), and the ISA its
// kernels use (what the CPU has, capped by ONEDNN_MAX_CPU_ISA). Stable C functions since oneDNN
// 1.0, taken from Debian's libdnnl at run time (see onednn()).
using Sgemm = int (*)(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
using EffectiveIsa = int (*)();

struct OneDnn {
  Sgemm sgemm = nullptr;
  EffectiveIsa effective_isa = nullptr;
};

// The copy of oneDNN inside libtorch_cpu is hidden, but LibTorch exports some of its template
// instances (std::vector<dnnl::impl::...>); linked normally, Debian's libdnnl would bind to
// those and fail ("unimplemented"). RTLD_DEEPBIND makes it use its own. Null members when absent.
const OneDnn& onednn() {
  static const OneDnn lib = [] {
    OneDnn out;
    if (void* handle = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND)) {
      out.sgemm = reinterpret_cast<Sgemm>(dlsym(handle, "dnnl_sgemm"));
      out.effective_isa = reinterpret_cast<EffectiveIsa>(dlsym(handle, "dnnl_get_effective_cpu_isa"));
    }
    return out;
  }();
  return lib;
}

Sgemm sgemm() { return onednn().sgemm; }

bool cpu_fp32(const at::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == at::kFloat; }

// dnnl_cpu_isa_t is a bit mask: an ISA includes every bit of the ISAs below it.
constexpr int kAvx512CoreBf16 = 0xe7;
std::string isa_name(int isa) {
  static const std::vector<std::pair<int, const char*>> names = {
      {0x1, "sse41"},           {0x3, "avx"},           {0x7, "avx2"}, {0x407, "avx2_vnni"}, {0x27, "avx512_core"},
      {0x67, "avx512_core_vnni"}, {0xe7, "avx512_core_bf16"}, {0x3e7, "avx512_core_amx"}};
  for (const auto& [value, name] : names)
    if (value == isa) return name;
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%x", isa);
  return hex;
}

CpuBf16 detect_cpu_bf16() {
  const auto caps = at::cpu::get_cpu_capabilities();
  auto has = [&](const char* flag) {
    const auto it = caps.find(flag);
    return it != caps.end() && it->second.isBool() && it->second.toBool();
  };
  CpuBf16 out;
  const bool cpu = has("avx512_bf16") || has("amx_bf16");
  const std::string aten = at::get_cpu_capability();  // ATen's kernels: ATEN_CPU_CAPABILITY caps them
  const bool aten_avx512 = aten.rfind("AVX512", 0) == 0;
  std::string why = std::string("CPU bf16 units (AVX512-BF16 or AMX-BF16): ") + (cpu ? "yes" : "no") +
                    "; ATen's kernels: " + aten;
  bool onednn_bf16 = true;
  if (onednn().effective_isa) {
    const int isa = onednn().effective_isa();
    onednn_bf16 = (isa & kAvx512CoreBf16) == kAvx512CoreBf16;
    why += "; oneDNN's ISA: " + isa_name(isa);
  } else {
    why += "; oneDNN's ISA: unknown (no libdnnl.so.2)";
  }
  out.native = cpu && aten_avx512 && onednn_bf16;
  out.why = why;
  return out;
}

// Whether CPU bf16 products run in fp32 (compute_cpu_bf16_in_fp32); until set, what the CPU offers.
std::atomic<int> g_bf16_in_fp32{-1};

}  // namespace

bool onednn_matmuls() { return sgemm() != nullptr; }

bool uses_onednn(const at::Tensor& t) { return onednn_matmuls() && cpu_fp32(t); }

const CpuBf16& cpu_bf16() {
  static const CpuBf16 detected = detect_cpu_bf16();
  return detected;
}

void compute_cpu_bf16_in_fp32(bool in_fp32) { g_bf16_in_fp32 = in_fp32 ? 1 : 0; }

bool cpu_bf16_in_fp32() {
  const int set = g_bf16_in_fp32.load();
  return set < 0 ? !cpu_bf16().native : set == 1;
}

bool computes_in_fp32(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kBFloat16 && cpu_bf16_in_fp32();
}

namespace {

// One operand of a row-major product: a matrix read as stored ('N') or transposed ('T'),
// whichever has contiguous rows; anything else is copied once.
struct Operand {
  at::Tensor t;
  char trans;
  int64_t ld;
};

Operand operand(const at::Tensor& t) {
  const int64_t rows = t.size(0), cols = t.size(1);
  if (t.stride(1) == 1 && t.stride(0) >= std::max<int64_t>(1, cols)) return {t, 'N', t.stride(0)};
  if (t.stride(0) == 1 && t.stride(1) >= std::max<int64_t>(1, rows)) return {t, 'T', t.stride(1)};
  return {t.contiguous(), 'N', std::max<int64_t>(1, cols)};
}

// c = a · b (beta = 0) or c += a · b (beta = 1) for fp32 matrices, c contiguous [M, N]: oneDNN's
// sgemm over the intra-op threads where libdnnl is loaded, else LibTorch's at::mm (MKL).
void gemm_into(const at::Tensor& a_in, const at::Tensor& b_in, at::Tensor& c, float beta) {
  const int64_t M = a_in.size(0), K = a_in.size(1), N = b_in.size(1);
  TORCH_CHECK(b_in.size(0) == K, "gemm: shapes ", a_in.sizes(), " and ", b_in.sizes(), " do not multiply");
  if (c.numel() == 0) return;
  if (K == 0) {
    if (beta == 0) c.zero_();
    return;
  }
  if (!sgemm()) {
    if (beta == 0) at::mm_out(c, a_in, b_in);
    else c.addmm_(a_in, b_in);
    return;
  }
  const Operand a = operand(a_in), b = operand(b_in);
  const int s = sgemm()(a.trans, b.trans, M, N, K, 1.0f, a.t.data_ptr<float>(), a.ld, b.t.data_ptr<float>(), b.ld,
                        beta, c.data_ptr<float>(), N);
  if (s != 0) throw std::runtime_error("oneDNN sgemm failed with status " + std::to_string(s));
}

// c = a · b for fp32 matrices, into a new contiguous tensor.
at::Tensor gemm(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor c = at::empty({a.size(0), b.size(1)}, a.options());
  gemm_into(a, b, c, 0.0f);
  return c;
}

at::Tensor transposed(const at::Tensor& t) { return t.transpose(-2, -1); }

// y = x wᵀ; the bias is added outside (in place), so undefined tensors never enter autograd.
struct Linear : Function<Linear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w) {
    const at::Tensor x2 = x.reshape({-1, x.size(-1)});
    ctx->save_for_backward({x2, w});
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = w.size(0);
    return at::_unsafe_view(gemm(x2, transposed(w)), shape);  // not a view in autograd's eyes
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x2 = saved[0];
    const at::Tensor& w = saved[1];
    const at::Tensor g = grads[0].reshape({-1, w.size(0)});
    std::vector<int64_t> x_shape = grads[0].sizes().vec();
    x_shape.back() = w.size(1);
    at::Tensor dx = ctx->needs_input_grad(0) ? gemm(g, w).view(x_shape) : at::Tensor();
    at::Tensor dw = ctx->needs_input_grad(1) ? gemm(transposed(g), x2) : at::Tensor();
    return {dx, dw};
  }
};

// Rows per block of the bf16 products computed in fp32: the fp32 copies of one block of an
// operand and of the result stay within ~8 MB, so the fp32 work never holds a whole [tokens,
// vocab] or [tokens, ffn] tensor.
int64_t block_rows(int64_t rows, int64_t width) {
  constexpr int64_t kBlockBytes = 8 << 20;
  return std::clamp<int64_t>(kBlockBytes / (4 * std::max<int64_t>(width, 1)), 1, std::max<int64_t>(rows, 1));
}

// The fp32 buffers of the bf16 products computed in fp32, one per role, kept by each thread for
// the process and grown to the largest use, in pages of their own (ops/mapped.hpp) rather than
// glibc's heap. Allocated from the heap on every call, these blocks and weight copies left
// holes between the activations that the heap could not reuse: at dp 2 on the small model its
// size rose 215 MB above the peak of live bytes, against 108 MB with LibTorch's own bf16
// kernels (measured with an allocation counter and malloc_stats). One persistent set costs what
// the planner charges: two weight-sized buffers and three blocks.
enum Scratch { kWeight32, kGrad32, kOperand32, kOther32, kResult32, kScratches };

// A contiguous fp32 [rows, cols] view of scratch `role`; its contents are undefined.
at::Tensor scratch(Scratch role, int64_t rows, int64_t cols) {
  thread_local std::array<at::Tensor, kScratches> buffers;
  at::Tensor& buffer = buffers[role];
  const int64_t n = std::max<int64_t>(rows * cols, 1);
  if (!buffer.defined() || buffer.numel() < n) {
    buffer = at::Tensor();  // the old one goes first: never both at once
    buffer = empty_mapped(n, at::dtype(at::kFloat));
  }
  return buffer.narrow(0, 0, rows * cols).view({rows, cols});
}

// `t` (bf16, 2-D) converted into scratch `role`.
at::Tensor to_fp32(Scratch role, const at::Tensor& t) { return scratch(role, t.size(0), t.size(1)).copy_(t); }

// y = x wᵀ + b for bf16 tensors on a CPU without bf16 units: bf16 storage, fp32 compute. Each
// block of rows is converted to fp32, multiplied in sgemm, given its bias and rounded to bf16
// once: the numerics of a bf16 GEMM with fp32 accumulation, at fp32 speed (LibTorch's own bf16
// GEMM is a scalar loop there). The fp32 copies live in the thread's scratch; autograd keeps the
// bf16 x and w, as at::linear does. `b` may be empty (autograd takes an undefined tensor for an
// input only inside an optional).
struct Bf16LinearInFp32 : Function<Bf16LinearInFp32> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const std::optional<at::Tensor>& bias) {
    const at::Tensor b = bias.value_or(at::Tensor());
    const at::Tensor x2 = x.reshape({-1, x.size(-1)});
    ctx->save_for_backward({x2, w});
    ctx->saved_data["bias"] = b.defined();
    const int64_t M = x2.size(0), N = w.size(0);
    const at::Tensor wt = transposed(to_fp32(kWeight32, w));
    const at::Tensor b32 = b.defined() ? b.to(at::kFloat) : at::Tensor();
    at::Tensor y = at::empty({M, N}, x.options());
    const int64_t R = block_rows(M, std::max(N, x2.size(1)));
    for (int64_t r = 0; r < M; r += R) {
      const int64_t n = std::min(R, M - r);
      at::Tensor block = scratch(kResult32, n, N);
      gemm_into(to_fp32(kOperand32, x2.narrow(0, r, n)), wt, block, 0.0f);
      y.narrow(0, r, n).copy_(b32.defined() ? block.add_(b32) : block);
    }
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = N;
    return at::_unsafe_view(y, shape);
  }
  // dx = g w per block of rows; dw = gᵀ x and db = Σ g accumulated over the blocks in fp32,
  // each rounded once.
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x2 = saved[0];
    const at::Tensor& w = saved[1];
    const at::Tensor g = grads[0].reshape({-1, w.size(0)});
    const int64_t M = g.size(0), N = w.size(0), K = w.size(1);
    const bool need_dx = ctx->needs_input_grad(0), need_dw = ctx->needs_input_grad(1), need_db = ctx->saved_data["bias"].toBool() && ctx->needs_input_grad(2);
    const at::Tensor w32 = need_dx ? to_fp32(kWeight32, w) : at::Tensor();
    at::Tensor dx = need_dx ? at::empty({M, K}, g.options()) : at::Tensor();
    at::Tensor dw32 = need_dw ? scratch(kGrad32, N, K) : at::Tensor();
    at::Tensor db32 = need_db ? at::zeros({N}, g.options().dtype(at::kFloat)) : at::Tensor();
    const int64_t R = block_rows(M, std::max(N, K));
    for (int64_t r = 0; r < M; r += R) {
      const int64_t n = std::min(R, M - r);
      const at::Tensor g32 = to_fp32(kOperand32, g.narrow(0, r, n));
      if (need_dx) {
        at::Tensor block = scratch(kResult32, n, K);
        gemm_into(g32, w32, block, 0.0f);
        dx.narrow(0, r, n).copy_(block);
      }
      if (need_dw) gemm_into(transposed(g32), to_fp32(kOther32, x2.narrow(0, r, n)), dw32, r == 0 ? 0.0f : 1.0f);
      if (need_db) db32.add_(g32.sum(0));
    }
    std::vector<int64_t> x_shape = grads[0].sizes().vec();
    x_shape.back() = K;
    return {need_dx ? dx.view(x_shape) : at::Tensor(), need_dw ? dw32.to(w.scalar_type()) : at::Tensor(),
            need_db ? db32.to(w.scalar_type()) : at::Tensor()};
  }
};

}  // namespace

namespace {

// GELU(x) = x·s with s = sigmoid(2z), z = sqrt(2/pi)·(x + 0.044715x³); s is kept for backward:
// dGELU/dx = s + 2·sqrt(2/pi)·(x + 3·0.044715x³)·s·(1 − s).
constexpr double kTwoSqrt2OverPi = 1.5957691216057308;  // 2·sqrt(2/pi)
constexpr double kCubic = 0.044715;

struct GeluTanh : Function<GeluTanh> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    at::Tensor s = at::addcmul(x, x * x, x, kCubic).mul_(kTwoSqrt2OverPi).sigmoid_();
    ctx->save_for_backward({x, s});
    return x * s;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &s = saved[1];
    const at::Tensor w = at::addcmul(x, x * x, x, 3 * kCubic);  // x + 3·0.044715x³
    const at::Tensor slope = at::addcmul(s, s, s, -1.0);         // s·(1 − s)
    return {at::addcmul(s, w, slope, kTwoSqrt2OverPi).mul_(grads[0])};
  }
};

}  // namespace

at::Tensor gelu_tanh(const at::Tensor& x) {
  if (cpu_fp32(x)) return GeluTanh::apply(x);
  return at::gelu(x, "tanh");
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (computes_in_fp32(x)) return Bf16LinearInFp32::apply(x, w, b.defined() ? std::optional<at::Tensor>(b) : std::nullopt);
  if (uses_onednn(x)) {
    at::Tensor y = Linear::apply(x, w);
    return b.defined() ? y.add_(b) : y;
  }
  return at::linear(x, w, b);
}

}  // namespace trainer::ops
