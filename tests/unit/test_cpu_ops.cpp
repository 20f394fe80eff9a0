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

TEST_CASE("cpu_ops linear equals at::linear - with and without bias, 2-D and 3-D inputs", "[model][cpu_ops]") {
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

TEST_CASE("fused causal attention equals the explicit math - values and every input gradient", "[model][attention]") {
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

TEST_CASE("cpu_ops gelu_tanh equals at::gelu(tanh) - including saturated inputs", "[model][cpu_ops]") {
  torch::manual_seed(3);
  at::Tensor x = at::cat({at::randn({1000}) * 3, at::tensor({-40.0f, -10.0f, 0.0f, 10.0f, 40.0f})});
  CHECK(compare({x}, [](auto& t) { return ops::gelu_tanh(t[0]); },
                [](auto& t) { return at::gelu(t[0], "tanh"); }) < 1e-5);
  at::Tensor y = ops::gelu_tanh(at::tensor({-40.0f, 40.0f}));
  CHECK(y[0].item<float>() == 0.0f);
  CHECK(y[1].item<float>() == 40.0f);
}
