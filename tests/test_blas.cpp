// OpenBLAS's slow-kernel fallback is recognised, and a rank running on it says how to fix it.
#include "catch_torch.hpp"

#include "helpers.hpp"
#include "runtime/blas.hpp"

using trainer::runtime::better_openblas_core;

TEST_CASE("pre-AVX2 OpenBLAS kernels are recognised and the better set named", "[blas]") {
  CHECK(better_openblas_core("Prescott", true, true) == "SkylakeX");
  CHECK(better_openblas_core("Prescott", true, false) == "Haswell");
  CHECK(better_openblas_core("CORE2", true, false) == "Haswell");
  CHECK(better_openblas_core("Prescott", false, false).empty());  // nothing better on this CPU
  CHECK(better_openblas_core("Haswell", true, true) == "SkylakeX");  // AVX-512 left unused
  CHECK(better_openblas_core("Haswell", true, false).empty());
  CHECK(better_openblas_core("SkylakeX", true, true).empty());
  CHECK(better_openblas_core("Cooperlake", true, true).empty());
  CHECK(better_openblas_core("", true, true).empty());  // the BLAS is not OpenBLAS
}

TEST_CASE("a rank on slow OpenBLAS kernels says how to fix it - unless oneDNN does the matmuls", "[blas][cli]") {
  auto r = testing::run("env OPENBLAS_CORETYPE=Prescott " + testing::trainer_bin() + " train " + testing::source_dir() +
                            "/configs/tiny.yaml --set parallel.dp=1 --set parallel.pp=1 --set parallel.tp=1"
                            " --set train.steps=1 --set checkpoint.dir=",
                        120);
  INFO(r.output);
  REQUIRE(r.code == 0);
#ifdef TRAINER_WITH_ONEDNN
  // The model's fp32 matmuls run in oneDNN, which picks its own kernels: nothing to warn about.
  CHECK(r.output.find("OpenBLAS runs") == std::string::npos);
#else
  __builtin_cpu_init();
  const std::string better =
      better_openblas_core("Prescott", __builtin_cpu_supports("avx2"), __builtin_cpu_supports("avx512f"));
  if (better.empty()) CHECK(r.output.find("OpenBLAS runs") == std::string::npos);  // a CPU without AVX2
  else CHECK(r.output.find("Start trainer with OPENBLAS_CORETYPE=" + better) != std::string::npos);
#endif
}
