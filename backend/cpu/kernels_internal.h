// backend/cpu/kernels_internal.h — the per-ISA kernel table behind backend/cpu/kernels.h.
//
// Role: each ISA translation unit (kernels_scalar.cpp, kernels_avx2.cpp, kernels_avx512.cpp)
// fills one KernelTable; kernels.cpp picks a table at run time and does the threading.
// Invariants: a RowsFn computes y[k][o] for k < a.r (1 <= r <= kMaxTileRows) and
// o in [o_begin, o_end) and touches nothing else; every table entry returns the same bits
// as the scalar table (the reference dots of quant/dot.h).
#pragma once

#include <cstdint>

#include "backend/cpu/kernels.h"
#include "quant/dot.h"

namespace ds4::backend::cpu::detail {

struct RowsArgs {
  const uint8_t* w = nullptr;  // [n_out][row_bytes] weight rows
  int64_t row_bytes = 0;
  int64_t n_cols = 0;          // elements per row
  const void* x = nullptr;     // row k at (const uint8_t*)x + k·x_stride_bytes
  int64_t x_stride_bytes = 0;
  int r = 0;                   // 1..kMaxTileRows
  float* y = nullptr;          // y[k·y_stride + o]
  int64_t y_stride = 0;
};

using RowsFn = void (*)(const RowsArgs& a, int64_t o_begin, int64_t o_end);

struct KernelTable {
  RowsFn f32 = nullptr;
  RowsFn f16 = nullptr;
  RowsFn bf16 = nullptr;
  RowsFn q8_0 = nullptr;
  RowsFn iq2_xxs = nullptr;
  RowsFn q2_k = nullptr;
  RowsFn q4_k = nullptr;
  float (*dot_f32)(const float* a, const float* b, int64_t n) = nullptr;
  void (*axpy)(float a, const float* x, float* y, int64_t n) = nullptr;
  void (*sumsq_rows_f64)(const float* x, int64_t stride, int g, int64_t n, double* ss) = nullptr;
  void (*scale_mul)(const float* x, float a, const float* w, float* out, int64_t n) = nullptr;
  void (*dot_f32_many)(const float* a, const float* const* b, int nb, int64_t n, float* out) = nullptr;
  void (*weighted_sum)(const float* s, float a, const float* w, const float* const* x, int nx, float* y,
                       int64_t n) = nullptr;
  void (*scale)(float a, float* y, int64_t n) = nullptr;
  void (*f16_to_f32_row)(const uint16_t* src, float* dst, int64_t n) = nullptr;
  // Same bytes as quant::quantize_q8_0_act / quantize_q8_k_act.
  void (*quantize_q8_0_act)(const float* x, quant::BlockQ8_0Act* out, int64_t n) = nullptr;
  void (*quantize_q8_k_act)(const float* x, quant::BlockQ8K* out, int64_t n) = nullptr;
  // kernels.h exp_sub_row and swiglu_row; the x86 tables use backend/cpu/detmath_x8.h's
  // 8-lane exp and SiLU.
  void (*exp_sub)(const float* x, float m, float* out, int64_t n) = nullptr;
  void (*swiglu)(const float* g, const float* u, float c, float w, bool weighted, float* out,
                 int64_t n) = nullptr;
};

// Portable forms of the RMSNorm helpers (the reference sequence; any table may use them).
inline void sumsq_rows_f64_generic(const float* x, int64_t stride, int g, int64_t n, double* ss) {
  for (int k = 0; k < g; ++k) ss[k] = quant::sumsq_f64(x + k * stride, n);
}
inline void scale_mul_generic(const float* x, float a, const float* w, float* out, int64_t n) {
  if (w != nullptr) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * a * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * a;
  }
}

const KernelTable& scalar_table();
// nullptr when the translation unit was not compiled for this target.
const KernelTable* avx2_table();
const KernelTable* avx512_table();

// IQ2_XXS decode table: entry g·128 + s = the 8 signed weights (int8, LSB first) of grid
// point g under sign pattern s (quant::iq2_xxs_signed_values). 256 KiB, built on first use.
const uint64_t* iq2_signed_grid();

}  // namespace ds4::backend::cpu::detail
