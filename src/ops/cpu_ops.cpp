#include "ops/cpu_ops.hpp"

#include <torch/csrc/autograd/custom_function.h>
#include <torch/torch.h>

#include <dlfcn.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace trainer::ops {

using torch::autograd::AutogradContext;
using torch::autograd::Function;
using torch::autograd::variable_list;

namespace {

// oneDNN's row-major sgemm: C = alpha·op(A)·op(B) + beta·C (status 0 = success). A stable C
// function since oneDNN 1.0, taken from Debian's libdnnl at run time (see sgemm()).
using Sgemm = int (*)(char transa, char transb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// The copy of oneDNN inside libtorch_cpu is hidden, but LibTorch exports some of its template
// instances (std::vector<dnnl::impl::...>); linked normally, Debian's libdnnl would bind to
// those and fail ("unimplemented"). RTLD_DEEPBIND makes it use its own. Null when absent.
Sgemm sgemm() {
  static const Sgemm fn = [] {
    void* lib = dlopen("libdnnl.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    return lib ? reinterpret_cast<Sgemm>(dlsym(lib, "dnnl_sgemm")) : nullptr;
  }();
  return fn;
}

bool cpu_fp32(const at::Tensor& t) { return t.device().is_cpu() && t.scalar_type() == at::kFloat; }

}  // namespace

bool onednn_matmuls() { return sgemm() != nullptr; }

bool uses_onednn(const at::Tensor& t) { return onednn_matmuls() && cpu_fp32(t); }

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

// c = a · b for matrices, into a new contiguous tensor; oneDNN spreads it over the intra-op threads.
at::Tensor gemm(const at::Tensor& a_in, const at::Tensor& b_in) {
  const int64_t M = a_in.size(0), K = a_in.size(1), N = b_in.size(1);
  TORCH_CHECK(b_in.size(0) == K, "gemm: shapes ", a_in.sizes(), " and ", b_in.sizes(), " do not multiply");
  at::Tensor c = at::empty({M, N}, a_in.options());
  if (c.numel() == 0) return c;
  if (K == 0) return c.zero_();
  const Operand a = operand(a_in), b = operand(b_in);
  const int s = sgemm()(a.trans, b.trans, M, N, K, 1.0f, a.t.data_ptr<float>(), a.ld, b.t.data_ptr<float>(), b.ld,
                        0.0f, c.data_ptr<float>(), N);
  if (s != 0) throw std::runtime_error("oneDNN sgemm failed with status " + std::to_string(s));
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
  if (uses_onednn(x)) {
    at::Tensor y = Linear::apply(x, w);
    return b.defined() ? y.add_(b) : y;
  }
  return at::linear(x, w, b);
}

}  // namespace trainer::ops
