// backend/cpu/kernels_x86.h — 256-bit (AVX2 + F16C) kernel templates, included by
// kernels_avx2.cpp and kernels_avx512.cpp (which replaces some of them with 512-bit forms).
//
// Role: SIMD twins of the scalar kernels. Everything here has internal linkage (anonymous
// namespace) so each ISA translation unit gets its own copy compiled with its own flags.
// Invariants (how the bits stay equal to quant/dot.h):
//   * integer parts (Σ q·q) use any SIMD order: integer sums are exact. Each trick used is
//     exact for EVERY input byte: maddubs(u8, s8) pairs are kept below 2^15 by construction
//     (Q2_K/Q4_K: unsigned weights ≤ 15; IQ2_XXS: (x+128)·w with |w| ≤ 43, minus 128·Σw);
//     the Q8_0 sign trick is exact unless an activation byte is -128, so q8_0_rows_avx2
//     scans the r activation rows once per call and takes the widening path if one is;
//   * float parts do, per (row, output), exactly the reference sequence; vectors only put
//     independent (output, row) pairs side by side in lanes, never reassociate;
//   * scales go into lanes through scalar loads, not hardware gathers (slow on many parts);
//   * dense dots keep quant/dot.h's 64 lane partials in 8-lane vectors (vector v = lanes
//     8v..8v+7; mul then add, never FMA), in one or more lane passes, the n % 64 tail added
//     per lane, then the halving tree 32, 16, 8 (vector adds), 4, 2, 1 (in-register);
//   * the RMSNorm statistic keeps quant::sumsq_f64's 64 double partials the same way.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/detmath_x8.h"
#include "backend/cpu/kernels_internal.h"
#include "quant/blocks.h"
#include "quant/iq2_tables.h"
#include "quant/quant.h"

namespace ds4::backend::cpu::detail {
namespace {

using quant::BlockIQ2XXS;
using quant::BlockQ2K;
using quant::BlockQ4K;
using quant::BlockQ8_0;
using quant::BlockQ8_0Act;
using quant::BlockQ8K;

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }  // exact (F16C), = quant::f16_to_f32

inline const uint8_t* xrow(const RowsArgs& a, int k) {
  return static_cast<const uint8_t*>(a.x) + k * a.x_stride_bytes;
}

// ---- shared reductions ----------------------------------------------------------------------
// Lane k (< R) = horizontal int32 sum of v[k]; lanes >= R are 0 (integer sums: any order is
// exact). Each vector is first folded to 128 bits, then four at a time are transposed and
// added with 128-bit unpacks: on parts that split 256-bit ops (Zen 1) vphaddd ymm and
// vperm2i128 cost several uops each, and this form has neither.
inline __m128i fold128(__m256i v) {
  return _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
}
// [Σa, Σb, Σc, Σd] of four 4-lane vectors.
inline __m128i hsum4x4(__m128i a, __m128i b, __m128i c, __m128i d) {
  const __m128i ab = _mm_add_epi32(_mm_unpacklo_epi32(a, b), _mm_unpackhi_epi32(a, b));
  const __m128i cd = _mm_add_epi32(_mm_unpacklo_epi32(c, d), _mm_unpackhi_epi32(c, d));
  return _mm_add_epi32(_mm_unpacklo_epi64(ab, cd), _mm_unpackhi_epi64(ab, cd));
}
template <int R>
inline __m256i hsum_lanes(const __m256i* v) {
  static_assert(R >= 1 && R <= 8);
  __m128i f[8];
#pragma GCC unroll 8
  for (int k = 0; k < 8; ++k) f[k] = k < R ? fold128(v[k]) : _mm_setzero_si128();
  const __m128i lo = hsum4x4(f[0], f[1], f[2], f[3]);
  const __m128i hi = R > 4 ? hsum4x4(f[4], f[5], f[6], f[7]) : _mm_setzero_si128();
  return _mm256_set_m128i(hi, lo);
}

// Lane k (< R) = the f32 at byte offset k·stride from p; other lanes 0. Built from scalar
// loads: hardware gathers are slow on current (GDS-mitigated) x86 parts.
template <int R>
inline __m256 lanes_f32(const void* p, int64_t stride) {
  const uint8_t* q = static_cast<const uint8_t*>(p);
  auto at = [&](int k) {
    float v = 0.0f;
    if (k < R) std::memcpy(&v, q + k * stride, sizeof v);
    return v;
  };
  if constexpr (R == 1) return _mm256_set1_ps(at(0));
  return _mm256_setr_ps(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7));
}

template <int R>
inline void store_lanes(__m256 v, float* y, int64_t y_stride, int64_t o) {
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  for (int k = 0; k < R; ++k) y[k * y_stride + o] = t[k];
}

// Dispatch a runtime r (1..8) to a template instance.
template <template <int> class K>
inline void dispatch_r(const RowsArgs& a, int64_t b, int64_t e) {
  switch (a.r) {
    case 1: K<1>::run(a, b, e); break;
    case 2: K<2>::run(a, b, e); break;
    case 3: K<3>::run(a, b, e); break;
    case 4: K<4>::run(a, b, e); break;
    case 5: K<5>::run(a, b, e); break;
    case 6: K<6>::run(a, b, e); break;
    case 7: K<7>::run(a, b, e); break;
    default: K<8>::run(a, b, e); break;
  }
}

// ---- dense: F32 / F16 / BF16 ------------------------------------------------------------------
enum class Dense { kF32, kF16, kBF16 };

constexpr int kLanes = quant::kDotLanes;  // 64 lane partials per (row, output) pair

// Weights i .. i+7 as f32 (exact conversions).
template <Dense T>
inline __m256 load8(const uint8_t* w, int64_t i) {
  if constexpr (T == Dense::kF32) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(w) + i);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(reinterpret_cast<const uint16_t*>(w) + i));
    if constexpr (T == Dense::kF16) {
      return _mm256_cvtph_ps(h);
    } else {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
}

template <Dense T>
inline float conv1(const uint8_t* w, int64_t i) {
  if constexpr (T == Dense::kF32) {
    return reinterpret_cast<const float*>(w)[i];
  } else if constexpr (T == Dense::kF16) {
    return h2f(reinterpret_cast<const uint16_t*>(w)[i]);
  } else {
    const uint32_t u = static_cast<uint32_t>(reinterpret_cast<const uint16_t*>(w)[i]) << 16;
    float f;
    std::memcpy(&f, &u, sizeof f);
    return f;
  }
}

// Tree steps h = 4, 2, 1 within one vector holding p[0..7] (high half onto low half).
inline float halve8(__m256 v) {
  __m128 q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));  // h = 4
  q = _mm_add_ps(q, _mm_movehl_ps(q, q));                                        // h = 2
  q = _mm_add_ss(q, _mm_shuffle_ps(q, q, 1));                                    // h = 1
  return _mm_cvtss_f32(q);
}

// The halving tree 32, 16, 8, 4, 2, 1 over p[0..63] (32-byte aligned); returns p[0].
inline float tree64(const float* p) {
  __m256 v[8];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) v[i] = _mm256_load_ps(p + 8 * i);
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) v[i] = _mm256_add_ps(v[i], v[i + 4]);  // h = 32
  v[0] = _mm256_add_ps(v[0], v[2]);                                   // h = 16
  v[1] = _mm256_add_ps(v[1], v[3]);
  return halve8(_mm256_add_ps(v[0], v[1]));                           // h = 8, then 4, 2, 1
}

