#include "runtime/blas.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <cctype>

namespace trainer::runtime {

std::string openblas_core() {
  // Looked up at run time: the symbol exists only when the BLAS behind LibTorch is OpenBLAS.
  using CoreName = char* (*)();
  auto fn = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const char* name = fn ? fn() : nullptr;
  return name ? name : "";
}

std::string better_openblas_core(const std::string& core, bool avx2, bool avx512) {
  // OpenBLAS's x86 kernel sets that predate AVX2 (compared in lower case: openblas_get_corename
  // spells some of them either way).
  static const std::array<const char*, 19> pre_avx2 = {
      "prescott", "core2", "penryn", "dunnington", "nehalem", "sandybridge", "atom", "katmai",
      "coppermine", "northwood", "banias", "opteron", "opteron_sse3", "barcelona", "bobcat",
      "bulldozer", "piledriver", "athlon", "generic"};
  std::string lower = core;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (core.empty()) return "";
  // And those that use AVX2 but not AVX-512 (on an AVX-512 CPU here: 0.20 against 0.37 TFLOP/s).
  static const std::array<const char*, 3> avx2_only = {"haswell", "zen", "skylake"};
  auto in = [&](const auto& list) { return std::find(list.begin(), list.end(), lower) != list.end(); };
  if (avx512 && (in(pre_avx2) || in(avx2_only))) return "SkylakeX";
  if (avx2 && in(pre_avx2)) return "Haswell";
  return "";
}

std::string better_openblas_core_here() {
  __builtin_cpu_init();
  return better_openblas_core(openblas_core(), __builtin_cpu_supports("avx2"), __builtin_cpu_supports("avx512f"));
}

}  // namespace trainer::runtime
