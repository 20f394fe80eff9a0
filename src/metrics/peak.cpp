#include "metrics/peak.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <chrono>

#include "ops/cpu_ops.hpp"
#include "runtime/device.hpp"

namespace trainer::metrics {
namespace {

using Product = at::Tensor (*)(const at::Tensor&, const at::Tensor&);

at::Tensor libtorch_mm(const at::Tensor& a, const at::Tensor& b) { return at::mm(a, b); }
// a · b through the model's linear layer (y = x wᵀ, with w = bᵀ read in place).
at::Tensor model_mm(const at::Tensor& a, const at::Tensor& b) { return ops::linear(a, b.t(), at::Tensor()); }

// Largest error of `product` on a 256x256 problem, relative to the largest exact entry: a wrong
// BLAS kernel must not go unnoticed.
double relative_error(Product product, const c10::Device& device, at::ScalarType type) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  at::Tensor a = at::randn({256, 256}, gen, at::kDouble), b = at::randn({256, 256}, gen, at::kDouble);
  at::Tensor exact = at::mm(a, b);
  at::Tensor got = product(a.to(device, type), b.to(device, type)).to(at::kCPU, at::kDouble);
  return ((got - exact).abs().max() / exact.abs().max()).item<double>();
}

double tflops(Product product, const at::Tensor& x, const at::Tensor& y, double seconds) {
  product(x, y);  // warm-up: thread pool, caches, JIT kernels, cuBLAS handles
  runtime::synchronize(x.device());
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  int iterations = 0;
  double elapsed = 0;
  do {
    product(x, y);
    runtime::synchronize(x.device());  // GPU kernels are asynchronous: time what has finished
    ++iterations;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (elapsed < seconds);
  const double n = static_cast<double>(x.size(0));
  return 2.0 * n * n * n * iterations / elapsed / 1e12;
}

}  // namespace

Peak measure_peak(DType dtype, int size, double seconds, DeviceKind device_name) {
  const auto type = runtime::scalar_type(dtype);
  const c10::Device device = runtime::choose_device(device_name, 0);
  runtime::use_device(device, false);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  at::Tensor x = at::randn({size, size}, gen, at::kFloat).to(device, type);
  at::Tensor y = at::randn({size, size}, gen, at::kFloat).to(device, type);
  Peak peak;
  peak.max_rel_error = std::max(relative_error(libtorch_mm, device, type), relative_error(model_mm, device, type));
  peak.libtorch_tflops = tflops(libtorch_mm, x, y, seconds);
  // Elsewhere the model's matmul is at::linear, i.e. the same kernels as at::mm: no need to time
  // it twice.
  const bool own = ops::uses_onednn(x) || ops::computes_in_fp32(x);
  peak.model_tflops = own ? tflops(model_mm, x, y, seconds) : peak.libtorch_tflops;
  peak.tflops = std::max(peak.model_tflops, peak.libtorch_tflops);
  return peak;
}

}  // namespace trainer::metrics