// Columns per block when a tile needs several lane passes: the passes over one block re-read
// its activations and weights from L1 (R·512 floats + OO weight rows' 512 elements), so
// each reaches L2 / DRAM once per tile, as in a one-pass tile.
constexpr int64_t kDenseBlock = 512;

// p[(j·R + k)·64 + l] for the OO·R (output, row) pairs: lane partials between passes.
// Adds the n % 64 tail (element m + l is lane l's last step) and zeroes nothing.
template <Dense T, int R, int OO>
inline void dense_tail(const uint8_t* const* w, const float* const* x, int64_t m, int64_t n, float* p) {
  for (int j = 0; j < OO; ++j)
    for (int k = 0; k < R; ++k) {
      float* pp = p + (j * R + k) * kLanes;
      for (int64_t i = m; i < n; ++i) {
        const float t = conv1<T>(w[j], i) * x[k][i];
        pp[i - m] = pp[i - m] + t;
      }
    }
}

// One lane pass over the 64-chunks in columns [b0, b1): lanes [l0, l0 + 8·NV) of OO outputs
// (w[j]) × R rows (x[k]) in registers (vector v = lanes l0+8v .. l0+8v+7), loaded from and
// stored back to p (the first block, b0 = 0, starts from +0 instead). Lanes are independent,
// so passes and blocks may interleave freely as long as each lane sees its elements in
// increasing order.
template <Dense T, int R, int OO, int NV>
__attribute__((always_inline)) inline void dense_pass(const uint8_t* const* w, const float* const* x,
                                                      int64_t b0, int64_t b1, int l0, float* p) {
  __m256 acc[OO][R][NV];
#pragma GCC unroll 16
  for (int j = 0; j < OO; ++j)
#pragma GCC unroll 16
    for (int k = 0; k < R; ++k)
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v)
        acc[j][k][v] = b0 == 0 ? _mm256_setzero_ps() : _mm256_load_ps(p + (j * R + k) * kLanes + l0 + 8 * v);
  for (int64_t i = b0 + l0; i < b1; i += kLanes) {
    if constexpr (OO == 1) {  // activations straight from memory: fewer live registers
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) {
        const __m256 wv = load8<T>(w[0], i + 8 * v);
#pragma GCC unroll 16
        for (int k = 0; k < R; ++k)
          acc[0][k][v] = _mm256_add_ps(acc[0][k][v], _mm256_mul_ps(wv, _mm256_loadu_ps(x[k] + i + 8 * v)));
      }
    } else {
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) {
        __m256 xv[R];
#pragma GCC unroll 16
        for (int k = 0; k < R; ++k) xv[k] = _mm256_loadu_ps(x[k] + i + 8 * v);
#pragma GCC unroll 16
        for (int j = 0; j < OO; ++j) {
          const __m256 wv = load8<T>(w[j], i + 8 * v);
#pragma GCC unroll 16
          for (int k = 0; k < R; ++k) acc[j][k][v] = _mm256_add_ps(acc[j][k][v], _mm256_mul_ps(wv, xv[k]));
        }
      }
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < OO; ++j)
#pragma GCC unroll 16
    for (int k = 0; k < R; ++k)
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) _mm256_store_ps(p + (j * R + k) * kLanes + l0 + 8 * v, acc[j][k][v]);
}

// All 64 lane partials of OO outputs × R rows into p (32-byte aligned): one pass over the
// row when 8·NV = 64, else column blocks of kDenseBlock with 64 / (8·NV) passes each; then
// the tail.
template <Dense T, int R, int OO, int NV>
__attribute__((always_inline)) inline void dense_lanes(const uint8_t* const* w, const float* const* x, int64_t n,
                                                       float* p) {
  const int64_t m = n - n % kLanes;
  // The first block's passes start from +0 and store every lane; without a full chunk the
  // tail starts from +0 lanes.
  if (m == 0)
    for (int q = 0; q < OO * R * kLanes; ++q) p[q] = 0.0f;
  const int64_t blk = 8 * NV == kLanes ? m : kDenseBlock;
  for (int64_t b0 = 0; b0 < m; b0 += blk) {
    const int64_t b1 = m - b0 < blk ? m : b0 + blk;
    for (int l0 = 0; l0 < kLanes; l0 += 8 * NV) dense_pass<T, R, OO, NV>(w, x, b0, b1, l0, p);
  }
  dense_tail<T, R, OO>(w, x, m, n, p);
}

// Rows k0..k0+R-1 against outputs o0..o0+OO-1 (R·OO·NV accumulators live per pass; each
// activation load serves OO outputs).
template <Dense T, int R, int OO, int NV>
__attribute__((always_inline)) inline void dense_tile(const RowsArgs& a, int k0, int64_t o0) {
  const uint8_t* w[OO];
#pragma GCC unroll 16
  for (int j = 0; j < OO; ++j) w[j] = a.w + (o0 + j) * a.row_bytes;
  const float* x[R];
#pragma GCC unroll 16
  for (int k = 0; k < R; ++k) x[k] = reinterpret_cast<const float*>(xrow(a, k0 + k));
  alignas(32) float p[OO * R * kLanes];
  dense_lanes<T, R, OO, NV>(w, x, a.n_cols, p);
#pragma GCC unroll 16
  for (int j = 0; j < OO; ++j)
#pragma GCC unroll 16
    for (int k = 0; k < R; ++k) a.y[(k0 + k) * a.y_stride + o0 + j] = tree64(p + (j * R + k) * kLanes);
}

// Tile shape per row count (16 ymm registers: R·OO·NV accumulators + activations + weights).
constexpr int dense_outputs_avx2(int r) { return r == 1 || r == 3 ? 1 : 2; }
constexpr int dense_vectors_avx2(int r) { return r == 1 ? 8 : (r <= 3 ? 2 : 1); }

template <Dense T, int R>
inline void dense_rows_group(const RowsArgs& a, int k0, int64_t o_begin, int64_t o_end) {
  constexpr int OO = dense_outputs_avx2(R);
  constexpr int NV = dense_vectors_avx2(R);
  int64_t o = o_begin;
  for (; o + OO <= o_end; o += OO) dense_tile<T, R, OO, NV>(a, k0, o);
  for (; o < o_end; ++o) dense_tile<T, R, 1, NV>(a, k0, o);
}

template <Dense T>
struct DenseK {
  template <int R>
  struct K {
    static void run(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
      // More than 4 rows: two passes over the chunk's weight rows (still cache-hot).
      if constexpr (R <= 4) {
        dense_rows_group<T, R>(a, 0, o_begin, o_end);
      } else {
        dense_rows_group<T, 4>(a, 0, o_begin, o_end);
        dense_rows_group<T, R - 4>(a, 4, o_begin, o_end);
      }
    }
  };
};

template <Dense T>
void dense_rows_avx2(const RowsArgs& a, int64_t b, int64_t e) {
  dispatch_r<DenseK<T>::template K>(a, b, e);
}

float dot_f32_avx2(const float* w, const float* x, int64_t n) {
  const uint8_t* wb = reinterpret_cast<const uint8_t*>(w);
  alignas(32) float p[kLanes];
  dense_lanes<Dense::kF32, 1, 1, 8>(&wb, &x, n, p);
  return tree64(p);
}

