// backend/cpu/kernels_avx512.cpp — the Isa::kAvx512 KernelTable (F, BW, VL, DQ, VNNI; F16C).
//
// Role: the 256-bit templates of kernels_x86.h recompiled with AVX-512 flags (EVEX encodings,
// 32 registers), plus 512-bit replacements where they pay: the dense dots keep the canonical
// 64 lane partials in four 16-lane accumulators (vector v = p[16v..16v+15], mul then add,
// never FMA), the RMSNorm statistic its 64 double partials in eight 8-lane vectors; Q8_0 uses
// VNNI (vpdpbusd) in a form exact for every byte: Σ (x+128)·w − 128·Σ w.
// Q8_0, IQ2_XXS and Q2_K use "outputs in lanes" kernels: a tile of 16 (8 for IQ2_XXS)
// outputs' weight blocks is decoded once into int8 vectors whose int32 / int64 lanes are the
// outputs, so each activation row costs only broadcast-activation vpdpbusd's, with no
// horizontal reduction, and the per-(output, row) float sequence runs lane-wise. Tiles that do
// not fill (chunk tails) and oversized rows fall back to the older per-output kernels, which
// give the same bits. The activation quantizers (Q8_0 / Q8_K) are SIMD twins of quant's.
// Invariant: same bits as kernels_scalar.cpp.
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512DQ__) && defined(__AVX512VNNI__)
// GCC 12's own avx512fintrin.h trips -W(maybe-)uninitialized on _mm512_castps512_ps256 and
// the extract intrinsics (an undefined-value operand by design); silence it for this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <cstddef>

#include "backend/cpu/kernels_x86.h"

namespace ds4::backend::cpu::detail {
namespace {

// Software prefetch of n bytes from p into L1 (one hint per cache line). The kernels below
// prefetch the next output tile's weight rows while computing the current one: a tile's
// loads interleave several rows, which the hardware prefetchers follow poorly, and the
// weights of a forward pass do not stay in L2 between calls.
inline void prefetch_bytes(const uint8_t* p, int64_t n) {
  for (int64_t i = 0; i < n; i += 64) _mm_prefetch(reinterpret_cast<const char*>(p + i), _MM_HINT_T0);
}

template <Dense T>
inline __m512 load16_512(const uint8_t* w, int64_t i) {
  if constexpr (T == Dense::kF32) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(w) + i);
  } else {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(reinterpret_cast<const uint16_t*>(w) + i));
    if constexpr (T == Dense::kF16) {
      return _mm512_cvtph_ps(h);
    } else {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }
}

// The tree over p[0..63] (64-byte aligned): h = 32, 16 as zmm adds, h = 8 as the low 8
// lanes + the high 8, then halve8's 4, 2, 1.
inline float tree64_512(const float* p) {
  __m512 z0 = _mm512_add_ps(_mm512_load_ps(p), _mm512_load_ps(p + 32));        // h = 32
  const __m512 z1 = _mm512_add_ps(_mm512_load_ps(p + 16), _mm512_load_ps(p + 48));
  z0 = _mm512_add_ps(z0, z1);                                                    // h = 16
  return halve8(_mm256_add_ps(_mm512_castps512_ps256(z0), _mm512_extractf32x8_ps(z0, 1)));  // h = 8
}

// One lane pass over the 64-chunks in columns [b0, b1) (kernels_x86.h's dense_pass with
// 16-lane vectors): lanes [l0, l0 + 16·NV) of OO outputs × R rows, loaded from (+0 in the
// first block) and stored back to p[(j·R + k)·64 + lane].
template <Dense T, int R, int OO, int NV>
__attribute__((always_inline)) inline void dense512_pass(const uint8_t* const* w, const float* const* x,
                                                         int64_t b0, int64_t b1, int l0, float* p) {
  // Fully unrolled over (j, k, v) so the accumulators live in registers (not on the stack).
  __m512 acc[OO][R][NV];
#pragma GCC unroll 16
  for (int j = 0; j < OO; ++j)
#pragma GCC unroll 16
    for (int k = 0; k < R; ++k)
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v)
        acc[j][k][v] = b0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(p + (j * R + k) * kLanes + l0 + 16 * v);
  for (int64_t i = b0 + l0; i < b1; i += kLanes) {
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) {
      __m512 xv[R];
#pragma GCC unroll 16
      for (int k = 0; k < R; ++k) xv[k] = _mm512_loadu_ps(x[k] + i + 16 * v);
#pragma GCC unroll 16
      for (int j = 0; j < OO; ++j) {
        const __m512 wv = load16_512<T>(w[j], i + 16 * v);
#pragma GCC unroll 16
        for (int k = 0; k < R; ++k) acc[j][k][v] = _mm512_add_ps(acc[j][k][v], _mm512_mul_ps(wv, xv[k]));
      }
    }
  }
#pragma GCC unroll 16
  for (int j = 0; j < OO; ++j)
#pragma GCC unroll 16
    for (int k = 0; k < R; ++k)
#pragma GCC unroll 16
      for (int v = 0; v < NV; ++v) _mm512_store_ps(p + (j * R + k) * kLanes + l0 + 16 * v, acc[j][k][v]);
}

// kernels_x86.h's dense_lanes with 16-lane vectors (p 64-byte aligned).
template <Dense T, int R, int OO, int NV>
__attribute__((always_inline)) inline void dense512_lanes(const uint8_t* const* w, const float* const* x, int64_t n,
                                                          float* p) {
  const int64_t m = n - n % kLanes;
  // The first block's passes start from +0 and store every lane; without a full chunk the
  // tail starts from +0 lanes.
  if (m == 0)
    for (int q = 0; q < OO * R * kLanes; ++q) p[q] = 0.0f;
  const int64_t blk = 16 * NV == kLanes ? m : kDenseBlock;
  for (int64_t b0 = 0; b0 < m; b0 += blk) {
    const int64_t b1 = m - b0 < blk ? m : b0 + blk;
    for (int l0 = 0; l0 < kLanes; l0 += 16 * NV) dense512_pass<T, R, OO, NV>(w, x, b0, b1, l0, p);
  }
  dense_tail<T, R, OO>(w, x, m, n, p);
}

// Rows × outputs tile (one pass, or column blocks of 64 / (16·NV) passes); each activation
// load serves OO outputs.
template <Dense T, int R, int OO, int NV>
__attribute__((always_inline)) inline void dense512_tile(const RowsArgs& a, int64_t o0) {
  const uint8_t* w[OO];
#pragma GCC unroll 16
  for (int j = 0; j < OO; ++j) w[j] = a.w + (o0 + j) * a.row_bytes;
  const float* x[R];
#pragma GCC unroll 16
  for (int k = 0; k < R; ++k) x[k] = reinterpret_cast<const float*>(xrow(a, k));
  alignas(64) float p[OO * R * kLanes];
  dense512_lanes<T, R, OO, NV>(w, x, a.n_cols, p);
#pragma GCC unroll 16
  for (int j = 0; j < OO; ++j)
#pragma GCC unroll 16
    for (int k = 0; k < R; ++k) a.y[k * a.y_stride + o0 + j] = tree64_512(p + (j * R + k) * kLanes);
}

