// OpenBLAS's kernel choice. Debian's LibTorch does its CPU fp32 matmuls in OpenBLAS, which picks
// its kernels when it loads, from OPENBLAS_CORETYPE or else from the CPU it detects; on some
// CPUs (virtual machines especially) it falls back to 'Prescott' SSE3 kernels, ~5x slower than
// the AVX2/AVX-512 ones the CPU has. It reads the variable only at load time, so the fix must
// come before the process starts: the built-in launcher applies it to its workers, and every
// rank says what to do when it finds itself running slow kernels.
#pragma once

#include <string>

namespace trainer::runtime {

// The kernel set OpenBLAS uses in this process ("Haswell", "Prescott", ...); "" without OpenBLAS.
std::string openblas_core();

// The OPENBLAS_CORETYPE worth asking for when OpenBLAS runs `core` on a CPU with these
// features: "SkylakeX" when the CPU has AVX-512 and `core` does not use it, "Haswell" when the
// CPU has AVX2 and `core` predates it, else "".
std::string better_openblas_core(const std::string& core, bool avx2, bool avx512);

// better_openblas_core for this process and CPU.
std::string better_openblas_core_here();

}  // namespace trainer::runtime