// NB rows of b against a: NB "outputs" sharing the loads of a, each row's canonical order
// unchanged (two passes of 32 lanes: 4·NB accumulators).
template <int NB>
__attribute__((always_inline)) inline void dot_many_group_avx2(const float* a, const float* const* b,
                                                                int64_t n, float* out) {
  const uint8_t* w[NB];
#pragma GCC unroll 16
  for (int k = 0; k < NB; ++k) w[k] = reinterpret_cast<const uint8_t*>(b[k]);
  alignas(32) float p[NB * kLanes];
  dense_lanes<Dense::kF32, 1, NB, 2>(w, &a, n, p);
#pragma GCC unroll 16
  for (int k = 0; k < NB; ++k) out[k] = tree64(p + k * kLanes);
}

void dot_f32_many_avx2(const float* a, const float* const* b, int nb, int64_t n, float* out) {
  int j = 0;
  for (; j + 4 <= nb; j += 4) dot_many_group_avx2<4>(a, b + j, n, out + j);
  for (; j < nb; ++j) out[j] = dot_f32_avx2(b[j], a, n);
}

// RMSNorm statistic (quant::sumsq_f64's 64-lane order in double), one row at a time, in two
// passes of 32 lanes (8 ymm accumulators of 4 doubles each; 16 would spill). The squares are
// exact in double; the halving tree runs on the stored partials.
inline double tree64_f64(double* p) {
  for (int h = kLanes / 2; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) p[j] = p[j] + p[j + h];  // elementwise: vectorizing is exact
  return p[0];
}

void sumsq_rows_f64_avx2(const float* x, int64_t stride, int g, int64_t n, double* ss) {
  const int64_t m = n - n % kLanes;
  const int tail = static_cast<int>(n - m);
  for (int k = 0; k < g; ++k) {
    const float* xr = x + k * stride;
    alignas(32) double p[kLanes];
    for (int l0 = 0; l0 < kLanes; l0 += 32) {
      __m256d acc[8];
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) acc[v] = _mm256_setzero_pd();
      for (int64_t i = l0; i < m; i += kLanes) {
#pragma GCC unroll 8
        for (int v = 0; v < 8; ++v) {
          const __m256d d = _mm256_cvtps_pd(_mm_loadu_ps(xr + i + 4 * v));
          acc[v] = _mm256_add_pd(acc[v], _mm256_mul_pd(d, d));
        }
      }
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) _mm256_store_pd(p + l0 + 4 * v, acc[v]);
    }
    for (int l = 0; l < tail; ++l) {
      const double d = static_cast<double>(xr[m + l]) * static_cast<double>(xr[m + l]);
      p[l] = p[l] + d;
    }
    ss[k] = tree64_f64(p);
  }
}

// ---- Q8_0 -------------------------------------------------------------------------------------
// Register tile: OO consecutive outputs × R activation rows, lane l = i·R + k (i = output,
// k = row), OO·R <= 8. Per block, each (output, row) integer sum is reduced into its lane and
// the float sequence s = f16(w.d)·x.d, t = s·isum, acc = acc + t runs lane-wise, i.e. exactly
// once per (output, row) in block order. Many outputs per tile keep r = 1 vectorized.
// Dot policy (integer part of one block, exact): prep_w(qs) once per weight block,
// prep_x(qs) once per activation block, dot(pw, px) -> 8 int32 lanes summing to Σ w·x.

// Sign trick: maddubs(|w|, sign(x, w)); exact unless an activation quant is -128.
struct Q8DotSign {
  struct W { __m256i abs, w; };
  static W prep_w(const int8_t* q) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    return W{_mm256_sign_epi8(w, w), w};
  }
  static __m256i prep_x(const int8_t* q) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  }
  static __m256i dot(const W& w, __m256i x) {
    const __m256i p16 = _mm256_maddubs_epi16(w.abs, _mm256_sign_epi8(x, w.w));
    return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
  }
};

// Widening: int8 -> int16 products, exact for every byte.
struct Q8DotWide {
  struct W { __m256i lo, hi; };
  struct X { __m256i lo, hi; };
  static W prep_w(const int8_t* q) {
    return W{_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))),
             _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)))};
  }
  static X prep_x(const int8_t* q) {
    return X{_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q))),
             _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16)))};
  }
  static __m256i dot(const W& w, const X& x) {
    return _mm256_add_epi32(_mm256_madd_epi16(w.lo, x.lo), _mm256_madd_epi16(w.hi, x.hi));
  }
};

// Outputs per tile for R rows.
constexpr int q8_tile_outputs(int r) { return r >= 5 ? 1 : 8 / r; }

// Columns are processed in chunks of kQ8ColBlocks blocks; per chunk the prepared activation
// blocks and the activation scales (lane layout) are cached on the stack, and each lane's
// running sum is carried between chunks through y (a float store/load is exact, and the
// block order per lane is unchanged).
constexpr int64_t kQ8ColBlocks = 128;

template <class Dot, int R>
struct Q8Cache {
  using X = decltype(Dot::prep_x(nullptr));
  X px[kQ8ColBlocks][R];
  alignas(32) float xd[kQ8ColBlocks][8];  // lane l holds x[l % R].d (l < 8/R·R)
};

template <class Dot, int R, int OO>
inline void q8_tile(const RowsArgs& a, int64_t o0, const Q8Cache<Dot, R>& c, int64_t b0,
                    int64_t nc, bool first) {
  constexpr int L = OO * R;
  const BlockQ8_0* w[OO];
  for (int i = 0; i < OO; ++i)
    w[i] = reinterpret_cast<const BlockQ8_0*>(a.w + (o0 + i) * a.row_bytes) + b0;
  alignas(32) float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  if (!first)
    for (int i = 0; i < OO; ++i)
      for (int k = 0; k < R; ++k) t[i * R + k] = a.y[k * a.y_stride + o0 + i];
  __m256 acc = _mm256_load_ps(t);
  for (int64_t b = 0; b < nc; ++b) {
    __m256i v[L];
    // Fully unrolled so v[] stays in registers (a rolled k loop spills it to the stack).
#pragma GCC unroll 8
    for (int i = 0; i < OO; ++i) {
      const auto pw = Dot::prep_w(w[i][b].qs);
#pragma GCC unroll 8
      for (int k = 0; k < R; ++k) v[i * R + k] = Dot::dot(pw, c.px[b][k]);
    }
    const __m256 isum = _mm256_cvtepi32_ps(hsum_lanes<L>(v));
    __m256 wd;
    if constexpr (OO == 1) {
      wd = _mm256_set1_ps(h2f(w[0][b].d));
    } else {
      // Lane i·R+k takes the f16 scale of output i (converted exactly by F16C).
      auto h = [&](int l) { return static_cast<short>(l < L ? w[l / R][b].d : 0); };
      wd = _mm256_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7)));
    }
    const __m256 s = _mm256_mul_ps(wd, _mm256_load_ps(c.xd[b]));
    acc = _mm256_add_ps(acc, _mm256_mul_ps(s, isum));
  }
  _mm256_store_ps(t, acc);
  for (int i = 0; i < OO; ++i)
    for (int k = 0; k < R; ++k) a.y[k * a.y_stride + o0 + i] = t[i * R + k];
}

