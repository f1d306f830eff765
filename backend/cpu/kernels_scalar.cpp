// backend/cpu/kernels_scalar.cpp — portable kernels: the scalar twin of every SIMD path.
//
// Role: the KernelTable for Isa::kScalar. Each weight block is decoded once and dotted with
// all r activation rows; per (row, output) the float operations are exactly those listed in
// quant/dot.h (the integer parts call quant's exact block helpers). Compiled without ISA
// flags and with -ffp-contract=off like every TU, so nothing is fused or reordered.
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels_internal.h"
#include "core/detmath.h"
#include "quant/dot.h"
#include "quant/quant.h"
#include "quant/half.h"
#include "quant/iq2_tables.h"

namespace ds4::backend::cpu::detail {
namespace {

using quant::BlockIQ2XXS;
using quant::BlockQ2K;
using quant::BlockQ4K;
using quant::BlockQ8_0;
using quant::BlockQ8_0Act;
using quant::BlockQ8K;

inline const uint8_t* xrow(const RowsArgs& a, int k) {
  return static_cast<const uint8_t*>(a.x) + k * a.x_stride_bytes;
}

// Canonical 64-lane order (quant/dot.h) for r rows at once; Conv maps a weight element to f32.
template <typename W, float (*Conv)(W)>
void dense_rows(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
  constexpr int L = quant::kDotLanes;
  const int r = a.r;
  const int64_t n = a.n_cols;
  for (int64_t o = o_begin; o < o_end; ++o) {
    const W* w = reinterpret_cast<const W*>(a.w + o * a.row_bytes);
    float p[kMaxTileRows][L];
    for (int k = 0; k < r; ++k)
      for (int j = 0; j < L; ++j) p[k][j] = 0.0f;
    for (int64_t i0 = 0; i0 < n; i0 += L) {
      const int jn = n - i0 < L ? static_cast<int>(n - i0) : L;  // the last chunk may be short
      for (int j = 0; j < jn; ++j) {
        const float wf = Conv(w[i0 + j]);
        for (int k = 0; k < r; ++k) {
          const float* x = reinterpret_cast<const float*>(xrow(a, k));
          const float t = wf * x[i0 + j];
          p[k][j] = p[k][j] + t;
        }
      }
    }
    for (int k = 0; k < r; ++k) {
      for (int h = L / 2; h >= 1; h /= 2)
        for (int j = 0; j < h; ++j) p[k][j] = p[k][j] + p[k][j + h];
      a.y[k * a.y_stride + o] = p[k][0];
    }
  }
}

inline float conv_f32(float v) { return v; }
inline float conv_f16(uint16_t v) { return quant::f16_to_f32(v); }
inline float conv_bf16(uint16_t v) { return quant::bf16_to_f32(v); }

void f32_rows(const RowsArgs& a, int64_t b, int64_t e) { dense_rows<float, conv_f32>(a, b, e); }
void f16_rows(const RowsArgs& a, int64_t b, int64_t e) { dense_rows<uint16_t, conv_f16>(a, b, e); }
void bf16_rows(const RowsArgs& a, int64_t b, int64_t e) {
  dense_rows<uint16_t, conv_bf16>(a, b, e);
}

void q8_0_rows(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
  const int r = a.r;
  const int64_t nb = a.n_cols / quant::kQK8_0;
  for (int64_t o = o_begin; o < o_end; ++o) {
    const BlockQ8_0* w = reinterpret_cast<const BlockQ8_0*>(a.w + o * a.row_bytes);
    float acc[kMaxTileRows];
    for (int k = 0; k < r; ++k) acc[k] = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const float wd = quant::f16_to_f32(w[b].d);
      for (int k = 0; k < r; ++k) {
        const BlockQ8_0Act& x = reinterpret_cast<const BlockQ8_0Act*>(xrow(a, k))[b];
        const int32_t isum = quant::q8_0_block_isum(w[b], x);
        const float s = wd * x.d;
        const float t = s * static_cast<float>(isum);
        acc[k] = acc[k] + t;
      }
    }
    for (int k = 0; k < r; ++k) a.y[k * a.y_stride + o] = acc[k];
  }
}

void iq2_xxs_rows(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
  const int r = a.r;
  const int64_t nb = a.n_cols / quant::kQKK;
  for (int64_t o = o_begin; o < o_end; ++o) {
    const BlockIQ2XXS* w = reinterpret_cast<const BlockIQ2XXS*>(a.w + o * a.row_bytes);
    float sumf[kMaxTileRows];
    for (int k = 0; k < r; ++k) sumf[k] = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const float wd = quant::f16_to_f32(w[b].d);
      for (int k = 0; k < r; ++k) {
        const BlockQ8K& y = reinterpret_cast<const BlockQ8K*>(xrow(a, k))[b];
        const float d = wd * y.d;
        const int32_t bsum = quant::iq2_xxs_block_isum(w[b], y);
        const float t = d * static_cast<float>(bsum);
        sumf[k] = sumf[k] + t;
      }
    }
    for (int k = 0; k < r; ++k) a.y[k * a.y_stride + o] = 0.125f * sumf[k];
  }
}

