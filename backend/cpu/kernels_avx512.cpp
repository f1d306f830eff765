// backend/cpu/kernels_avx512.cpp — the Isa::kAvx512 KernelTable (F, BW, VL, DQ, VNNI; F16C).
//
// Role: the 256-bit templates of kernels_x86.h recompiled with AVX-512 flags (EVEX encodings,
// 32 registers), plus 512-bit replacements where they pay: the dense dots use ONE 16-lane
// accumulator (lane j = p[j] of the canonical order, mul then add, never FMA) and Q8_0 uses
// VNNI (vpdpbusd) in a form exact for every byte: Σ (x+128)·w − 128·Σ w.
// Invariant: same bits as kernels_scalar.cpp.
#if defined(__x86_64__) && defined(__AVX512F__) && defined(__AVX512BW__) && \
    defined(__AVX512VL__) && defined(__AVX512DQ__) && defined(__AVX512VNNI__)
// GCC 12's own avx512fintrin.h trips -W(maybe-)uninitialized on _mm512_castps512_ps256 and
// the extract intrinsics (an undefined-value operand by design); silence it for this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "backend/cpu/kernels_x86.h"

namespace ds4::cpu::detail {
namespace {

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

// Step 8 of the tree is lo 8 lanes + hi 8 lanes; finish16 then does 4, 2, 1 and the tail.
template <Dense T>
inline float finish512(__m512 p, const uint8_t* w, const float* x, int64_t m, int64_t n) {
  return finish16<T>(_mm512_castps512_ps256(p), _mm512_extractf32x8_ps(p, 1), w, x, m, n);
}

// Rows × outputs tile: R·OO 16-lane accumulators (32 zmm registers in all); each activation
// load serves OO outputs, and OO independent chains per row hide the add latency.
template <Dense T, int R, int OO>
inline void dense512_tile(const RowsArgs& a, int64_t o0) {
  const int64_t n = a.n_cols;
  const int64_t m = n - n % 16;
  const uint8_t* w[OO];
  for (int j = 0; j < OO; ++j) w[j] = a.w + (o0 + j) * a.row_bytes;
  const float* x[R];
  for (int k = 0; k < R; ++k) x[k] = reinterpret_cast<const float*>(xrow(a, k));
  __m512 p[OO][R];
  for (int j = 0; j < OO; ++j)
    for (int k = 0; k < R; ++k) p[j][k] = _mm512_setzero_ps();
  for (int64_t i = 0; i < m; i += 16) {
    __m512 xv[R];
    for (int k = 0; k < R; ++k) xv[k] = _mm512_loadu_ps(x[k] + i);
    for (int j = 0; j < OO; ++j) {
      const __m512 wv = load16_512<T>(w[j], i);
      for (int k = 0; k < R; ++k) p[j][k] = _mm512_add_ps(p[j][k], _mm512_mul_ps(wv, xv[k]));
    }
  }
  for (int j = 0; j < OO; ++j)
    for (int k = 0; k < R; ++k)
      a.y[k * a.y_stride + o0 + j] = finish512<T>(p[j][k], w[j], x[k], m, n);
}

constexpr int dense_outputs_512(int r) { return r <= 2 ? 8 : (16 / r < 2 ? 2 : 16 / r); }

template <Dense T>
struct Dense512K {
  template <int R>
  struct K {
    static void run(const RowsArgs& a, int64_t o_begin, int64_t o_end) {
      constexpr int OO = dense_outputs_512(R);
      int64_t o = o_begin;
      for (; o + OO <= o_end; o += OO) dense512_tile<T, R, OO>(a, o);
      for (; o < o_end; ++o) dense512_tile<T, R, 1>(a, o);
    }
  };
};

template <Dense T>
void dense_rows_avx512(const RowsArgs& a, int64_t b, int64_t e) {
  dispatch_r<Dense512K<T>::template K>(a, b, e);
}

float dot_f32_avx512(const float* w, const float* x, int64_t n) {
  const int64_t m = n - n % 16;
  __m512 p = _mm512_setzero_ps();
  for (int64_t i = 0; i < m; i += 16)
    p = _mm512_add_ps(p, _mm512_mul_ps(_mm512_loadu_ps(w + i), _mm512_loadu_ps(x + i)));
  return finish512<Dense::kF32>(p, reinterpret_cast<const uint8_t*>(w), x, m, n);
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

void q8_0_rows_avx512(const RowsArgs& a, int64_t b, int64_t e) { dispatch_r<Q8Avx512>(a, b, e); }

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

void q2_k_rows_avx512(const RowsArgs& a, int64_t b, int64_t e) {
  dispatch_r<KQuantK<false, Q2KDotVnni>::K>(a, b, e);
}

}  // namespace

const KernelTable* avx512_table() {
  static const KernelTable t = [] {
    KernelTable k = make_x86_table();
    k.f32 = dense_rows_avx512<Dense::kF32>;
    k.f16 = dense_rows_avx512<Dense::kF16>;
    k.bf16 = dense_rows_avx512<Dense::kBF16>;
    k.dot_f32 = dot_f32_avx512;
    k.q8_0 = q8_0_rows_avx512;
    k.q2_k = q2_k_rows_avx512;
    k.iq2_xxs = iq2_xxs_rows_x86<Iq2AccVnni>;
    return k;
  }();
  return &t;
}

}  // namespace ds4::cpu::detail
#else
#include "backend/cpu/kernels_internal.h"

namespace ds4::cpu::detail {
const KernelTable* avx512_table() { return nullptr; }
}  // namespace ds4::cpu::detail
#endif