// Tile shape by row count (32 zmm: R·OO·NV accumulators + R activations + a weight vector).
constexpr int dense_outputs_512(int r) { return r == 1 ? 4 : (r <= 4 ? 2 : (r <= 6 ? 1 : 2)); }
constexpr int dense_vectors_512(int r) { return r <= 3 ? 4 : (r == 4 ? 2 : (r <= 6 ? 4 : 1)); }

template <Dense T>
struct Dense512K {
  template <int R>
  struct K {
    static void run(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
      constexpr int OO = dense_outputs_512(R);
      constexpr int NV = dense_vectors_512(R);
      int64_t o = o_begin;
      for (; o + OO <= o_end; o += OO) {
        if (o + 2 * OO <= o_end) prefetch_bytes(a.w + (o + OO) * a.row_bytes, OO * a.row_bytes);
        dense512_tile<T, R, OO, NV>(a, o);
      }
      for (; o < o_end; ++o) dense512_tile<T, R, 1, NV>(a, o);
    }
  };
};

template <Dense T>
void dense_rows_avx512(const RowsArgs& a, int64_t b, int64_t e) {
  dispatch_r<Dense512K<T>::template K>(a, b, e);
}

float dot_f32_avx512(const float* w, const float* x, int64_t n) {
  const uint8_t* wb = reinterpret_cast<const uint8_t*>(w);
  alignas(64) float p[kLanes];
  dense512_lanes<Dense::kF32, 1, 1, 4>(&wb, &x, n, p);
  return tree64_512(p);
}

// NB rows of b against a: NB "outputs" sharing the loads of a (4·NB accumulators).
template <int NB>
__attribute__((always_inline)) inline void dot_many_group_512(const float* a, const float* const* b,
                                                               int64_t n, float* out) {
  const uint8_t* w[NB];
#pragma GCC unroll 16
  for (int k = 0; k < NB; ++k) w[k] = reinterpret_cast<const uint8_t*>(b[k]);
  alignas(64) float p[NB * kLanes];
  dense512_lanes<Dense::kF32, 1, NB, 4>(w, &a, n, p);
#pragma GCC unroll 16
  for (int k = 0; k < NB; ++k) out[k] = tree64_512(p + k * kLanes);
}

// out[j] = dot_f32_avx512(b[j], a, n): up to 4 rows per pass share the loads of a.
void dot_f32_many_avx512(const float* a, const float* const* b, int nb, int64_t n, float* out) {
  int j = 0;
  for (; j + 4 <= nb; j += 4) dot_many_group_512<4>(a, b + j, n, out + j);
  for (; j < nb; ++j) out[j] = dot_f32_avx512(b[j], a, n);
}

template <int V>
__attribute__((always_inline)) inline void wsum_chunk_512(const float* s, float a, const float* w,
                                                           const float* const* x, int nx, float* y, int64_t i0) {
  __m512 acc[V];
  const __m512 va = _mm512_set1_ps(a);
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v)
    acc[v] = s != nullptr ? _mm512_mul_ps(_mm512_loadu_ps(s + i0 + 16 * v), va) : _mm512_setzero_ps();
  for (int j = 0; j < nx; ++j) {
    const __m512 wj = _mm512_set1_ps(w[j]);
    const float* xj = x[j] + i0;
#pragma GCC unroll 16
    for (int v = 0; v < V; ++v) acc[v] = _mm512_add_ps(acc[v], _mm512_mul_ps(wj, _mm512_loadu_ps(xj + 16 * v)));
  }
#pragma GCC unroll 16
  for (int v = 0; v < V; ++v) _mm512_storeu_ps(y + i0 + 16 * v, acc[v]);
}

// Chunks of 128 / 16 floats in registers; the scalar tail keeps the same per-element sequence.
void weighted_sum_avx512(const float* s, float a, const float* w, const float* const* x, int nx, float* y,
                         int64_t n) {
  int64_t i = 0;
  for (; i + 128 <= n; i += 128) wsum_chunk_512<8>(s, a, w, x, nx, y, i);
  for (; i + 16 <= n; i += 16) wsum_chunk_512<1>(s, a, w, x, nx, y, i);
  for (; i < n; ++i) {
    float acc = s != nullptr ? s[i] * a : 0.0f;
    for (int j = 0; j < nx; ++j) {
      const float t = w[j] * x[j][i];
      acc = acc + t;
    }
    y[i] = acc;
  }
}

// RMSNorm statistic (quant::sumsq_f64's 64-lane order), one row at a time: 8 zmm of 8 double
// lanes (vector v = lanes 8v..8v+7), the squares exact in double, the tail per lane, then the
// halving tree 32, 16, 8 as zmm adds and 4, 2, 1 within the last vector.
void sumsq_rows_f64_avx512(const float* x, int64_t stride, int g, int64_t n, double* ss) {
  const int64_t m = n - n % kLanes;
  const int tail = static_cast<int>(n - m);
  for (int k = 0; k < g; ++k) {
    const float* xr = x + k * stride;
    __m512d acc[8];
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) acc[v] = _mm512_setzero_pd();
    for (int64_t i = 0; i < m; i += kLanes) {
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const __m512d d = _mm512_cvtps_pd(_mm256_loadu_ps(xr + i + 8 * v));
        acc[v] = _mm512_add_pd(acc[v], _mm512_mul_pd(d, d));
      }
    }
    alignas(64) double p[kLanes];
#pragma GCC unroll 8
    for (int v = 0; v < 8; ++v) _mm512_store_pd(p + 8 * v, acc[v]);
    for (int l = 0; l < tail; ++l) {
      const double d = static_cast<double>(xr[m + l]) * static_cast<double>(xr[m + l]);
      p[l] = p[l] + d;
    }
    __m512d z[4];
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v)  // h = 32
      z[v] = _mm512_add_pd(_mm512_load_pd(p + 8 * v), _mm512_load_pd(p + 8 * v + 32));
    z[0] = _mm512_add_pd(z[0], z[2]);  // h = 16
    z[1] = _mm512_add_pd(z[1], z[3]);
    z[0] = _mm512_add_pd(z[0], z[1]);  // h = 8
    __m256d q = _mm256_add_pd(_mm512_castpd512_pd256(z[0]), _mm512_extractf64x4_pd(z[0], 1));  // h = 4
    __m128d r = _mm_add_pd(_mm256_castpd256_pd128(q), _mm256_extractf128_pd(q, 1));          // h = 2
    r = _mm_add_sd(r, _mm_unpackhi_pd(r, r));                                                   // h = 1
    ss[k] = _mm_cvtsd_f64(r);
  }
}