template <class Dot>
struct Q8K {
  template <int R>
  struct K {
    static void run(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
      const int64_t nb = a.n_cols / quant::kQK8_0;
      const BlockQ8_0Act* x[R];
      for (int k = 0; k < R; ++k) x[k] = reinterpret_cast<const BlockQ8_0Act*>(xrow(a, k));
      constexpr int OO = q8_tile_outputs(R);
      Q8Cache<Dot, R> c;
      for (int64_t b0 = 0; b0 < nb || b0 == 0; b0 += kQ8ColBlocks) {
        const int64_t nc = nb - b0 < kQ8ColBlocks ? nb - b0 : kQ8ColBlocks;
        for (int64_t b = 0; b < nc; ++b) {
          for (int k = 0; k < R; ++k) c.px[b][k] = Dot::prep_x(x[k][b0 + b].qs);
          for (int l = 0; l < 8; ++l) c.xd[b][l] = l < OO * R ? x[l % R][b0 + b].d : 0.0f;
        }
        int64_t o = o_begin;
        for (; o + OO <= o_end; o += OO) q8_tile<Dot, R, OO>(a, o, c, b0, nc, b0 == 0);
        for (; o < o_end; ++o) q8_tile<Dot, R, 1>(a, o, c, b0, nc, b0 == 0);
        if (nb == 0) break;
      }
    }
  };
};

// True when some activation quant of the r rows is -128 (then the sign trick is not exact).
inline bool q8_0_rows_have_min(const RowsArgs& a) {
  const int64_t nb = a.n_cols / quant::kQK8_0;
  const __m256i m = _mm256_set1_epi8(-128);
  __m256i any = _mm256_setzero_si256();
  for (int k = 0; k < a.r; ++k) {
    const BlockQ8_0Act* x = reinterpret_cast<const BlockQ8_0Act*>(xrow(a, k));
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs));
      any = _mm256_or_si256(any, _mm256_cmpeq_epi8(v, m));
    }
  }
  return !_mm256_testz_si256(any, any);
}

void q8_0_rows_avx2(const RowsArgs& a, int64_t b, int64_t e) {
  if (q8_0_rows_have_min(a)) {
    dispatch_r<Q8K<Q8DotWide>::K>(a, b, e);
  } else {
    dispatch_r<Q8K<Q8DotSign>::K>(a, b, e);
  }
}

// ---- IQ2_XXS × Q8_K ---------------------------------------------------------------------------
struct Iq2Block {
  __m256i w[8];    // signed weights of group g, [-43, 43]
  __m256i ls[8];   // int16 lanes = ls_g = 2·(a1>>28)+1
  __m256i negcorr; // int32 lanes summing to −128·Σ_g ls_g·Σ w_g
};

// Table indices of all 32 sub-chunks computed with SIMD, one 4-lane gather per group from
// iq2_signed_grid (8 signed weights per entry), then the exact correction term.
inline void iq2_decode(const BlockIQ2XXS& blk, const uint64_t* table, Iq2Block* out) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  const __m256i sh0 = _mm256_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24);
  const __m256i sh1 = _mm256_setr_epi32(0, 7, 14, 21, 0, 7, 14, 21);
  const __m256i m255 = _mm256_set1_epi32(255), m127 = _mm256_set1_epi32(127);
  const long long* base = reinterpret_cast<const long long*>(table);
  __m256i corr = _mm256_setzero_si256();
  for (int half = 0; half < 2; ++half) {
    // u32 words [a0_g, a1_g] for groups 4·half .. 4·half+3.
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&blk.qs[16 * half]));
    // ls of the 4 groups as int16 pairs (ls | ls << 16) in lanes 1, 3, 5, 7.
    const __m256i ls32 = _mm256_add_epi32(_mm256_slli_epi32(_mm256_srli_epi32(v, 28), 1),
                                          _mm256_set1_epi32(1));
    const __m256i ls16 = _mm256_or_si256(ls32, _mm256_slli_epi32(ls32, 16));
    for (int pair = 0; pair < 2; ++pair) {
      const int g0 = 2 * pair;  // group within this half
      const __m256i a0 = _mm256_permutevar8x32_epi32(
          v, _mm256_setr_epi32(2 * g0, 2 * g0, 2 * g0, 2 * g0, 2 * g0 + 2, 2 * g0 + 2, 2 * g0 + 2, 2 * g0 + 2));
      const __m256i a1 = _mm256_permutevar8x32_epi32(
          v, _mm256_setr_epi32(2 * g0 + 1, 2 * g0 + 1, 2 * g0 + 1, 2 * g0 + 1, 2 * g0 + 3, 2 * g0 + 3,
                               2 * g0 + 3, 2 * g0 + 3));
      const __m256i idx = _mm256_or_si256(
          _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(a0, sh0), m255), 7),
          _mm256_and_si256(_mm256_srlv_epi32(a1, sh1), m127));
      for (int t = 0; t < 2; ++t) {
        const int g = 4 * half + g0 + t;
        const __m128i ix = t == 0 ? _mm256_castsi256_si128(idx) : _mm256_extracti128_si256(idx, 1);
        const __m256i w = _mm256_i32gather_epi64(base, ix, 8);
        out->w[g] = w;
        out->ls[g] = _mm256_permutevar8x32_epi32(ls16, _mm256_set1_epi32(2 * (g0 + t) + 1));
        corr = _mm256_add_epi32(corr, _mm256_madd_epi16(_mm256_maddubs_epi16(bias, w), out->ls[g]));
      }
    }
  }
  out->negcorr = _mm256_sub_epi32(_mm256_setzero_si256(), corr);
}

// 8 int32 lanes summing to Σ_g ls_g·Σ_32 w·q (exact: (q+128)·w pairs stay below 2^15).
inline __m256i iq2_dot(const Iq2Block& wb, const int8_t* q) {
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i acc = wb.negcorr;
  for (int g = 0; g < 8; ++g) {
    const __m256i xv =
        _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 32 * g)), bias);
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(xv, wb.w[g]), wb.ls[g]));
  }
  return acc;
}

template <int R>
struct Iq2K {
  static void run(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
    const int64_t nb = a.n_cols / quant::kQKK;
    const BlockQ8K* x[R];
    for (int k = 0; k < R; ++k) x[k] = reinterpret_cast<const BlockQ8K*>(xrow(a, k));
    const uint64_t* table = iq2_signed_grid();
    for (int64_t o = o_begin; o < o_end; ++o) {
      const BlockIQ2XXS* w = reinterpret_cast<const BlockIQ2XXS*>(a.w + o * a.row_bytes);
      __m256 sumf = _mm256_setzero_ps();
      for (int64_t b = 0; b < nb; ++b) {
        Iq2Block wb;
        iq2_decode(w[b], table, &wb);
        __m256i v[R];
        for (int k = 0; k < R; ++k) v[k] = iq2_dot(wb, x[k][b].qs);
        const __m256 bsum = _mm256_cvtepi32_ps(hsum_lanes<R>(v));
        const __m256 d = _mm256_mul_ps(_mm256_set1_ps(h2f(w[b].d)), lanes_f32<R>(&x[0][b].d, a.x_stride_bytes));
        sumf = _mm256_add_ps(sumf, _mm256_mul_ps(d, bsum));
      }
      store_lanes<R>(_mm256_mul_ps(_mm256_set1_ps(0.125f), sumf), a.y, a.y_stride, o);
    }
  }
};

