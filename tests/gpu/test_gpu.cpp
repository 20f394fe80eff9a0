// GPU tests, built only against a CUDA LibTorch (CMakeLists.txt adds tests/gpu/ then) and run by
// scripts/gpu_check.sh on a machine with one NVIDIA GPU. Same model, data and seed as the CPU
// runs; the tolerances are the ones the GPU's arithmetic allows.
#include "catch_torch.hpp"

#include <cmath>

#include "helpers.hpp"

namespace {

struct Run {
  std::vector<testing::LossLine> losses;
  std::string output;
};

Run train(int dp, const std::vector<std::string>& sets) {
  testing::TempDir dir;
  std::vector<std::string> all = {"train.steps=10", "checkpoint.dir="};
  all.insert(all.end(), sets.begin(), sets.end());
  auto r = testing::train_layout(dp, 1, 1, dir.path, all);
  INFO(r.output);
  REQUIRE(r.code == 0);
  return {testing::read_losses(dir.path), r.output};
}

double worst_rel(const Run& a, const Run& b) {
  REQUIRE(a.losses.size() == b.losses.size());
  double worst = 0;
  for (size_t s = 0; s < a.losses.size(); ++s)
    worst = std::max(worst, std::abs(a.losses[s].loss - b.losses[s].loss) / std::abs(a.losses[s].loss));
  return worst;
}

}  // namespace

TEST_CASE("fp32 on the GPU matches the CPU within 1e-4", "[gpu]") {
  const Run cpu = train(1, {"runtime.device=cpu"});
  const Run gpu = train(1, {"runtime.device=cuda", "runtime.tf32=false"});
  CHECK(gpu.output.find("peak GPU memory per rank") != std::string::npos);
  CHECK(worst_rel(cpu, gpu) < 1e-4);
}

TEST_CASE("TF32 and bf16 on the GPU track the CPU's fp32", "[gpu]") {
  const Run cpu = train(1, {"runtime.device=cpu"});
  // TF32 keeps a 10-bit mantissa in the matmuls, bf16 an 8-bit one.
  CHECK(worst_rel(cpu, train(1, {"runtime.device=cuda", "runtime.tf32=true"})) < 2e-3);
  const Run bf16 = train(1, {"runtime.device=cuda", "runtime.precision=bf16"});
  CHECK(worst_rel(cpu, bf16) < 5e-3);
  CHECK(bf16.losses.back().loss < bf16.losses.front().loss - 0.1);
}

TEST_CASE("two processes sharing one GPU over Gloo give the losses of one process", "[gpu]") {
  const Run one = train(1, {"runtime.device=cuda", "runtime.tf32=false"});
  // runtime.backend auto picks Gloo here: NCCL refuses two ranks on one device.
  const Run two = train(2, {"runtime.device=cuda", "runtime.tf32=false"});
  CHECK(worst_rel(one, two) < 1e-5);
  const Run bf16_wire = train(2, {"runtime.device=cuda", "runtime.tf32=false", "optim.grad_reduce_dtype=bf16"});
  CHECK(worst_rel(one, bf16_wire) < 5e-3);
}