void scale_mul_avx512(const float* x, float a, const float* w, float* out, int64_t n) {
  const __m512 va = _mm512_set1_ps(a);
  int64_t i = 0;
  if (w != nullptr) {
    for (; i + 16 <= n; i += 16)
      _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), va), _mm512_loadu_ps(w + i)));
    for (; i < n; ++i) out[i] = x[i] * a * w[i];
  } else {
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), va));
    for (; i < n; ++i) out[i] = x[i] * a;
  }
}

// VNNI Q8_0 block dot, exact for every byte: Σ (x+128)·w − 128·Σ w. The correction is
// folded into the accumulator start (once per weight block), x+128 = x XOR 0x80 (once per
// activation block), so each (output, row) pair costs one vpdpbusd.
struct Q8DotVnni {
  struct W { __m256i w, negcorr; };
  static W prep_w(const int8_t* q) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    const __m256i c = _mm256_dpbusd_epi32(_mm256_setzero_si256(),
                                          _mm256_set1_epi8(static_cast<char>(0x80)), w);
    return W{w, _mm256_sub_epi32(_mm256_setzero_si256(), c)};
  }
  static __m256i prep_x(const int8_t* q) {
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)),
                            _mm256_set1_epi8(static_cast<char>(0x80)));
  }
  static __m256i dot(const W& w, __m256i x) { return _mm256_dpbusd_epi32(w.negcorr, x, w.w); }
};

// Pairwise horizontal add within 128-bit lanes (the 512-bit twin of vphaddd).
inline __m512i hadd512(__m512i a, __m512i b) {
  const __m512 fa = _mm512_castsi512_ps(a), fb = _mm512_castsi512_ps(b);
  return _mm512_add_epi32(_mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0x88)),
                          _mm512_castps_si512(_mm512_shuffle_ps(fa, fb, 0xDD)));
}

// v[k] holds 16 int32 lanes: 8 for block b (low half), 8 for block b+1. Returns lanes
// [b: Σv[0] .. Σv[7] | b+1: Σv[0] .. Σv[7]] (exact integer sums).
inline __m512i reduce8x16(const __m512i* v) {
  const __m512i z0123 = hadd512(hadd512(v[0], v[1]), hadd512(v[2], v[3]));
  const __m512i z4567 = hadd512(hadd512(v[4], v[5]), hadd512(v[6], v[7]));
  const __m512i p = _mm512_permutex2var_epi64(z0123, _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13), z4567);
  const __m512i q = _mm512_permutex2var_epi64(z0123, _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15), z4567);
  return _mm512_add_epi32(p, q);
}

// R = 5..8 rows, one output at a time, TWO blocks per 512-bit vector: one vpdpbusd per
// (row, block pair) and one 16-lane reduction per block pair. The float sequence per
// (output, row) is unchanged: acc + t_b, then + t_(b+1), in block order; the odd last block
// of a column chunk takes the 256-bit path. Columns are chunked as in Q8K (sums carried
// through y, exactly).
template <int R>
struct Q8Pair512 {
  static constexpr int64_t kPairs = kQ8ColBlocks / 2;
  struct Cache {
    __m512i px[kPairs][R];               // x XOR 0x80 of blocks (2p, 2p+1)
    alignas(64) float xd[kPairs][16];    // [x[k].d of block 2p | of block 2p+1], k < R
    __m256i px1[R];                      // odd last block
    alignas(32) float xd1[8];
  };

  static void run(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
    const int64_t nb = a.n_cols / quant::kQK8_0;
    const BlockQ8_0Act* x[R];
    for (int k = 0; k < R; ++k) x[k] = reinterpret_cast<const BlockQ8_0Act*>(xrow(a, k));
    const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
    Cache c;
    for (int64_t b0 = 0; b0 < nb || b0 == 0; b0 += kQ8ColBlocks) {
      const int64_t nc = nb - b0 < kQ8ColBlocks ? nb - b0 : kQ8ColBlocks;
      const int64_t np = nc / 2;
      for (int64_t p = 0; p < np; ++p) {
        const int64_t b = b0 + 2 * p;
        for (int k = 0; k < R; ++k) {
          const __m512i v = _mm512_inserti64x4(
              _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][b].qs))),
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][b + 1].qs)), 1);
          c.px[p][k] = _mm512_xor_si512(v, bias);
        }
        for (int l = 0; l < 8; ++l) {
          c.xd[p][l] = l < R ? x[l][b].d : 0.0f;
          c.xd[p][8 + l] = l < R ? x[l][b + 1].d : 0.0f;
        }
      }
      if (nc & 1) {
        for (int k = 0; k < R; ++k) c.px1[k] = Q8DotVnni::prep_x(x[k][b0 + nc - 1].qs);
        for (int l = 0; l < 8; ++l) c.xd1[l] = l < R ? x[l][b0 + nc - 1].d : 0.0f;
      }
      for (int64_t o = o_begin; o < o_end; ++o) {
        const BlockQ8_0* w = reinterpret_cast<const BlockQ8_0*>(a.w + o * a.row_bytes) + b0;
        alignas(32) float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        if (b0 != 0)
          for (int k = 0; k < R; ++k) t[k] = a.y[k * a.y_stride + o];
        __m256 acc = _mm256_load_ps(t);
        for (int64_t p = 0; p < np; ++p) {
          const __m512i wz = _mm512_inserti64x4(
              _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[2 * p].qs))),
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[2 * p + 1].qs)), 1);
          const __m512i negc = _mm512_sub_epi32(_mm512_setzero_si512(),
                                                _mm512_dpbusd_epi32(_mm512_setzero_si512(), bias, wz));
          __m512i v[8];
          for (int k = 0; k < 8; ++k)
            v[k] = k < R ? _mm512_dpbusd_epi32(negc, c.px[p][k], wz) : _mm512_setzero_si512();
          const __m512 isum = _mm512_cvtepi32_ps(reduce8x16(v));
          const __m512 wd = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(h2f(w[2 * p].d))),
                                               _mm256_set1_ps(h2f(w[2 * p + 1].d)), 1);
          const __m512 tt = _mm512_mul_ps(_mm512_mul_ps(wd, _mm512_load_ps(c.xd[p])), isum);
          acc = _mm256_add_ps(acc, _mm512_castps512_ps256(tt));     // block 2p
          acc = _mm256_add_ps(acc, _mm512_extractf32x8_ps(tt, 1));  // then block 2p+1
        }
        if (nc & 1) {
          const auto pw = Q8DotVnni::prep_w(w[nc - 1].qs);
          __m256i v[R];
          for (int k = 0; k < R; ++k) v[k] = Q8DotVnni::dot(pw, c.px1[k]);
          const __m256 isum = _mm256_cvtepi32_ps(hsum_lanes<R>(v));
          const __m256 s1 = _mm256_mul_ps(_mm256_set1_ps(h2f(w[nc - 1].d)), _mm256_load_ps(c.xd1));
          acc = _mm256_add_ps(acc, _mm256_mul_ps(s1, isum));
        }
        _mm256_store_ps(t, acc);
        for (int k = 0; k < R; ++k) a.y[k * a.y_stride + o] = t[k];
      }
      if (nb == 0) break;
    }
  }
};