// Fast path when no activation quant is -128 (always true for quantize_q8_k_act output,
// whose largest |q| is 127): maddubs(|w|, sign(x, w)) is then exact, no correction term is
// needed, and each group is decoded straight into registers and dotted with all R rows.
// Acc folds a maddubs result times the group scale into the int32 accumulator. Used by the
// AVX-512 table's fallback (Acc = vpdpwssd); the AVX2 table uses Iq2Avx2 below.

template <class Acc>
struct Iq2Fast {
  template <int R>
  struct K {
    static void run(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
      const int64_t nb = a.n_cols / quant::kQKK;
      const BlockQ8K* x[R];
      for (int k = 0; k < R; ++k) x[k] = reinterpret_cast<const BlockQ8K*>(xrow(a, k));
      const long long* base = reinterpret_cast<const long long*>(iq2_signed_grid());
      const __m256i sh0 = _mm256_setr_epi32(0, 8, 16, 24, 0, 8, 16, 24);
      const __m256i sh1 = _mm256_setr_epi32(0, 7, 14, 21, 0, 7, 14, 21);
      const __m256i m255 = _mm256_set1_epi32(255), m127 = _mm256_set1_epi32(127);
      for (int64_t o = o_begin; o < o_end; ++o) {
        const BlockIQ2XXS* w = reinterpret_cast<const BlockIQ2XXS*>(a.w + o * a.row_bytes);
        __m256 sumf = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
          __m256i acc[R];
          for (int k = 0; k < R; ++k) acc[k] = _mm256_setzero_si256();
          for (int half = 0; half < 2; ++half) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(&w[b].qs[16 * half]));
            const __m256i ls32 = _mm256_add_epi32(_mm256_slli_epi32(_mm256_srli_epi32(v, 28), 1),
                                                  _mm256_set1_epi32(1));
            const __m256i ls16 = _mm256_or_si256(ls32, _mm256_slli_epi32(ls32, 16));
            for (int pair = 0; pair < 2; ++pair) {
              const int g0 = 2 * pair;
              const __m256i a0 = _mm256_permutevar8x32_epi32(
                  v, _mm256_setr_epi32(2 * g0, 2 * g0, 2 * g0, 2 * g0, 2 * g0 + 2, 2 * g0 + 2, 2 * g0 + 2,
                                       2 * g0 + 2));
              const __m256i a1 = _mm256_permutevar8x32_epi32(
                  v, _mm256_setr_epi32(2 * g0 + 1, 2 * g0 + 1, 2 * g0 + 1, 2 * g0 + 1, 2 * g0 + 3,
                                       2 * g0 + 3, 2 * g0 + 3, 2 * g0 + 3));
              const __m256i idx = _mm256_or_si256(
                  _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(a0, sh0), m255), 7),
                  _mm256_and_si256(_mm256_srlv_epi32(a1, sh1), m127));
              for (int t = 0; t < 2; ++t) {
                const int g = 4 * half + g0 + t;
                const __m128i ix = t == 0 ? _mm256_castsi256_si128(idx) : _mm256_extracti128_si256(idx, 1);
                const __m256i wv = _mm256_i32gather_epi64(base, ix, 8);
                const __m256i aw = _mm256_sign_epi8(wv, wv);
                const __m256i lsg = _mm256_permutevar8x32_epi32(ls16, _mm256_set1_epi32(2 * (g0 + t) + 1));
                for (int k = 0; k < R; ++k) {
                  const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][b].qs + 32 * g));
                  acc[k] = Acc::acc(acc[k], _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, wv)), lsg);
                }
              }
            }
          }
          const __m256 bsum = _mm256_cvtepi32_ps(hsum_lanes<R>(acc));
          const __m256 d = _mm256_mul_ps(_mm256_set1_ps(h2f(w[b].d)), lanes_f32<R>(&x[0][b].d, a.x_stride_bytes));
          sumf = _mm256_add_ps(sumf, _mm256_mul_ps(d, bsum));
        }
        store_lanes<R>(_mm256_mul_ps(_mm256_set1_ps(0.125f), sumf), a.y, a.y_stride, o);
      }
    }
  };
};

// True when some Q8_K activation quant of the r rows is -128.
inline bool q8k_rows_have_min(const RowsArgs& a) {
  const int64_t nb = a.n_cols / quant::kQKK;
  const __m256i m = _mm256_set1_epi8(-128);
  __m256i any = _mm256_setzero_si256();
  for (int k = 0; k < a.r; ++k) {
    const BlockQ8K* x = reinterpret_cast<const BlockQ8K*>(xrow(a, k));
    for (int64_t b = 0; b < nb; ++b)
      for (int i = 0; i < quant::kQKK; i += 32)
        any = _mm256_or_si256(
            any, _mm256_cmpeq_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs + i)), m));
  }
  return !_mm256_testz_si256(any, any);
}

template <class Acc>
void iq2_xxs_rows_x86(const RowsArgs& a, int64_t b, int64_t e) {
  if (q8k_rows_have_min(a)) {
    dispatch_r<Iq2K>(a, b, e);
  } else {
    dispatch_r<Iq2Fast<Acc>::template K>(a, b, e);
  }
}

// Lane m of v = y[row m % R][output o + m / R] of an OO-output x R-row tile (lanes >= OO*R unused).
template <int R, int OO>
inline void store_tile(const RowsArgs& a, int64_t o, __m256 v) {
  if constexpr (R == 1 && OO == 8) {
    _mm256_storeu_ps(a.y + o, v);
  } else {
    alignas(32) float t[8];
    _mm256_store_ps(t, v);
#pragma GCC unroll 8
    for (int m = 0; m < R * OO; ++m) a.y[(m % R) * a.y_stride + o + m / R] = t[m];
  }
}

// Prefetches the cache lines of block b of rows o..o+OO-1 (a tile reads OO rows block by
// block, an access order the hardware stream prefetchers follow poorly).
template <class Block, int OO>
inline void prefetch_tile_block(const RowsArgs& a, int64_t o, int64_t b) {
#pragma GCC unroll 8
  for (int j = 0; j < OO; ++j) {
    const char* p = reinterpret_cast<const char*>(reinterpret_cast<const Block*>(a.w + (o + j) * a.row_bytes) + b);
    _mm_prefetch(p, _MM_HINT_T0);
    _mm_prefetch(p + sizeof(Block) - 1, _MM_HINT_T0);
  }
}

// ---- IQ2_XXS × Q8_K, AVX2 tiles (outputs × rows in lanes) --------------------------------------
// The AVX2 fast path (no activation quant is -128). Decoding uses no hardware gather (slow,
// microcoded on many x86 parts, e.g. Zen) and no 256 KiB signed table (L2-resident): per
// group, the 4 grid magnitudes come from kIq2XxsGrid (2 KiB) and the 4 sign patterns from a
// 1 KiB table of ±1 bytes, 8 scalar loads from L1 composed into two vectors (measured faster
// than both the gather and scalar loads from the signed table, and than expanding the sign
// bits with shuffles/compares, which competes with the dot's vector ops for r >= 2).
// maddubs(|w|, ±x) is exact (|w| <= 43, |x| <= 127). A tile of OO = 8/R outputs × R rows
// puts each (output, row) pair's int32 vector in one lane of a single 8-lane reduction and
// runs the float part lane-wise: per lane exactly the reference sequence (s = d_w·d_x,
// acc += s·isum per block, then ×0.125), so results do not depend on the tiling.

