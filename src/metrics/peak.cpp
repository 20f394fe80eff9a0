#include "metrics/peak.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>

#include "runtime/device.hpp"

namespace trainer::metrics {

Peak measure_peak(const std::string& dtype, int size, double seconds, const std::string& device_name) {
  const auto type = dtype == "bf16" ? at::kBFloat16 : at::kFloat;
  const c10::Device device = runtime::choose_device(device_name, 0);
  runtime::use_device(device, false);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  Peak peak;
  // Numerics first: a wrong BLAS kernel (e.g. a forced OPENBLAS_CORETYPE) must not go unnoticed.
  at::Tensor a = at::randn({256, 256}, gen, at::kDouble), b = at::randn({256, 256}, gen, at::kDouble);
  at::Tensor exact = at::mm(a, b);
  at::Tensor got = at::mm(a.to(device, type), b.to(device, type)).to(at::kCPU, at::kDouble);
  peak.max_rel_error = ((got - exact).abs().max() / exact.abs().max()).item<double>();

  at::Tensor x = at::randn({size, size}, gen, at::kFloat).to(device, type);
  at::Tensor y = at::randn({size, size}, gen, at::kFloat).to(device, type);
  at::Tensor out = at::mm(x, y);  // warm-up: thread pool, caches, cuBLAS handles
  runtime::synchronize(device);
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  int iterations = 0;
  double elapsed = 0;
  do {
    at::mm_out(out, x, y);
    runtime::synchronize(device);  // GPU kernels are asynchronous: time what has finished
    ++iterations;
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  } while (elapsed < seconds);
  peak.tflops = 2.0 * size * size * static_cast<double>(size) * iterations / elapsed / 1e12;
  return peak;
}

}  // namespace trainer::metrics