template <int R>
struct Q8Avx512 {
  static void run(const RowsArgs& a, int64_t b, int64_t e) {
    if constexpr (R >= 5) {
      Q8Pair512<R>::run(a, b, e);
    } else {
      Q8K<Q8DotVnni>::template K<R>::run(a, b, e);
    }
  }
};

// ---- Q8_0, outputs in lanes --------------------------------------------------------------
// 16 outputs of one weight block are transposed into T[d] (d = 0..7): int32 lane L holds the
// 4 quants [4d, 4d+4) of output o0 + kQ8LaneRow[L]. One activation row then costs 8 vpdpbusd
// with a broadcast activation dword per block for all 16 outputs, and no horizontal sum.
// Exact for every byte: the weights enter biased (w XOR 0x80 = w + 128, u8) and the row's
// correction −128·Σx starts the int32 accumulator, so each lane ends at Σ w·x exactly. The
// float part is the reference sequence per (output, row), lane-wise: s = f16(w.d)·x.d,
// t = s·isum, acc = acc + t, block by block.
constexpr int kQ8LaneRow[16] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};
constexpr int64_t kQ8LanesMaxBlocks = 512;

// T[0..7] of block b for outputs o0..o0+15 (lane order kQ8LaneRow), weights biased to u8.
__attribute__((always_inline)) inline void q8_lanes_transpose(const RowsArgs& a, int64_t o0, int64_t b, __m512i* T) {
  __m512i z[8];
  #pragma GCC unroll 16
  for (int i = 0; i < 8; ++i) {
    const BlockQ8_0* lo = reinterpret_cast<const BlockQ8_0*>(a.w + (o0 + i) * a.row_bytes) + b;
    const BlockQ8_0* hi = reinterpret_cast<const BlockQ8_0*>(a.w + (o0 + i + 8) * a.row_bytes) + b;
    z[i] = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo->qs))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi->qs)), 1);
  }
  __m512i u[8], v[4], w[4];
  #pragma GCC unroll 16
  for (int p = 0; p < 4; ++p) {
    u[2 * p] = _mm512_unpacklo_epi32(z[2 * p], z[2 * p + 1]);
    u[2 * p + 1] = _mm512_unpackhi_epi32(z[2 * p], z[2 * p + 1]);
  }
  // v[c] / w[c]: rows 0-3 / 4-7 (128-bit lanes 0, 1) and 8-11 / 12-15 (lanes 2, 3), element c.
  v[0] = _mm512_unpacklo_epi64(u[0], u[2]);
  v[1] = _mm512_unpackhi_epi64(u[0], u[2]);
  v[2] = _mm512_unpacklo_epi64(u[1], u[3]);
  v[3] = _mm512_unpackhi_epi64(u[1], u[3]);
  w[0] = _mm512_unpacklo_epi64(u[4], u[6]);
  w[1] = _mm512_unpackhi_epi64(u[4], u[6]);
  w[2] = _mm512_unpacklo_epi64(u[5], u[7]);
  w[3] = _mm512_unpackhi_epi64(u[5], u[7]);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  #pragma GCC unroll 16
  for (int c = 0; c < 4; ++c) {
    T[c] = _mm512_xor_si512(_mm512_shuffle_i32x4(v[c], w[c], 0x88), bias);
    T[4 + c] = _mm512_xor_si512(_mm512_shuffle_i32x4(v[c], w[c], 0xDD), bias);
  }
}

template <int R>
struct Q8Lanes {
  static void run(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
    const int64_t nb = a.n_cols / quant::kQK8_0;
    if (nb == 0 || nb > kQ8LanesMaxBlocks || o_end - o_begin < 16) {
      Q8Avx512<R>::run(a, o_begin, o_end);
      return;
    }
    const BlockQ8_0Act* x[R];
    #pragma GCC unroll 16
    for (int k = 0; k < R; ++k) x[k] = reinterpret_cast<const BlockQ8_0Act*>(xrow(a, k));
    // corr[k][b] = −128·Σ x[k][b].qs (exact int32).
    alignas(64) int32_t corr[R][kQ8LanesMaxBlocks];
    const __m256i bias8 = _mm256_set1_epi8(static_cast<char>(0x80));
    #pragma GCC unroll 16
    for (int k = 0; k < R; ++k) {
      for (int64_t b = 0; b < nb; ++b) {
        const __m256i v = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][b].qs)), bias8);
        const __m256i sad = _mm256_sad_epu8(v, _mm256_setzero_si256());
        const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
        const int64_t biased = _mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1);
        corr[k][b] = static_cast<int32_t>(-128 * (biased - 32 * 128));
      }
    }
    __m512i offs = _mm512_setzero_si512();
    {
      alignas(64) int32_t t[16];
      #pragma GCC unroll 16
      for (int l = 0; l < 16; ++l) t[l] = static_cast<int32_t>(kQ8LaneRow[l] * a.row_bytes);
      offs = _mm512_load_si512(t);
    }
    int64_t o = o_begin;
    for (; o + 16 <= o_end; o += 16) {
      __m512 acc[R];
      #pragma GCC unroll 16
      for (int k = 0; k < R; ++k) acc[k] = _mm512_setzero_ps();
      const uint8_t* base = a.w + o * a.row_bytes;
      // Weight rows of the tiles 1 (first tile only) and 2 ahead (contiguous) while this one
      // computes: the transposing loads touch 16 rows at once, which the hardware prefetchers
      // follow poorly.
      if (o == o_begin && o + 32 <= o_end) prefetch_bytes(base + 16 * a.row_bytes, 16 * a.row_bytes);
      if (o + 48 <= o_end) prefetch_bytes(base + 32 * a.row_bytes, 16 * a.row_bytes);
      for (int64_t b = 0; b < nb; ++b) {
        __m512i T[8];
        q8_lanes_transpose(a, o, b, T);
        // f16 scales of the 16 outputs (low half of a dword gathered at each block start).
        const __m512i dw = _mm512_i32gather_epi32(offs, base + b * sizeof(BlockQ8_0), 1);
        const __m512 wd = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dw));
        #pragma GCC unroll 16
        for (int k = 0; k < R; ++k) {
          const int32_t* xq = reinterpret_cast<const int32_t*>(x[k][b].qs);
          __m512i i0 = _mm512_set1_epi32(corr[k][b]);
          __m512i i1 = _mm512_setzero_si512();
          #pragma GCC unroll 16
          for (int d = 0; d < 8; d += 2) {
            i0 = _mm512_dpbusd_epi32(i0, T[d], _mm512_set1_epi32(xq[d]));
            i1 = _mm512_dpbusd_epi32(i1, T[d + 1], _mm512_set1_epi32(xq[d + 1]));
          }
          const __m512 isum = _mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1));
          const __m512 sc = _mm512_mul_ps(wd, _mm512_set1_ps(x[k][b].d));
          acc[k] = _mm512_add_ps(acc[k], _mm512_mul_ps(sc, isum));
        }
      }
      #pragma GCC unroll 16
      for (int k = 0; k < R; ++k) {
        alignas(64) float t[16];
        _mm512_store_ps(t, acc[k]);
        float* y = a.y + k * a.y_stride + o;
        #pragma GCC unroll 16
        for (int l = 0; l < 16; ++l) y[kQ8LaneRow[l]] = t[l];
      }
    }
    if (o < o_end) Q8Avx512<R>::run(a, o, o_end);
  }
};