// iq2_sign_pm1()[s]: byte b = -1 when weight b of sign pattern s is negative, else +1.
inline const uint64_t* iq2_sign_pm1() {
  static const struct Table {
    alignas(64) uint64_t v[128];
    Table() {
      for (int s = 0; s < 128; ++s) {
        uint64_t q = 0;
        for (int b = 0; b < 8; ++b)
          q |= static_cast<uint64_t>((quant::kIq2Signs[s] >> b) & 1u ? 0xffu : 0x01u) << (8 * b);
        v[s] = q;
      }
    }
  } t;
  return t.v;
}

// 4 qwords t[i0..i3] in one vector (qword l = t[il]), from scalar loads.
inline __m256i qwords4(const uint64_t* t, uint32_t i0, uint32_t i1, uint32_t i2, uint32_t i3) {
  const __m128i lo = _mm_set_epi64x(static_cast<long long>(t[i1]), static_cast<long long>(t[i0]));
  const __m128i hi = _mm_set_epi64x(static_cast<long long>(t[i3]), static_cast<long long>(t[i2]));
  return _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
}

template <int R, int OO>
__attribute__((always_inline)) inline void iq2_tile_avx2(const RowsArgs& a, const BlockQ8K* const* x, int64_t o,
                                                         const uint64_t* sgn, bool prefetch_next) {
  constexpr int L = R * OO;  // lane m = (output m / R, row m % R)
  static_assert(L <= 8);
  const int64_t nb = a.n_cols / quant::kQKK;
  const BlockIQ2XXS* w[OO];
#pragma GCC unroll 8
  for (int j = 0; j < OO; ++j) w[j] = reinterpret_cast<const BlockIQ2XXS*>(a.w + (o + j) * a.row_bytes);
  const uint64_t* grid = quant::kIq2XxsGrid;
  __m256 sumf = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (prefetch_next) prefetch_tile_block<BlockIQ2XXS, OO>(a, o + OO, b);
    __m256i acc[L];
#pragma GCC unroll 8
    for (int m = 0; m < L; ++m) acc[m] = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < OO; ++j) {
      const uint8_t* q8 = reinterpret_cast<const uint8_t*>(w[j][b].qs);
#pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        uint32_t a1;
        std::memcpy(&a1, q8 + 8 * g + 4, sizeof a1);
        const __m256i mag = qwords4(grid, q8[8 * g], q8[8 * g + 1], q8[8 * g + 2], q8[8 * g + 3]);
        const __m256i sg = qwords4(sgn, a1 & 127u, (a1 >> 7) & 127u, (a1 >> 14) & 127u, (a1 >> 21) & 127u);
        const __m256i ls = _mm256_set1_epi16(static_cast<short>(2 * (a1 >> 28) + 1));
#pragma GCC unroll 8
        for (int k = 0; k < R; ++k) {
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][b].qs + 32 * g));
          acc[j * R + k] = _mm256_add_epi32(
              acc[j * R + k], _mm256_madd_epi16(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(xv, sg)), ls));
        }
      }
    }
    const __m256 bsum = _mm256_cvtepi32_ps(hsum_lanes<L>(acc));
    uint16_t wdh[8] = {};
    float xd[8] = {};
#pragma GCC unroll 8
    for (int m = 0; m < L; ++m) {
      wdh[m] = w[m / R][b].d;
      xd[m] = x[m % R][b].d;
    }
    const __m256 wd = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wdh)));  // exact
    const __m256 d = _mm256_mul_ps(wd, _mm256_loadu_ps(xd));
    sumf = _mm256_add_ps(sumf, _mm256_mul_ps(d, bsum));
  }
  store_tile<R, OO>(a, o, _mm256_mul_ps(_mm256_set1_ps(0.125f), sumf));
}

template <int R>
struct Iq2Avx2 {
  static void run(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
    constexpr int OO = 8 / R;
    const BlockQ8K* x[R];
    for (int k = 0; k < R; ++k) x[k] = reinterpret_cast<const BlockQ8K*>(xrow(a, k));
    const uint64_t* sgn = iq2_sign_pm1();
    int64_t o = o_begin;
    for (; o + OO <= o_end; o += OO) iq2_tile_avx2<R, OO>(a, x, o, sgn, o + 2 * OO <= o_end);
    for (; o < o_end; ++o) iq2_tile_avx2<R, 1>(a, x, o, sgn, false);
  }
};

void iq2_xxs_rows_avx2(const RowsArgs& a, int64_t b, int64_t e) {
  if (q8k_rows_have_min(a)) {
    dispatch_r<Iq2K>(a, b, e);
  } else {
    dispatch_r<Iq2Avx2>(a, b, e);
  }
}

// ---- Q2_K / Q4_K × Q8_K -----------------------------------------------------------------------
// A decoded K-quant super-block: 8 vectors of 32 unsigned quants in element order, the int16
// scale vector of each (per 16-lane half for Q2_K, broadcast for Q4_K) and the int16 mins per
// bsums lane.
struct KBlock {
  __m256i q[8];
  __m256i sc[8];
  __m256i mins;  // int16 lane j multiplies bsums[j]
};

inline void q2k_decode(const BlockQ2K& blk, KBlock* out) {
  const __m256i m3 = _mm256_set1_epi8(3);
  for (int n = 0; n < 2; ++n) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * n));
    for (int j = 0; j < 4; ++j)
      out->q[4 * n + j] = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m3);
  }
  // vector i = 4n + j covers sub-blocks 2i (low 16 bytes) and 2i+1 (high 16 bytes): its
  // int16 scale vector is a byte shuffle (scale byte, then a zero byte) of the 16 scales.
  const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.scales));
  const __m256i sc2 = _mm256_broadcastsi128_si256(_mm_and_si128(s8, _mm_set1_epi8(15)));
  // Control for vector 0 is (0, 0x80) x8 | (1, 0x80) x8; vector i adds 2i to the low bytes.
  const __m256i ctrl0 = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0, -128, 0,
                                         -128, 0, -128, 1, -128, 1, -128, 1, -128, 1, -128, 1,
                                         -128, 1, -128, 1, -128, 1, -128);
  for (int i = 0; i < 8; ++i)
    out->sc[i] = _mm256_shuffle_epi8(sc2, _mm256_add_epi8(ctrl0, _mm256_set1_epi16(static_cast<short>(2 * i))));
  out->mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(15)));
}

inline void q4k_decode(const BlockQ4K& blk, KBlock* out) {
  const __m256i m4 = _mm256_set1_epi8(15);
  uint8_t sc[8], mn[8];
  for (int j = 0; j < 8; ++j) quant::q4_k_scale_min(j, blk.scales, &sc[j], &mn[j]);
  for (int c = 0; c < 4; ++c) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk.qs + 32 * c));
    out->q[2 * c] = _mm256_and_si256(q, m4);
    out->q[2 * c + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
  }
  for (int j = 0; j < 8; ++j) out->sc[j] = _mm256_set1_epi16(sc[j]);
  // bsums lanes 2j and 2j+1 both belong to sub-block j.
  out->mins = _mm256_setr_epi16(mn[0], mn[0], mn[1], mn[1], mn[2], mn[2], mn[3], mn[3], mn[4],
                                mn[4], mn[5], mn[5], mn[6], mn[6], mn[7], mn[7]);
}

