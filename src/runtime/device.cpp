#include "runtime/device.hpp"

#include <ATen/Context.h>

#include <algorithm>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "ops/cpu_ops.hpp"

#ifdef TRAINER_WITH_CUDA
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#endif

namespace trainer::runtime {

int gpu_count() {
#ifdef TRAINER_WITH_CUDA
  return static_cast<int>(c10::cuda::device_count());
#else
  return 0;
#endif
}

int threads_per_rank(const RuntimeConfig& r, int local_ranks) {
  if (r.threads > 0) return r.threads;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / std::max(1, local_ranks));
}

c10::Device choose_device(DeviceKind setting, int local_rank) {
  const int gpus = gpu_count();
  if (setting == DeviceKind::Cpu || (setting == DeviceKind::Auto && gpus == 0)) return c10::Device(c10::kCPU);
  if (gpus == 0)
    throw std::runtime_error("runtime.device=cuda but this process sees no CUDA device "
                             "(check the driver and CUDA_VISIBLE_DEVICES, or use runtime.device=cpu)");
  return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(local_rank % gpus));
}

void use_device(const c10::Device& device, bool tf32) {
#ifdef TRAINER_WITH_CUDA
  if (device.is_cuda()) c10::cuda::set_device(device.index());
#endif
  // "high" lets cuBLAS run fp32 matmuls in TF32; "highest" keeps them in full fp32.
  at::globalContext().setFloat32MatmulPrecision(tf32 ? "high" : "highest");
}

void check_precision(const c10::Device& device, DType precision) {
#ifdef TRAINER_WITH_CUDA
  if (precision != DType::Bf16 || !device.is_cuda()) return;
  const auto* props = at::cuda::getDeviceProperties(device.index());
  if (props->major < 8)
    throw ConfigError("runtime.precision = bf16: " + std::string(props->name) + " (compute capability " +
                      std::to_string(props->major) + "." + std::to_string(props->minor) +
                      ") has no bf16 matmuls, which need 8.0 (Ampere) or later; fix: runtime.precision=fp32");
#else
  (void)device;
  (void)precision;
#endif
}

bool cpu_bf16_in_fp32(const RuntimeConfig& r) {
  if (r.cpu_bf16_matmul == CpuBf16Matmul::Auto) return !ops::cpu_bf16().native;
  return r.cpu_bf16_matmul == CpuBf16Matmul::Fp32;
}

void use_cpu_bf16(const RuntimeConfig& r) { ops::compute_cpu_bf16_in_fp32(cpu_bf16_in_fp32(r)); }

c10::ScalarType scalar_type(DType dtype) { return dtype == DType::Bf16 ? at::kBFloat16 : at::kFloat; }

void synchronize(const c10::Device& device) {
#ifdef TRAINER_WITH_CUDA
  if (device.is_cuda()) c10::cuda::device_synchronize();
#else
  (void)device;
#endif
}

DeviceMemory device_memory(const c10::Device& device) {
  DeviceMemory out;
#ifdef TRAINER_WITH_CUDA
  if (device.is_cuda()) {
    // Entry 0 of each stat array is the aggregate over pool kinds (StatType::AGGREGATE).
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
    out.allocated_peak_mb = static_cast<double>(stats.allocated_bytes[0].peak) / (1 << 20);
    out.reserved_peak_mb = static_cast<double>(stats.reserved_bytes[0].peak) / (1 << 20);
  }
#else
  (void)device;
#endif
  return out;
}

double gpu_total_memory(int index) {
#ifdef TRAINER_WITH_CUDA
  return static_cast<double>(at::cuda::getDeviceProperties(static_cast<c10::DeviceIndex>(index))->totalGlobalMem);
#else
  (void)index;
  return 0;
#endif
}

double available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (in >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return 0;
}

}  // namespace trainer::runtime