void q8_0_rows_avx512(const RowsArgs& a, int64_t b, int64_t e) { dispatch_r<Q8Lanes>(a, b, e); }

// Q2_K with VNNI: prepare() folds each 16-element sub-block scale into the quants with a
// byte lookup (q·sc ≤ 3·15 = 45 fits u8: per 128-bit lane the table is 0, s, 2s, 3s), so a
// row costs one vpdpbusd per 32 elements. Integer sums stay exact (u8·s8 into int32).
struct Q2KDotVnni {
  static void prepare(KBlock* wb) {
    // int16 lanes (256·s, 770·s) = bytes (0, s, 2s, 3s) in the first 4 bytes of each lane.
    const __m256i k = _mm256_setr_epi16(256, 770, 0, 0, 0, 0, 0, 0, 256, 770, 0, 0, 0, 0, 0, 0);
    for (int i = 0; i < 8; ++i)
      wb->q[i] = _mm256_shuffle_epi8(_mm256_mullo_epi16(wb->sc[i], k), wb->q[i]);
  }
  static void dot(const KBlock& wb, const BlockQ8K& y, __m256i* isum, __m256i* summs) {
    // Two accumulators: halves the dependency chain (integer sums, any order is exact).
    __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
    for (int i = 0; i < 8; i += 2) {
      acc0 = _mm256_dpbusd_epi32(acc0, wb.q[i],
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 32 * i)));
      acc1 = _mm256_dpbusd_epi32(acc1, wb.q[i + 1],
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.qs + 32 * i + 32)));
    }
    *isum = _mm256_add_epi32(acc0, acc1);
    *summs = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums)),
                               wb.mins);
  }
};

// vpdpwssd: multiply the maddubs pairs by the group scale and accumulate, one instruction.
struct Iq2AccVnni {
  static __m256i acc(__m256i acc, __m256i p16, __m256i ls16) { return _mm256_dpwssd_epi32(acc, p16, ls16); }
};

// ---- IQ2_XXS, outputs in lanes ---------------------------------------------------------------
// 8 outputs per tile, output i in qword lane i. Per block, the 8 rows' u32 words (a0, a1 of
// each group) are transposed so the table indices of all 8 outputs come out of a few vector
// ops; one 8-lane gather per (group, sub-chunk l) then yields W[g][l] = the 8 signed weights
// [32g + 8l, +8) of every output, biased to u8 (w + 128). A row then costs, per group, 4
// vpdpbusd with its broadcast activation qword, one vpmulld by the group scale and one add.
// Exact for every byte: the accumulator starts at −128·Σx_g (in the low dword of each lane),
// so the two dwords of lane i sum to Σ w·x of group g; ls_g multiplies both dwords (exact
// int32). The float part is the reference sequence per (output, row), lane-wise.
constexpr int64_t kIq2LanesMaxBlocks = 64;

struct Iq2LaneBlock {
  __m512i w[8][4];  // [group][sub-chunk] biased weights, qword lane i = output i
  __m512i ls[8];    // group scale of output i in both dwords of lane i
};

__attribute__((always_inline)) inline void iq2_lanes_decode(const RowsArgs& a, int64_t o0, int64_t b, const long long* table,
                             Iq2LaneBlock* out) {
  __m512i z[8];
  #pragma GCC unroll 16
  for (int i = 0; i < 8; ++i) {
    const BlockIQ2XXS* blk = reinterpret_cast<const BlockIQ2XXS*>(a.w + (o0 + i) * a.row_bytes) + b;
    z[i] = _mm512_loadu_si512(blk->qs);  // dword 2g = a0 of group g, 2g + 1 = a1
  }
  __m512i u[8], v[4], w[4];
  #pragma GCC unroll 16
  for (int p = 0; p < 4; ++p) {
    u[2 * p] = _mm512_unpacklo_epi32(z[2 * p], z[2 * p + 1]);
    u[2 * p + 1] = _mm512_unpackhi_epi32(z[2 * p], z[2 * p + 1]);
  }
  // v[c] / w[c]: 128-bit lane q holds dword 4q + c of rows 0-3 / rows 4-7.
  v[0] = _mm512_unpacklo_epi64(u[0], u[2]);
  v[1] = _mm512_unpackhi_epi64(u[0], u[2]);
  v[2] = _mm512_unpacklo_epi64(u[1], u[3]);
  v[3] = _mm512_unpackhi_epi64(u[1], u[3]);
  w[0] = _mm512_unpacklo_epi64(u[4], u[6]);
  w[1] = _mm512_unpackhi_epi64(u[4], u[6]);
  w[2] = _mm512_unpacklo_epi64(u[5], u[7]);
  w[3] = _mm512_unpackhi_epi64(u[5], u[7]);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i m255 = _mm512_set1_epi32(255), m127 = _mm512_set1_epi32(127);
  // Group pairs (g, g + 2) for g in {0, 1, 4, 5}: dwords 2g / 2g + 1 are column c = 2(g%2)
  // (+1) of lanes qa = g/2 and qa + 1.
  #pragma GCC unroll 16
  for (int g : {0, 1, 4, 5}) {
    const int c = 2 * (g % 2);
    const long long qa = g / 2, qb = qa + 1;
    const __m512i sel = _mm512_setr_epi64(2 * qa, 2 * qa + 1, 8 + 2 * qa, 9 + 2 * qa, 2 * qb, 2 * qb + 1,
                                          8 + 2 * qb, 9 + 2 * qb);
    const __m512i x0 = _mm512_permutex2var_epi64(v[c], sel, w[c]);          // a0: g | g + 2
    const __m512i x1 = _mm512_permutex2var_epi64(v[c + 1], sel, w[c + 1]);  // a1: g | g + 2
    const __m512i ls = _mm512_add_epi32(_mm512_slli_epi32(_mm512_srli_epi32(x1, 28), 1), _mm512_set1_epi32(1));
    #pragma GCC unroll 16
    for (int h = 0; h < 2; ++h) {
      const __m512i l64 = _mm512_cvtepu32_epi64(h == 0 ? _mm512_castsi512_si256(ls) : _mm512_extracti64x4_epi64(ls, 1));
      out->ls[g + 2 * h] = _mm512_or_si512(l64, _mm512_slli_epi64(l64, 32));
    }
    #pragma GCC unroll 16
    for (int l = 0; l < 4; ++l) {
      const __m512i gi = _mm512_and_si512(_mm512_srli_epi32(x0, 8 * l), m255);
      const __m512i si = _mm512_and_si512(_mm512_srli_epi32(x1, 7 * l), m127);
      const __m512i idx = _mm512_or_si512(_mm512_slli_epi32(gi, 7), si);
      out->w[g][l] = _mm512_xor_si512(_mm512_i32gather_epi64(_mm512_castsi512_si256(idx), table, 8), bias);
      out->w[g + 2][l] = _mm512_xor_si512(_mm512_i32gather_epi64(_mm512_extracti64x4_epi64(idx, 1), table, 8), bias);
    }
  }
}

