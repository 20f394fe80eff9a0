// `trainer bench-peak`: this machine's matmul throughput, the denominator of MFU.
#pragma once

#include <string>

#include "config/config.hpp"

namespace trainer::metrics {

struct Peak {
  double tflops = 0;           // the better of the two below: the peak MFU is measured against
  double model_tflops = 0;     // the matmul the model uses (src/ops/cpu_ops: oneDNN on CPU fp32, fp32 compute for bf16 without bf16 units)
  double libtorch_tflops = 0;  // LibTorch's at::mm (MKL, or oneDNN for bf16, in the pip wheel)
  double max_rel_error = 0;    // of a smaller product against a float64 reference, worst engine
};

// Times repeated [size x size] @ [size x size] products in `dtype` ("fp32" or "bf16") on
// `device` ("cpu" or "cuda", whose fp32 products follow runtime.tf32's default: full fp32) for
// about `seconds` per engine, after a warm-up; per process, with the current intra-op threads.
Peak measure_peak(DType dtype, int size, double seconds, DeviceKind device = DeviceKind::Cpu);

}  // namespace trainer::metrics
