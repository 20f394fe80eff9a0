// The CPU fast paths of src/ops/cpu_ops against LibTorch's own ops, and the model's fused
// attention against the explicit math: forward values and every input gradient agree within
// 1e-5 of each tensor's largest entry, also for the strided views the model feeds them (q, k, v
// sliced out of the fused qkv output).
#include "catch_torch.hpp"

#include <ATen/ATen.h>
#include <torch/torch.h>

#include "helpers.hpp"
#include "model/gpt.hpp"
#include "ops/cpu_ops.hpp"

using namespace trainer;

namespace {

// testing::max_rel_diff, after checking the shapes agree (a broadcast would hide a mismatch).
double rel_diff(const at::Tensor& got, const at::Tensor& want) {
  REQUIRE(got.sizes() == want.sizes());
  return testing::max_rel_diff(want, got);
}

at::Tensor leaf(at::Tensor t) { return t.detach().clone().set_requires_grad(true); }

// Runs `ours` and `reference` on copies of `inputs`, backpropagates the same upstream gradient
// and returns the largest relative difference over the output and the input gradients.
template <class F, class G>
double compare(const std::vector<at::Tensor>& inputs, F ours, G reference) {
  std::vector<at::Tensor> a, b;
  for (const auto& t : inputs) {
    a.push_back(leaf(t));
    b.push_back(leaf(t));
  }
  at::Tensor ya = ours(a), yb = reference(b);
  at::Tensor upstream = at::randn_like(yb);
  ya.backward(upstream);
  yb.backward(upstream);
  double worst = rel_diff(ya, yb);
  for (size_t i = 0; i < inputs.size(); ++i) worst = std::max(worst, rel_diff(a[i].grad(), b[i].grad()));
  return worst;
}

}  // namespace

TEST_CASE("cpu_ops linear equals at::linear - with and without bias, 2-D and 3-D inputs", "[numerics][model][cpu_ops]") {
  torch::manual_seed(1);
  // The path under test is oneDNN's where libdnnl.so.2 is installed (scripts/setup.sh does).
  if (ops::onednn_matmuls()) CHECK(ops::uses_onednn(at::zeros({1})));
  else WARN("no libdnnl.so.2: ops::linear is LibTorch's own here");
  CHECK_FALSE(ops::uses_onednn(at::zeros({1}, at::kBFloat16)));
  for (auto shape : {std::vector<int64_t>{6, 7}, std::vector<int64_t>{3, 5, 7}}) {
    at::Tensor x = at::randn(shape), w = at::randn({4, 7}), b = at::randn({4});
    CHECK(compare({x, w, b}, [](auto& t) { return ops::linear(t[0], t[1], t[2]); },
                  [](auto& t) { return at::linear(t[0], t[1], t[2]); }) < 1e-5);
    CHECK(compare({x, w}, [](auto& t) { return ops::linear(t[0], t[1], at::Tensor()); },
                  [](auto& t) { return at::linear(t[0], t[1]); }) < 1e-5);
  }
  // A transposed (non-contiguous) input.
  at::Tensor xt = at::randn({7, 5}).t(), w = at::randn({3, 7});
  CHECK(compare({xt, w}, [](auto& t) { return ops::linear(t[0].t().t(), t[1], at::Tensor()); },
                [](auto& t) { return at::linear(t[0], t[1]); }) < 1e-5);
}