template <int R>
struct Iq2Lanes {
  static void run(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
    const int64_t nb = a.n_cols / quant::kQKK;
    if (nb == 0 || nb > kIq2LanesMaxBlocks || o_end - o_begin < 8) {
      iq2_xxs_rows_x86<Iq2AccVnni>(a, o_begin, o_end);
      return;
    }
    const BlockQ8K* x[R];
    #pragma GCC unroll 16
    for (int k = 0; k < R; ++k) x[k] = reinterpret_cast<const BlockQ8K*>(xrow(a, k));
    // corr[k][b][g] = −128·Σ x[k][b].qs[32g, 32g + 32) (exact), as the low dword of a qword.
    alignas(64) int64_t corr[R][kIq2LanesMaxBlocks][8];
    const __m256i bias8 = _mm256_set1_epi8(static_cast<char>(0x80));
    #pragma GCC unroll 16
    for (int k = 0; k < R; ++k) {
      for (int64_t b = 0; b < nb; ++b) {
        #pragma GCC unroll 16
        for (int g = 0; g < 8; ++g) {
          const __m256i v =
              _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[k][b].qs + 32 * g)), bias8);
          const __m256i sad = _mm256_sad_epu8(v, _mm256_setzero_si256());
          const __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(sad), _mm256_extracti128_si256(sad, 1));
          const int64_t biased = _mm_cvtsi128_si64(s2) + _mm_extract_epi64(s2, 1);
          corr[k][b][g] = static_cast<int64_t>(static_cast<uint32_t>(static_cast<int32_t>(-128 * (biased - 32 * 128))));
        }
      }
    }
    const long long* table = reinterpret_cast<const long long*>(iq2_signed_grid());
    alignas(32) int32_t offs_a[8];
    #pragma GCC unroll 16
    for (int i = 0; i < 8; ++i) offs_a[i] = static_cast<int32_t>(i * a.row_bytes);
    const __m256i offs = _mm256_load_si256(reinterpret_cast<const __m256i*>(offs_a));
    int64_t o = o_begin;
    for (; o + 8 <= o_end; o += 8) {
      __m256 sumf[R];
      #pragma GCC unroll 16
      for (int k = 0; k < R; ++k) sumf[k] = _mm256_setzero_ps();
      const uint8_t* base = a.w + o * a.row_bytes;
      if (o + 16 <= o_end) prefetch_bytes(base + 8 * a.row_bytes, 8 * a.row_bytes);
      for (int64_t b = 0; b < nb; ++b) {
        Iq2LaneBlock wb;
        iq2_lanes_decode(a, o, b, table, &wb);
        const __m256i dw = _mm256_i32gather_epi32(reinterpret_cast<const int*>(base + b * sizeof(BlockIQ2XXS)), offs, 1);
        const __m256 wd = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(dw));
        #pragma GCC unroll 16
        for (int k = 0; k < R; ++k) {
          const long long* xq = reinterpret_cast<const long long*>(x[k][b].qs);
          __m512i tot = _mm512_setzero_si512();
          #pragma GCC unroll 16
          for (int g = 0; g < 8; ++g) {
            __m512i acc = _mm512_set1_epi64(corr[k][b][g]);
            #pragma GCC unroll 16
            for (int l = 0; l < 4; ++l) acc = _mm512_dpbusd_epi32(acc, wb.w[g][l], _mm512_set1_epi64(xq[4 * g + l]));
            tot = _mm512_add_epi32(tot, _mm512_mullo_epi32(acc, wb.ls[g]));
          }
          // Lane i: dword 2i + dword 2i + 1 = the block's integer sum of output i.
          const __m256i bsum = _mm512_cvtepi64_epi32(_mm512_add_epi32(tot, _mm512_srli_epi64(tot, 32)));
          const __m256 d = _mm256_mul_ps(wd, _mm256_set1_ps(x[k][b].d));
          sumf[k] = _mm256_add_ps(sumf[k], _mm256_mul_ps(d, _mm256_cvtepi32_ps(bsum)));
        }
      }
      #pragma GCC unroll 16
      for (int k = 0; k < R; ++k) {
        alignas(32) float t[8];
        _mm256_store_ps(t, _mm256_mul_ps(_mm256_set1_ps(0.125f), sumf[k]));
        float* y = a.y + k * a.y_stride + o;
        #pragma GCC unroll 16
        for (int i = 0; i < 8; ++i) y[i] = t[i];
      }
    }
    if (o < o_end) iq2_xxs_rows_x86<Iq2AccVnni>(a, o, o_end);
  }
};

void iq2_xxs_rows_avx512(const RowsArgs& a, int64_t b, int64_t e) {
  // The fallback inside Iq2Lanes dispatches on a.r itself.
  dispatch_r<Iq2Lanes>(a, b, e);
}