// isum lanes: Σ sc·Σ q·x (maddubs pairs ≤ 15·128·2, exact); summs lanes: Σ mins·bsums.
struct KDotMadd {
  static void prepare(KBlock*) {}
  static void dot(const KBlock& wb, const BlockQ8K& y, __m256i* isum, __m256i* summs) {
    __m256i acc = _mm256_setzero_si256();
    for (int i = 0; i < 8; ++i) {
      const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 32 * i));
      acc = _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(wb.q[i], xv), wb.sc[i]));
    }
    *isum = acc;
    *summs = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums)),
                               wb.mins);
  }
};

template <bool kQ4, class Dot = KDotMadd>
struct KQuantK {
  template <int R>
  struct K {
    static void run(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
      const int64_t nb = a.n_cols / quant::kQKK;
      const BlockQ8K* x[R];
      for (int k = 0; k < R; ++k) x[k] = reinterpret_cast<const BlockQ8K*>(xrow(a, k));
      for (int64_t o = o_begin; o < o_end; ++o) {
        const uint8_t* wrow = a.w + o * a.row_bytes;
        __m256 sumf = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
          KBlock wb;
          uint16_t hd, hm;
          if constexpr (kQ4) {
            const BlockQ4K& blk = reinterpret_cast<const BlockQ4K*>(wrow)[b];
            q4k_decode(blk, &wb);
            hd = blk.d;
            hm = blk.dmin;
          } else {
            const BlockQ2K& blk = reinterpret_cast<const BlockQ2K*>(wrow)[b];
            q2k_decode(blk, &wb);
            Dot::prepare(&wb);
            hd = blk.d;
            hm = blk.dmin;
          }
          __m256 isum, summs;
          if constexpr (R <= 4) {
            // One reduction for both: lanes 0..R-1 = isum, R..2R-1 = summs (moved down).
            __m256i v[2 * R];
            for (int k = 0; k < R; ++k) Dot::dot(wb, x[k][b], &v[k], &v[R + k]);
            const __m256i both = hsum_lanes<2 * R>(v);
            isum = _mm256_cvtepi32_ps(both);
            summs = _mm256_cvtepi32_ps(_mm256_permutevar8x32_epi32(
                both, _mm256_setr_epi32(R, R + 1, R + 2, R + 3, R + 4, R + 5, R + 6, R + 7)));
          } else {
            __m256i vi[R], vm[R];
            for (int k = 0; k < R; ++k) Dot::dot(wb, x[k][b], &vi[k], &vm[k]);
            isum = _mm256_cvtepi32_ps(hsum_lanes<R>(vi));
            summs = _mm256_cvtepi32_ps(hsum_lanes<R>(vm));
          }
          const __m256 yd = lanes_f32<R>(&x[0][b].d, a.x_stride_bytes);
          const __m256 dall = _mm256_mul_ps(yd, _mm256_set1_ps(h2f(hd)));
          const __m256 dmin = _mm256_mul_ps(yd, _mm256_set1_ps(h2f(hm)));
          const __m256 ta = _mm256_mul_ps(dall, isum);
          const __m256 tc = _mm256_mul_ps(dmin, summs);
          sumf = _mm256_add_ps(sumf, _mm256_sub_ps(ta, tc));
        }
        store_lanes<R>(sumf, a.y, a.y_stride, o);
      }
    }
  };
};

// Q2_K tile for small r: OO outputs × R rows, (output, row) pair m = j·R + k in lane m of one
// 8-lane reduction for isum and one for summs, shared by the tile instead of one per output.
// The float part per lane is the reference sequence of KQuantK (dall = d_x·d, dmin = d_x·dmin,
// acc += dall·isum − dmin·summs per block).
template <int R, int OO>
__attribute__((always_inline)) inline void q2k_tile_avx2(const RowsArgs& a, const BlockQ8K* const* x, int64_t o,
                                                         bool prefetch_next) {
  constexpr int L = R * OO;
  static_assert(L <= 8);
  const int64_t nb = a.n_cols / quant::kQKK;
  const BlockQ2K* w[OO];
#pragma GCC unroll 8
  for (int j = 0; j < OO; ++j) w[j] = reinterpret_cast<const BlockQ2K*>(a.w + (o + j) * a.row_bytes);
  __m256 sumf = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if (prefetch_next) prefetch_tile_block<BlockQ2K, OO>(a, o + OO, b);
    __m256i vi[L], vm[L];
#pragma GCC unroll 8
    for (int j = 0; j < OO; ++j) {
      KBlock wb;
      q2k_decode(w[j][b], &wb);
#pragma GCC unroll 8
      for (int k = 0; k < R; ++k) KDotMadd::dot(wb, x[k][b], &vi[j * R + k], &vm[j * R + k]);
    }
    const __m256 isum = _mm256_cvtepi32_ps(hsum_lanes<L>(vi));
    const __m256 summs = _mm256_cvtepi32_ps(hsum_lanes<L>(vm));
    uint16_t hd[8] = {}, hm[8] = {};
    float xd[8] = {};
#pragma GCC unroll 8
    for (int m = 0; m < L; ++m) {
      hd[m] = w[m / R][b].d;
      hm[m] = w[m / R][b].dmin;
      xd[m] = x[m % R][b].d;
    }
    const __m256 yd = _mm256_loadu_ps(xd);
    const __m256 dall = _mm256_mul_ps(yd, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hd))));
    const __m256 dmin = _mm256_mul_ps(yd, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hm))));
    const __m256 ta = _mm256_mul_ps(dall, isum);
    const __m256 tc = _mm256_mul_ps(dmin, summs);
    sumf = _mm256_add_ps(sumf, _mm256_sub_ps(ta, tc));
  }
  store_tile<R, OO>(a, o, sumf);
}

template <int R>
struct Q2kAvx2 {
  static void run(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
    constexpr int OO = 8 / R;
    const BlockQ8K* x[R];
    for (int k = 0; k < R; ++k) x[k] = reinterpret_cast<const BlockQ8K*>(xrow(a, k));
    int64_t o = o_begin;
    for (; o + OO <= o_end; o += OO) q2k_tile_avx2<R, OO>(a, x, o, o + 2 * OO <= o_end);
    for (; o < o_end; ++o) q2k_tile_avx2<R, 1>(a, x, o, false);
  }
};

void q2_k_rows_avx2(const RowsArgs& a, int64_t b, int64_t e) {
  switch (a.r) {  // r >= 5 already shares one reduction among the rows of each output
    case 1: Q2kAvx2<1>::run(a, b, e); break;
    case 2: Q2kAvx2<2>::run(a, b, e); break;
    case 3: Q2kAvx2<3>::run(a, b, e); break;
    case 4: Q2kAvx2<4>::run(a, b, e); break;
    default: dispatch_r<KQuantK<false>::K>(a, b, e); break;
  }
}
void q4_k_rows_avx2(const RowsArgs& a, int64_t b, int64_t e) {
  dispatch_r<KQuantK<true>::K>(a, b, e);
}

