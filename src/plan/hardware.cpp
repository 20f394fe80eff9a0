#include "plan/hardware.hpp"

namespace trainer::plan {

double Hardware::peak_tflops(const RuntimeConfig& r) const {
  if (r.precision == DType::Bf16) return bf16_tflops;
  return !is_cpu && r.tf32 ? tf32_tflops : fp32_tflops;
}

const std::vector<Hardware>& gpu_table() {
  // Dense (no 2:4 sparsity) peaks, SXM parts, DGX/HGX nodes of 8 GPUs. NVLink: per GPU and
  // direction (A100 600 GB/s and H100/H200 900 GB/s are both directions together). Network: the
  // node's eight NICs, one per GPU (A100: HDR 200 Gb/s; H100/H200: NDR 400 Gb/s). Latencies:
  // typical NCCL per-step figures, ~3 us over NVLink and ~8 us over InfiniBand.
  static const std::vector<Hardware> table = {
      {"a100-80gb", false, 80, 312, 19.5, 156, 2039, 300, 25, 3, 8, 0, 8},
      {"h100-80gb", false, 80, 989, 67, 494, 3350, 450, 50, 3, 8, 0, 8},
      {"h200", false, 141, 989, 67, 494, 4800, 450, 50, 3, 8, 0, 8},
  };
  return table;
}

const Hardware& find_gpu(const std::string& name) {
  std::string names;
  for (const auto& h : gpu_table()) {
    if (h.name == name) return h;
    names += h.name + ", ";
  }
  throw ConfigError("--gpu is '" + name + "'; use one of: " + names + "cpu (this machine, measured)");
}

}  // namespace trainer::plan