// ---- Q2_K, outputs in lanes ------------------------------------------------------------------
// 16 outputs per tile in the int32 lanes (natural order). Per block the 16 rows' qs (16 dwords
// each) and scales (4 dwords each) are transposed; W[d][j] = the 2-bit quants of qs dword d
// shifted by 2j, times their sub-block scale (q·sc <= 45: one vpmullw on the byte pairs is
// exact, no carry between bytes), i.e. elements 128n + 32j + 4lq .. +3 (d = 8n + lq) of every
// output. A row then costs 64 vpdpbusd (u8 weights × s8 broadcast activation dword, exact)
// for isum and 8 vpdpwssd (mins × bsums pairs) for summs, for all 16 outputs. The float part
// is the reference sequence per (output, row), lane-wise.
__attribute__((always_inline)) inline void transpose16x16(__m512i* r) {
  __m512i t[16], u[16];
#pragma GCC unroll 16
  for (int p = 0; p < 8; ++p) {
    t[2 * p] = _mm512_unpacklo_epi32(r[2 * p], r[2 * p + 1]);
    t[2 * p + 1] = _mm512_unpackhi_epi32(r[2 * p], r[2 * p + 1]);
  }
#pragma GCC unroll 16
  for (int q = 0; q < 4; ++q) {
    u[4 * q + 0] = _mm512_unpacklo_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 1] = _mm512_unpackhi_epi64(t[4 * q], t[4 * q + 2]);
    u[4 * q + 2] = _mm512_unpacklo_epi64(t[4 * q + 1], t[4 * q + 3]);
    u[4 * q + 3] = _mm512_unpackhi_epi64(t[4 * q + 1], t[4 * q + 3]);
  }
  // u[4q + c], 128-bit lane L: rows 4q..4q+3 of dword 4L + c.
#pragma GCC unroll 16
  for (int c = 0; c < 4; ++c) {
    const __m512i a0 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x88);       // r0-7: dw c, 8+c
    const __m512i a1 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xDD);       // r0-7: dw 4+c, 12+c
    const __m512i b0 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x88);  // r8-15
    const __m512i b1 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xDD);
    r[c] = _mm512_shuffle_i32x4(a0, b0, 0x88);
    r[8 + c] = _mm512_shuffle_i32x4(a0, b0, 0xDD);
    r[4 + c] = _mm512_shuffle_i32x4(a1, b1, 0x88);
    r[12 + c] = _mm512_shuffle_i32x4(a1, b1, 0xDD);
  }
}

struct Q2LaneBlock {
  __m512i w[16][4];  // [qs dword d][shift j] scaled quants, lane = output
  __m512i mins[8];   // int16 pairs (min[2p], min[2p+1]) per lane
};

__attribute__((always_inline)) inline void q2_lanes_decode(const RowsArgs& a, int64_t o0, int64_t b,
                                                           Q2LaneBlock* out) {
  __m512i q[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) {
    const BlockQ2K* blk = reinterpret_cast<const BlockQ2K*>(a.w + (o0 + i) * a.row_bytes) + b;
    q[i] = _mm512_loadu_si512(blk->qs);
  }
  transpose16x16(q);
  // Scales: Z[m] int32 lane o = scales dword m of output o.
  __m512i z[4];
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    auto ld = [&](int i) {
      return _mm_loadu_si128(reinterpret_cast<const __m128i*>(
          (reinterpret_cast<const BlockQ2K*>(a.w + (o0 + i) * a.row_bytes) + b)->scales));
    };
    // 128-bit lane L = output m + 4L (all 4 scale dwords).
    __m512i v = _mm512_castsi128_si512(ld(m));
    v = _mm512_inserti32x4(v, ld(m + 4), 1);
    v = _mm512_inserti32x4(v, ld(m + 8), 2);
    z[m] = _mm512_inserti32x4(v, ld(m + 12), 3);
  }
  // Transpose 4x4 within each 128-bit lane: s[m] lane 4L + e = scales dword m of output 4L + e.
  const __m512i t0 = _mm512_unpacklo_epi32(z[0], z[1]), t1 = _mm512_unpackhi_epi32(z[0], z[1]);
  const __m512i t2 = _mm512_unpacklo_epi32(z[2], z[3]), t3 = _mm512_unpackhi_epi32(z[2], z[3]);
  const __m512i s[4] = {_mm512_unpacklo_epi64(t0, t2), _mm512_unpackhi_epi64(t0, t2),
                        _mm512_unpacklo_epi64(t1, t3), _mm512_unpackhi_epi64(t1, t3)};
  const __m512i m15 = _mm512_set1_epi32(15), m3 = _mm512_set1_epi8(3);
  __m512i sc16[16];
#pragma GCC unroll 16
  for (int sb = 0; sb < 16; ++sb) {
    const __m512i sc = _mm512_and_si512(_mm512_srli_epi32(s[sb / 4], 8 * (sb % 4)), m15);
    sc16[sb] = _mm512_or_si512(sc, _mm512_slli_epi32(sc, 16));
  }
#pragma GCC unroll 8
  for (int p = 0; p < 8; ++p) {
    const int sb = 2 * p;
    const __m512i lo = _mm512_and_si512(_mm512_srli_epi32(s[sb / 4], 8 * (sb % 4) + 4), m15);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(s[(sb + 1) / 4], 8 * ((sb + 1) % 4) + 4), m15);
    out->mins[p] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
  }
#pragma GCC unroll 16
  for (int d = 0; d < 16; ++d) {
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const int sb = 8 * (d / 8) + 2 * j + ((d % 8) >= 4 ? 1 : 0);
      out->w[d][j] = _mm512_mullo_epi16(_mm512_and_si512(_mm512_srli_epi32(q[d], 2 * j), m3), sc16[sb]);
    }
  }
}

