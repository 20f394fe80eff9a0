// What `trainer plan` knows about a machine: per-device memory, peak dense TFLOP/s, memory
// bandwidth, and the bandwidth and latency of the links between devices. Built-in GPUs come from
// their vendors' datasheets (sources in docs/plan.md); `cpu` is this machine, measured
// (src/plan/measure.hpp). Pure data: no torch, no network.
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"

namespace trainer::plan {

struct Hardware {
  std::string name;
  bool is_cpu = false;          // one machine whose cores, memory and bandwidth all ranks share
  double memory_gb = 0;         // per GPU; CPU: the machine's available memory
  double bf16_tflops = 0;       // dense peak per GPU (CPU: the machine, measured)
  double fp32_tflops = 0;       // plain fp32 (CPU: measured)
  double tf32_tflops = 0;       // CUDA fp32 matmuls with runtime.tf32
  double memory_gbs = 0;        // memory bandwidth (HBM; CPU: measured copy bandwidth)
  double intra_gbs = 0;         // per GPU and direction inside a node (NVLink; CPU: Gloo loopback)
  double inter_gbs = 0;         // per GPU and direction between nodes (its share of the NICs)
  double intra_latency_us = 0;  // per message step of a collective inside a node
  double inter_latency_us = 0;  // between nodes
  int cores = 0;                // CPU: the cores ranks split (0 for GPUs)
  int gpus_per_node = 8;        // ranks sharing a node (CPU: its memory and cores); 0 = all of them
  // The matmul peak that runtime.precision (and runtime.tf32) selects.
  double peak_tflops(const RuntimeConfig& r) const;
};

// The built-in table; names as given to --gpu ("a100-80gb", "h100-80gb", "h200").
const std::vector<Hardware>& gpu_table();
// The entry named `name`, or a ConfigError listing the names.
const Hardware& find_gpu(const std::string& name);

}  // namespace trainer::plan