// ---- elementwise helpers ------------------------------------------------------------------------
void axpy_avx2(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i),
                                          _mm256_mul_ps(va, _mm256_loadu_ps(x + i))));
  for (; i < n; ++i) {
    const float t = a * x[i];
    y[i] = y[i] + t;
  }
}

void scale_avx2(float a, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), va));
  for (; i < n; ++i) y[i] = y[i] * a;
}

// V vectors of y (8·V floats from i0) held in registers across the nx rows.
template <int V>
__attribute__((always_inline)) inline void wsum_chunk_avx2(const float* s, float a, const float* w,
                                                            const float* const* x, int nx, float* y,
                                                            int64_t i0) {
  __m256 acc[V];
  const __m256 va = _mm256_set1_ps(a);
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v)
    acc[v] = s != nullptr ? _mm256_mul_ps(_mm256_loadu_ps(s + i0 + 8 * v), va) : _mm256_setzero_ps();
  for (int j = 0; j < nx; ++j) {
    const __m256 wj = _mm256_set1_ps(w[j]);
    const float* xj = x[j] + i0;
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) acc[v] = _mm256_add_ps(acc[v], _mm256_mul_ps(wj, _mm256_loadu_ps(xj + 8 * v)));
  }
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) _mm256_storeu_ps(y + i0 + 8 * v, acc[v]);
}

void weighted_sum_avx2(const float* s, float a, const float* w, const float* const* x, int nx, float* y,
                       int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) wsum_chunk_avx2<8>(s, a, w, x, nx, y, i);
  for (; i + 8 <= n; i += 8) wsum_chunk_avx2<1>(s, a, w, x, nx, y, i);
  for (; i < n; ++i) {
    float acc = s != nullptr ? s[i] * a : 0.0f;
    for (int j = 0; j < nx; ++j) {
      const float t = w[j] * x[j][i];
      acc = acc + t;
    }
    y[i] = acc;
  }
}

void f16_row_avx2(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = h2f(src[i]);
}

// ---- activation quantization ------------------------------------------------------------------
// Byte-exact twins of quant::quantize_q8_0_act / quantize_q8_k_act (the reasoning of the
// AVX-512 twins in kernels_avx512.cpp): amax = max(|x|, running) with the running value as
// the NaN-wins operand, so NaN inputs are skipped like `if (av > amax)`; max is exact in any
// order; q = cvtps_epi32(x·s) rounds to nearest even like lrintf, and NaN / ±inf give
// INT_MIN where lrintf gives LONG_MIN: both clamp to −128.
inline __m256 abs256(__m256 v) {
  return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}
inline float hmax256(__m256 m) {
  __m128 a = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  a = _mm_max_ps(a, _mm_movehl_ps(a, a));
  a = _mm_max_ss(a, _mm_movehdup_ps(a));
  return _mm_cvtss_f32(a);
}
inline __m256i quant_lanes256(__m256 x, __m256 s) {
  const __m256i q = _mm256_cvtps_epi32(_mm256_mul_ps(x, s));
  return _mm256_min_epi32(_mm256_max_epi32(q, _mm256_set1_epi32(-128)), _mm256_set1_epi32(127));
}
// 32 clamped int32 lanes (q[0..3], 8 each, in element order) -> 32 int8 in element order.
inline void store_q32(const __m256i* q, int8_t* out) {
  const __m256i p01 = _mm256_packs_epi32(q[0], q[1]);  // 128-bit lanes interleave: fixed below
  const __m256i p23 = _mm256_packs_epi32(q[2], q[3]);
  const __m256i b = _mm256_packs_epi16(p01, p23);
  const __m256i fixed = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), fixed);
}

void quantize_q8_0_act_avx2(const float* x, BlockQ8_0Act* out, int64_t n) {
  for (int64_t b = 0; b < n / quant::kQK8_0; ++b) {
    const float* xb = x + b * quant::kQK8_0;
    __m256 v[4];
    __m256 m = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(xb + 8 * k);
      m = _mm256_max_ps(abs256(v[k]), m);
    }
    const float amax = hmax256(m);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = d;
    const __m256 sc = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = quant_lanes256(v[k], sc);
    store_q32(q, out[b].qs);
  }
}

void quantize_q8_k_act_avx2(const float* x, BlockQ8K* out, int64_t n) {
  for (int64_t b = 0; b < n / quant::kQKK; ++b) {
    const float* xb = x + b * quant::kQKK;
    BlockQ8K& y = out[b];
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < quant::kQKK; i += 8) m = _mm256_max_ps(abs256(_mm256_loadu_ps(xb + i)), m);
    const float amax = hmax256(m);
    if (amax == 0.0f) {
      y.d = 0.0f;
      std::memset(y.qs, 0, sizeof y.qs);
      std::memset(y.bsums, 0, sizeof y.bsums);
      continue;
    }
    // The sign source is the FIRST element whose |x| equals amax (the scalar loop keeps the
    // first strict maximum).
    float max = 0.0f;
    const __m256 va = _mm256_set1_ps(amax);
    for (int i = 0; i < quant::kQKK; i += 8) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(abs256(_mm256_loadu_ps(xb + i)), va, _CMP_EQ_OQ));
      if (hit != 0) {
        max = xb[i + __builtin_ctz(static_cast<unsigned>(hit))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 sc = _mm256_set1_ps(iscale);
    for (int j = 0; j < quant::kQKK / 32; ++j) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) q[k] = quant_lanes256(_mm256_loadu_ps(xb + 32 * j + 8 * k), sc);
      store_q32(q, y.qs + 32 * j);
      for (int h = 0; h < 2; ++h) {  // bsums of the two groups of 16: exact int sums
        const __m256i s16 = _mm256_add_epi32(q[2 * h], q[2 * h + 1]);
        __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s16), _mm256_extracti128_si256(s16, 1));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
        y.bsums[2 * j + h] = static_cast<int16_t>(_mm_cvtsi128_si32(t));
      }
    }
    y.d = 1.0f / iscale;
  }
}

inline KernelTable make_x86_table() {
  KernelTable k;
  k.f32 = dense_rows_avx2<Dense::kF32>;
  k.f16 = dense_rows_avx2<Dense::kF16>;
  k.bf16 = dense_rows_avx2<Dense::kBF16>;
  k.q8_0 = q8_0_rows_avx2;
  k.iq2_xxs = iq2_xxs_rows_avx2;
  k.q2_k = q2_k_rows_avx2;
  k.q4_k = q4_k_rows_avx2;
  k.dot_f32 = dot_f32_avx2;
  k.axpy = axpy_avx2;
  k.scale = scale_avx2;
  k.sumsq_rows_f64 = sumsq_rows_f64_avx2;
  k.scale_mul = scale_mul_generic;
  k.dot_f32_many = dot_f32_many_avx2;
  k.weighted_sum = weighted_sum_avx2;
  k.f16_to_f32_row = f16_row_avx2;
  k.quantize_q8_0_act = quantize_q8_0_act_avx2;
  k.quantize_q8_k_act = quantize_q8_k_act_avx2;
  k.exp_sub = exp_sub_row_x8;
  k.swiglu = swiglu_row_x8;
  return k;
}

}  // namespace
}  // namespace ds4::backend::cpu::detail