template <int R>
struct Q2Lanes {
  static void run(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
    const int64_t nb = a.n_cols / quant::kQKK;
    if (nb == 0 || o_end - o_begin < 16) {
      KQuantK<false, Q2KDotVnni>::K<R>::run(a, o_begin, o_end);
      return;
    }
    const BlockQ8K* x[R];
    for (int k = 0; k < R; ++k) x[k] = reinterpret_cast<const BlockQ8K*>(xrow(a, k));
    alignas(64) int32_t offs_a[16];
    for (int i = 0; i < 16; ++i) offs_a[i] = static_cast<int32_t>(i * a.row_bytes);
    const __m512i offs = _mm512_load_si512(offs_a);
    int64_t o = o_begin;
    for (; o + 16 <= o_end; o += 16) {
      __m512 sumf[R];
      for (int k = 0; k < R; ++k) sumf[k] = _mm512_setzero_ps();
      const uint8_t* base = a.w + o * a.row_bytes;
      if (o + 32 <= o_end) prefetch_bytes(base + 16 * a.row_bytes, 16 * a.row_bytes);
      for (int64_t b = 0; b < nb; ++b) {
        Q2LaneBlock wb;
        q2_lanes_decode(a, o, b, &wb);
        // (d | dmin << 16) of the 16 outputs.
        const __m512i dd = _mm512_i32gather_epi32(offs, base + b * sizeof(BlockQ2K) + offsetof(BlockQ2K, d), 1);
        const __m512 wd = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
        const __m512 wm = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
        for (int k = 0; k < R; ++k) {
          const int32_t* xq = reinterpret_cast<const int32_t*>(x[k][b].qs);
          const int32_t* bs = reinterpret_cast<const int32_t*>(x[k][b].bsums);
          __m512i i0 = _mm512_setzero_si512(), i1 = _mm512_setzero_si512();
#pragma GCC unroll 16
          for (int d = 0; d < 16; ++d) {
            const int n = d / 8, lq = d % 8;
#pragma GCC unroll 4
            for (int j = 0; j < 4; j += 2) {
              i0 = _mm512_dpbusd_epi32(i0, wb.w[d][j], _mm512_set1_epi32(xq[32 * n + 8 * j + lq]));
              i1 = _mm512_dpbusd_epi32(i1, wb.w[d][j + 1], _mm512_set1_epi32(xq[32 * n + 8 * (j + 1) + lq]));
            }
          }
          __m512i sm = _mm512_setzero_si512();
#pragma GCC unroll 8
          for (int p = 0; p < 8; ++p) sm = _mm512_dpwssd_epi32(sm, wb.mins[p], _mm512_set1_epi32(bs[p]));
          const __m512 isum = _mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1));
          const __m512 summs = _mm512_cvtepi32_ps(sm);
          const __m512 yd = _mm512_set1_ps(x[k][b].d);
          const __m512 ta = _mm512_mul_ps(_mm512_mul_ps(yd, wd), isum);
          const __m512 tc = _mm512_mul_ps(_mm512_mul_ps(yd, wm), summs);
          sumf[k] = _mm512_add_ps(sumf[k], _mm512_sub_ps(ta, tc));
        }
      }
      for (int k = 0; k < R; ++k) _mm512_storeu_ps(a.y + k * a.y_stride + o, sumf[k]);
    }
    if (o < o_end) KQuantK<false, Q2KDotVnni>::K<R>::run(a, o, o_end);
  }
};

void q2_k_rows_avx512(const RowsArgs& a, int64_t b, int64_t e) { dispatch_r<Q2Lanes>(a, b, e); }

// ---- activation quantization ------------------------------------------------------------------
// Byte-exact twins of quant::quantize_q8_0_act / quantize_q8_k_act:
//  * amax: max(|x|, running) with the running value as the NaN-wins operand, so NaN inputs
//    are skipped exactly like `if (av > amax)`; max is exact in any order;
//  * the Q8_K sign source is the FIRST element whose |x| equals amax (the scalar loop keeps
//    the first strict maximum);
//  * q = cvtps_epi32(x·s) rounds to nearest even like lrintf; NaN / ±inf / |v| >= 2^31 give
//    INT_MIN, and the scalar lrintf gives LONG_MIN for NaN / ±inf, both clamp to −128. A finite
//    |v| in [2^31, 2^63) cannot occur: |x·s| <= ~2·127 by construction of s.
inline __m512 abs512(__m512 v) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7fffffff))); }

inline __m512i quant_lanes(__m512 x, __m512 s) {
  const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(x, s));
  return _mm512_min_epi32(_mm512_max_epi32(q, _mm512_set1_epi32(-128)), _mm512_set1_epi32(127));
}

void quantize_q8_0_act_avx512(const float* x, BlockQ8_0Act* out, int64_t n) {
  for (int64_t b = 0; b < n / quant::kQK8_0; ++b) {
    const float* xb = x + b * quant::kQK8_0;
    const __m512 x0 = _mm512_loadu_ps(xb), x1 = _mm512_loadu_ps(xb + 16);
    __m512 m = _mm512_max_ps(abs512(x0), _mm512_setzero_ps());
    m = _mm512_max_ps(abs512(x1), m);
    const float amax = _mm512_reduce_max_ps(m);
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = d;
    const __m512 s = _mm512_set1_ps(id);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs), _mm512_cvtepi32_epi8(quant_lanes(x0, s)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].qs + 16), _mm512_cvtepi32_epi8(quant_lanes(x1, s)));
  }
}

void quantize_q8_k_act_avx512(const float* x, BlockQ8K* out, int64_t n) {
  for (int64_t b = 0; b < n / quant::kQKK; ++b) {
    const float* xb = x + b * quant::kQKK;
    BlockQ8K& y = out[b];
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < quant::kQKK; i += 16) m = _mm512_max_ps(abs512(_mm512_loadu_ps(xb + i)), m);
    const float amax = _mm512_reduce_max_ps(m);
    if (amax == 0.0f) {
      y.d = 0.0f;
      std::memset(y.qs, 0, sizeof y.qs);
      std::memset(y.bsums, 0, sizeof y.bsums);
      continue;
    }
    float max = 0.0f;
    const __m512 va = _mm512_set1_ps(amax);
    for (int i = 0; i < quant::kQKK; i += 16) {
      const __mmask16 hit = _mm512_cmp_ps_mask(abs512(_mm512_loadu_ps(xb + i)), va, _CMP_EQ_OQ);
      if (hit != 0) {
        max = xb[i + __builtin_ctz(hit)];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m512 s = _mm512_set1_ps(iscale);
    for (int j = 0; j < quant::kQKK / 16; ++j) {
      const __m512i q = quant_lanes(_mm512_loadu_ps(xb + 16 * j), s);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y.qs + 16 * j), _mm512_cvtepi32_epi8(q));
      y.bsums[j] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
    }
    y.d = 1.0f / iscale;
  }
}

}  // namespace

const KernelTable* avx512_table() {
  static const KernelTable t = [] {
    KernelTable k = make_x86_table();
    k.f32 = dense_rows_avx512<Dense::kF32>;
    k.f16 = dense_rows_avx512<Dense::kF16>;
    k.bf16 = dense_rows_avx512<Dense::kBF16>;
    k.dot_f32 = dot_f32_avx512;
    k.sumsq_rows_f64 = sumsq_rows_f64_avx512;
    k.scale_mul = scale_mul_avx512;
    k.dot_f32_many = dot_f32_many_avx512;
    k.weighted_sum = weighted_sum_avx512;
    k.q8_0 = q8_0_rows_avx512;
    k.q2_k = q2_k_rows_avx512;
    k.iq2_xxs = iq2_xxs_rows_avx512;
    k.quantize_q8_0_act = quantize_q8_0_act_avx512;
    k.quantize_q8_k_act = quantize_q8_k_act_avx512;
    return k;
  }();
  return &t;
}

}  // namespace ds4::backend::cpu::detail
#else
#include "backend/cpu/kernels_internal.h"

namespace ds4::backend::cpu::detail {
const KernelTable* avx512_table() { return nullptr; }
}  // namespace ds4::backend::cpu::detail
#endif
