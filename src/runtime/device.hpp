// Where this rank computes. `runtime.device`: auto | cpu | cuda; a CUDA rank uses
// cuda:LOCAL_RANK (modulo the devices it sees, so several ranks may share one GPU). All CUDA
// runtime calls outside src/distributed/comm.cpp are in device.cpp, compiled with CUDA only when the
// LibTorch that CMake found was built with it (TRAINER_WITH_CUDA).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include "config/config.hpp"

namespace trainer::runtime {

// CUDA devices this process sees (0 in a CPU-only build).
int gpu_count();

// Intra-op threads of a process: runtime.threads, or this machine's cores ÷ `local_ranks`
// (at least 1).
int threads_per_rank(const RuntimeConfig& r, int local_ranks);

// Resolves runtime.device: auto is CUDA when this process sees a GPU, else the CPU. Throws
// std::runtime_error when cuda is asked for and no GPU is visible.
c10::Device choose_device(DeviceKind setting, int local_rank);

// Makes `device` current for this process; `tf32` lets fp32 matmuls on CUDA use TF32.
void use_device(const c10::Device& device, bool tf32);

// Refuses (ConfigError, exit 2) a runtime.precision `device` cannot compute in: bf16 on a GPU
// without bf16 matmuls (compute capability below 8.0). CPUs run bf16 matmuls everywhere
// (natively with AVX512-BF16 or AMX, else computed in fp32: cpu_bf16_in_fp32).
void check_precision(const c10::Device& device, DType precision);

// Whether this process computes its CPU bf16 products in fp32 (runtime.cpu_bf16_matmul; auto:
// when the CPU has no bf16 units, see ops::cpu_bf16()). The planner predicts with the same answer.
bool cpu_bf16_in_fp32(const RuntimeConfig& r);

// Applies runtime.cpu_bf16_matmul to this process.
void use_cpu_bf16(const RuntimeConfig& r);

// The tensor dtype a config's fp32/bf16 choice names.
c10::ScalarType scalar_type(DType dtype);

// Waits for the work queued on `device`: CUDA kernels run asynchronously, so step timing
// synchronises before it reads the clock. A no-op on the CPU.
void synchronize(const c10::Device& device);

// Peaks of the CUDA caching allocator since start (max_memory_allocated / max_memory_reserved);
// zeros on the CPU, where RSS is what counts.
struct DeviceMemory {
  double allocated_peak_mb = 0;
  double reserved_peak_mb = 0;
};
DeviceMemory device_memory(const c10::Device& device);

// MemAvailable from /proc/meminfo: what this machine can still give its processes, in bytes
// (0 where it cannot be read).
double available_memory_bytes();

// Total memory of CUDA device `index`, in bytes (0 in a CPU-only build).
double gpu_total_memory(int index);

}  // namespace trainer::runtime