TEST_CASE("fused causal attention equals the explicit math - values and every input gradient", "[numerics][model][attention]") {
  torch::manual_seed(2);
  // softmax(q kᵀ / sqrt(D) + causal mask) v, written out.
  auto explicit_attention = [](std::vector<at::Tensor>& t) {
    const auto parts = t[0].permute({3, 0, 2, 1, 4}).unbind(0);  // [B, S, h, 3, D] -> q, k, v [B, h, S, D]
    const int64_t S = parts[0].size(-2), D = parts[0].size(-1);
    at::Tensor mask = at::full({S, S}, -INFINITY).triu(1);
    at::Tensor scores = at::matmul(parts[0], parts[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(D)) + mask;
    return at::matmul(scores.softmax(-1), parts[2]);
  };
  auto fused = [](std::vector<at::Tensor>& t) {
    const auto parts = t[0].permute({3, 0, 2, 1, 4}).unbind(0);  // the model's strided views
    return model::causal_attention(parts[0], parts[1], parts[2], 0.0);
  };
  // The shapes a TP rank sees (heads / tp) at the tiny and small models' head sizes, a sequence
  // of one, and one longer than the kernel's blocks.
  for (auto shape : {std::vector<int64_t>{2, 5, 3, 3, 4}, std::vector<int64_t>{2, 32, 2, 3, 16},
                     std::vector<int64_t>{1, 1, 2, 3, 8}, std::vector<int64_t>{1, 300, 1, 3, 64}}) {
    INFO("[B, S, heads, 3, D] = " << at::IntArrayRef(shape));
    CHECK(compare({at::randn(shape)}, fused, explicit_attention) < 1e-5);
  }
}

TEST_CASE("cpu_ops gelu_tanh equals at::gelu(tanh) - including saturated inputs", "[numerics][model][cpu_ops]") {
  torch::manual_seed(3);
  at::Tensor x = at::cat({at::randn({1000}) * 3, at::tensor({-40.0f, -10.0f, 0.0f, 10.0f, 40.0f})});
  CHECK(compare({x}, [](auto& t) { return ops::gelu_tanh(t[0]); },
                [](auto& t) { return at::gelu(t[0], "tanh"); }) < 1e-5);
  at::Tensor y = ops::gelu_tanh(at::tensor({-40.0f, 40.0f}));
  CHECK(y[0].item<float>() == 0.0f);
  CHECK(y[1].item<float>() == 40.0f);
}

namespace {

// Sets how this process computes CPU bf16 products for one test, and puts back what the CPU
// offers afterwards.
struct Bf16InFp32 {
  explicit Bf16InFp32(bool on) { ops::compute_cpu_bf16_in_fp32(on); }
  ~Bf16InFp32() { ops::compute_cpu_bf16_in_fp32(!ops::cpu_bf16().native); }
};

at::Tensor bf16_leaf(const at::Tensor& t) { return t.to(at::kBFloat16).detach().set_requires_grad(true); }

// Largest |got - want| relative to want's largest entry, in float64.
double bf16_diff(const at::Tensor& got, const at::Tensor& want) {
  REQUIRE(got.sizes() == want.sizes());
  return testing::max_rel_diff(want.to(at::kDouble), got.to(at::kDouble));
}

// The share of entries where `got` and `want` hold the same bf16 value.
double same_share(const at::Tensor& got, const at::Tensor& want) {
  return got.to(at::kBFloat16).eq(want.to(at::kBFloat16)).to(at::kDouble).mean().item<double>();
}

}  // namespace

TEST_CASE("bf16 linear computed in fp32 is a bf16 GEMM with fp32 accumulation - forward and every gradient", "[numerics][model][cpu_ops][bf16]") {
  torch::manual_seed(4);
  const Bf16InFp32 in_fp32(true);
  CHECK(ops::computes_in_fp32(at::zeros({1}, at::kBFloat16)));
  CHECK_FALSE(ops::computes_in_fp32(at::zeros({1})));
  // Rounding a result to bf16 once moves it by at most half an ulp: 2^-8 of its size, so of the
  // largest entry. fp32 accumulation adds ~1e-6 on these sizes.
  const double half_ulp = std::ldexp(1.0, -8) + 1e-5;
  // The second shape is a vocabulary-wide head: 8 MiB blocks of 104 rows, so three blocks.
  for (auto [x_shape, n] : std::vector<std::pair<std::vector<int64_t>, int64_t>>{{{3, 5, 48}, 40}, {{300, 64}, 20000}}) {
    INFO("x " << at::IntArrayRef(x_shape) << ", w [" << n << ", " << x_shape.back() << "]");
    at::Tensor x = bf16_leaf(at::randn(x_shape)), w = bf16_leaf(at::randn({n, x_shape.back()})), b = bf16_leaf(at::randn({n}));
    at::Tensor y = ops::linear(x, w, b);
    REQUIRE(y.scalar_type() == at::kBFloat16);
    const at::Tensor upstream = at::randn(y.sizes()).to(at::kBFloat16);
    y.backward(upstream);
    // The exact products of the same bf16 values (float64), and the fp32 products rounded once.
    const at::Tensor xd = x.detach().to(at::kDouble), wd = w.detach().to(at::kDouble), gd = upstream.to(at::kDouble);
    const at::Tensor y_exact = at::linear(xd, wd, b.detach().to(at::kDouble));
    const at::Tensor dx_exact = at::matmul(gd, wd), dw_exact = at::matmul(gd.reshape({-1, n}).t(), xd.reshape({-1, xd.size(-1)}));
    CHECK(bf16_diff(y, y_exact) <= half_ulp);
    CHECK(bf16_diff(x.grad(), dx_exact) <= half_ulp);
    CHECK(bf16_diff(w.grad(), dw_exact) <= half_ulp);
    CHECK(bf16_diff(b.grad(), gd.reshape({-1, n}).sum(0)) <= half_ulp);
    // Nearly every entry is the fp32 product rounded once, bit for bit (the rest sit on a
    // rounding boundary that the summation order decides).
    CHECK(same_share(y, at::linear(x.detach().to(at::kFloat), w.detach().to(at::kFloat), b.detach().to(at::kFloat))) > 0.98);
    CHECK(same_share(w.grad(), dw_exact.to(at::kFloat)) > 0.98);
    // Without a bias (the head), and for an input that needs no gradient.
    at::Tensor w2 = bf16_leaf(w.detach());
    at::Tensor y2 = ops::linear(x.detach(), w2, at::Tensor());
    y2.backward(upstream);
    CHECK(bf16_diff(y2, at::linear(xd, wd)) <= half_ulp);
    CHECK(bf16_diff(w2.grad(), dw_exact) <= half_ulp);
  }
}

TEST_CASE("bf16 attention computed in fp32 equals fp32 attention on the same bf16 values, rounded once", "[numerics][model][cpu_ops][bf16]") {
  torch::manual_seed(5);
  const Bf16InFp32 in_fp32(true);
  for (auto shape : {std::vector<int64_t>{2, 4, 32, 16}, std::vector<int64_t>{1, 2, 300, 64}}) {
    INFO("[B, h, S, D] = " << at::IntArrayRef(shape));
    std::vector<at::Tensor> qkv;
    for (int i = 0; i < 3; ++i) qkv.push_back(bf16_leaf(at::randn(shape)));
    at::Tensor out = model::causal_attention(qkv[0], qkv[1], qkv[2], 0.0);
    REQUIRE(out.scalar_type() == at::kBFloat16);
    std::vector<at::Tensor> ref;
    for (const auto& t : qkv) ref.push_back(t.detach().to(at::kFloat).set_requires_grad(true));
    at::Tensor want = model::causal_attention(ref[0], ref[1], ref[2], 0.0);
    CHECK(same_share(out, want) == 1.0);  // the fp32 kernel's output, rounded once
    const at::Tensor upstream = at::randn(shape).to(at::kBFloat16);
    out.backward(upstream);
    want.backward(upstream.to(at::kFloat));
    for (int i = 0; i < 3; ++i) CHECK(same_share(qkv[i].grad(), ref[i].grad()) == 1.0);
  }
}