template <typename Block, void (*Isums)(const Block&, const BlockQ8K&, int32_t*, int32_t*)>
void kquant_rows(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
  const int r = a.r;
  const int64_t nb = a.n_cols / quant::kQKK;
  for (int64_t o = o_begin; o < o_end; ++o) {
    const Block* w = reinterpret_cast<const Block*>(a.w + o * a.row_bytes);
    float sumf[kMaxTileRows];
    for (int k = 0; k < r; ++k) sumf[k] = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      const float wd = quant::f16_to_f32(w[b].d);
      const float wm = quant::f16_to_f32(w[b].dmin);
      for (int k = 0; k < r; ++k) {
        const BlockQ8K& y = reinterpret_cast<const BlockQ8K*>(xrow(a, k))[b];
        int32_t isum = 0, summs = 0;
        Isums(w[b], y, &isum, &summs);
        const float dall = y.d * wd;
        const float dmin = y.d * wm;
        const float ta = dall * static_cast<float>(isum);
        const float tc = dmin * static_cast<float>(summs);
        sumf[k] = sumf[k] + (ta - tc);
      }
    }
    for (int k = 0; k < r; ++k) a.y[k * a.y_stride + o] = sumf[k];
  }
}

void q2_k_rows(const RowsArgs& a, int64_t b, int64_t e) {
  kquant_rows<BlockQ2K, quant::q2_k_block_isums>(a, b, e);
}
void q4_k_rows(const RowsArgs& a, int64_t b, int64_t e) {
  kquant_rows<BlockQ4K, quant::q4_k_block_isums>(a, b, e);
}

float dot_f32_scalar(const float* a, const float* b, int64_t n) { return quant::dot_f32(a, b, n); }

void axpy_scalar(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float t = a * x[i];
    y[i] = y[i] + t;
  }
}

void scale_scalar(float a, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = y[i] * a;
}

void dot_f32_many_scalar(const float* a, const float* const* b, int nb, int64_t n, float* out) {
  for (int j = 0; j < nb; ++j) out[j] = quant::dot_f32(a, b[j], n);
}

void weighted_sum_scalar(const float* s, float a, const float* w, const float* const* x, int nx, float* y,
                         int64_t n) {
  if (s != nullptr) {
    for (int64_t i = 0; i < n; ++i) y[i] = s[i] * a;
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = 0.0f;
  }
  for (int j = 0; j < nx; ++j) axpy_scalar(w[j], x[j], y, n);
}

void f16_row_scalar(const uint16_t* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = quant::f16_to_f32(src[i]);
}

// out[i] = exp(x[i] - m) and SwiGLU: the definitions (core/detmath.h), one element at a time.
void exp_sub_scalar(const float* x, float m, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = detmath::exp_f32(x[i] - m);
}
void swiglu_scalar(const float* g, const float* u, float c, float w, bool weighted, float* out, int64_t n) {
  for (int64_t r = 0; r < n; ++r) {
    const float gv = std::min(g[r], c);
    const float uv = std::min(std::max(u[r], -c), c);
    out[r] = weighted ? detmath::silu_f32(gv) * uv * w : detmath::silu_f32(gv) * uv;
  }
}

}  // namespace

const KernelTable& scalar_table() {
  static const KernelTable t = [] {
    KernelTable k;
    k.f32 = f32_rows;
    k.f16 = f16_rows;
    k.bf16 = bf16_rows;
    k.q8_0 = q8_0_rows;
    k.iq2_xxs = iq2_xxs_rows;
    k.q2_k = q2_k_rows;
    k.q4_k = q4_k_rows;
    k.dot_f32 = dot_f32_scalar;
    k.axpy = axpy_scalar;
    k.scale = scale_scalar;
    k.sumsq_rows_f64 = sumsq_rows_f64_generic;
    k.scale_mul = scale_mul_generic;
    k.dot_f32_many = dot_f32_many_scalar;
    k.weighted_sum = weighted_sum_scalar;
    k.f16_to_f32_row = f16_row_scalar;
    k.exp_sub = exp_sub_scalar;
    k.swiglu = swiglu_scalar;
    k.quantize_q8_0_act = quant::quantize_q8_0_act;
    k.quantize_q8_k_act = quant::quantize_q8_k_act;
    return k;
  }();
  return t;
}

const uint64_t* iq2_signed_grid() {
  static const std::vector<uint64_t> table = [] {
    std::vector<uint64_t> t(256 * 128);
    for (int g = 0; g < 256; ++g) {
      for (uint32_t s = 0; s < 128; ++s) {
        int8_t v[8];
        quant::iq2_xxs_signed_values(static_cast<uint8_t>(g), s, v);
        std::memcpy(&t[static_cast<size_t>(g) * 128 + s], v, sizeof v);
      }
    }
    return t;
  }();
  return table.data();
}

}  // namespace ds4::backend::cpu::detail
