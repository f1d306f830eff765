// backend/cpu/kernels_avx2.cpp — the Isa::kAvx2 KernelTable (AVX2 + F16C; no FMA is used).
//
// Role: instantiates the 256-bit templates of kernels_x86.h with -mavx2 -mf16c (set per file
// in kernels.cmake). Reached only through runtime dispatch after __builtin_cpu_supports.
// Invariant: same bits as kernels_scalar.cpp (see kernels_x86.h for how).
#if defined(__x86_64__) && defined(__AVX2__)
#include "backend/cpu/kernels_x86.h"

namespace ds4::backend::cpu::detail {
const KernelTable* avx2_table() {
  static const KernelTable t = make_x86_table();
  return &t;
}
}  // namespace ds4::backend::cpu::detail
#else
#include "backend/cpu/kernels_internal.h"

namespace ds4::backend::cpu::detail {
const KernelTable* avx2_table() { return nullptr; }
}  // namespace ds4::backend::cpu::detail
#endif
