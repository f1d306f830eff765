// quant/kv_sim.cpp — FP8-E4M3 KV and Hadamard+FP4 indexer round trips (quant/kv_sim.h).
//
// Nearest-value rounding is closed form (grid_nearest: round-half-even on the f32 bit pattern
// for normal grid values, an add/subtract of a power of two on the uniform subnormal part).
// Nearest by |v − t| with exact ties to the even table index is exactly round-to-nearest-even
// onto the grid (index parity = mantissa parity); kv_sim_exhaustive_test checks it bit for
// bit against the former binary search and a linear scan.
#include "quant/kv_sim.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/detmath.h"
#include "core/status.h"
#include "quant/half.h"

namespace ds4::quant {

namespace {

// E4M3FN magnitudes by index, built at compile time (every value is exact in f32).
constexpr float exact_pow2(int k) {
  float r = 1.0f;
  for (; k > 0; --k) r *= 2.0f;
  for (; k < 0; ++k) r *= 0.5f;
  return r;
}
struct E4M3Table {
  float v[kE4M3Count];
};
constexpr E4M3Table make_e4m3_table() {
  E4M3Table t{};
  for (int i = 0; i < kE4M3Count; ++i) {
    const int e = i >> 3, m = i & 7;
    t.v[i] = e == 0 ? static_cast<float>(m) * exact_pow2(-9)
                    : (1.0f + static_cast<float>(m) * 0.125f) * exact_pow2(e - 7);
  }
  return t;
}
constexpr E4M3Table kE4M3 = make_e4m3_table();
static_assert(kE4M3.v[126] == 448.0f && kE4M3.v[1] == 0x1p-9f && kE4M3.v[56] == 1.0f);

constexpr float kE2M1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Closed-form nearest grid magnitude of a (0 <= a <= grid max, or NaN), equal to the nearest
// table entry by |difference| with exact ties to the even index (index = e*2^mbits + m, so
// "even index" is "even mantissa": plain round-to-nearest-even onto the grid).
//  * a >= kMinNormal (the smallest normal grid value): drop the low 23 - kMbits bits of the
//    f32 mantissa with round-half-even on the bit pattern; a carry into the exponent is the
//    correct next binade value. Never passes the grid max, which is representable.
//  * a < kMinNormal: the grid is uniform with step kStep = kMinNormal / 2^kMbits; adding and
//    subtracting kBig (ulp(kBig) == kStep, a < kBig) rounds to a step multiple, ties to even
//    under the default rounding mode (needs no fast-math / contraction, as every TU here).
// NaN reaches here for a signaling-NaN input (fmin(sNaN, max) is NaN; a quiet NaN gives max):
// the search found index 0 for it (every comparison false), so NaN -> 0.
template <int kMbits, int kMinNormalExp>
float grid_nearest(float a) {
  constexpr uint32_t kDrop = 23 - kMbits;
  constexpr uint32_t kHalf = (1u << (kDrop - 1)) - 1u;
  constexpr float kMinNormal = exact_pow2(kMinNormalExp);
  constexpr float kBig = exact_pow2(kMinNormalExp - kMbits + 23);
  uint32_t b;
  std::memcpy(&b, &a, sizeof b);
  b = (b + kHalf + ((b >> kDrop) & 1u)) & ~((1u << kDrop) - 1u);
  float normal;
  std::memcpy(&normal, &b, sizeof normal);
  const float sub = (a + kBig) - kBig;
  if (a >= kMinNormal) return normal;
  return a < kMinNormal ? sub : 0.0f;
}

// One scaled block of a row round trip, 8 elements per vector: amax (NaNs ignored), the
// power-of-two scale, then per element x / scale clamped to ±max, and the signed nearest grid
// value (grid_nearest, lane-wise) times the scale. Every lane runs the scalar definition's
// operations (e4m3_nearest / e2m1_nearest: same divisions, compares, bit arithmetic and
// products, selects instead of branches), so the values are the scalar ones bit for bit
// (KvRoundtrips.RowsEqualThePerElementDefinition); `ax < max ? ax : max` equals
// fmin(ax, max) here because arithmetic results are never signaling NaNs. Branch-free: the
// branchy scalar loop mispredicted on every sign and range change (4-5% of a tiny verify).
// With kCodes, the same pass also writes the block's store (quant/kv_sim.h: the indexer FP4
// rows, the compressed FP8 rows): the exponent byte k + 127 of scale = 2^k, and per element
// the code (sign < 0) << 3 | grid index of g (E2M1, two per byte) or (sign < 0) << 7 | grid
// index of g (E4M3, one byte each), g being the very magnitude the value is built from.
template <int kMbits, int kMinNormalExp, int kBlock, bool kCodes = false>
void round_block(float* x, float max, float min_amax, uint8_t* codes = nullptr, uint8_t* exp_byte = nullptr) {
  static_assert(kBlock % 8 == 0);
  typedef float F8 __attribute__((vector_size(32)));
  typedef uint32_t U8 __attribute__((vector_size(32)));
  typedef int32_t I8 __attribute__((vector_size(32)));
  constexpr uint32_t kDrop = 23 - kMbits;
  constexpr uint32_t kHalf = (1u << (kDrop - 1)) - 1u;
  constexpr float kMinNormal = exact_pow2(kMinNormalExp);
  constexpr float kBig = exact_pow2(kMinNormalExp - kMbits + 23);
  F8 v[kBlock / 8];
  std::memcpy(v, x, sizeof v);
  const U8 abs_mask = U8{} + 0x7fffffffu;
  F8 m = F8{};
  for (int k = 0; k < kBlock / 8; ++k) {
    const F8 av = (F8)((U8)v[k] & abs_mask);
    m = av > m ? av : m;
  }
  float amax = 0.0f;
  for (int l = 0; l < 8; ++l) amax = m[l] > amax ? m[l] : amax;
  if (amax < min_amax) amax = min_amax;
  const int e = detmath::ceil_log2_f32(amax / max);  // -126 .. 128 (128: amax is inf)
  const float scale = ldexpf(1.0f, e);
  if constexpr (kCodes) *exp_byte = static_cast<uint8_t>(e + 127);
  [[maybe_unused]] I8 code[kBlock / 8];
  for (int k = 0; k < kBlock / 8; ++k) {
    F8 t = v[k] / scale;
    t = t > max ? F8{} + max : t;
    t = t < -max ? F8{} - max : t;
    const F8 sign = t < 0.0f ? F8{} - 1.0f : F8{} + 1.0f;
    const F8 ax = (F8)((U8)t & abs_mask);
    const F8 a = ax < max ? ax : F8{} + max;
    U8 bits = (U8)a;
    bits = (bits + kHalf + ((bits >> kDrop) & 1u)) & ~((1u << kDrop) - 1u);
    const F8 normal = (F8)bits;
    const F8 sub = (a + kBig) - kBig;
    const I8 is_normal = a >= kMinNormal;
    const F8 g = is_normal ? normal : sub;
    v[k] = sign * g * scale;
    if constexpr (kCodes && kMbits == 1) {
      static_assert(kMinNormalExp == 0, "E2M1 grid indices");
      // Index of g in {0, .5, 1, 1.5, 2, 3, 4, 6}: 2g below 1, else from the f32 bits (exponent
      // and the one kept mantissa bit: 1.0 = 0x3f800000 -> 0xfe -> 2, ..., 6.0 -> 0x103 -> 7).
      const I8 low = __builtin_convertvector(g * 2.0f, I8);
      const I8 high = (I8)(((U8)g >> 22) - 0xfcu);
      const I8 idx = g < 1.0f ? low : high;
      code[k] = idx | (sign < 0.0f ? I8{} + 8 : I8{});
    } else if constexpr (kCodes) {
      static_assert(kMbits == 3 && kMinNormalExp == -6, "E4M3 grid indices");
      // Index e·8 + m of g on the E4M3FN grid: 512g (= m, e = 0) below 2^-6, else from the f32
      // bits (biased exponent − 120 and the three kept mantissa bits: 2^-6 = 0x3c800000 ->
      // 0x3c8 − 960 = 8, 1.0 -> 56, 448 = 0x43e00000 -> 126).
      const I8 low = __builtin_convertvector(g * 512.0f, I8);
      const I8 high = (I8)(((U8)g >> 20) - 960u);
      const I8 idx = g < kMinNormal ? low : high;
      code[k] = idx | (sign < 0.0f ? I8{} + 128 : I8{});
    }
  }
  std::memcpy(x, v, sizeof v);
  if constexpr (kCodes) {
    int32_t c[kBlock];
    std::memcpy(c, code, sizeof c);
    if constexpr (kMbits == 1) {
      for (int j = 0; j < kBlock / 2; ++j) codes[j] = static_cast<uint8_t>(c[2 * j] | (c[2 * j + 1] << 4));
    } else {
      for (int j = 0; j < kBlock; ++j) codes[j] = static_cast<uint8_t>(c[j]);
    }
  }
}

// The E4M3FN magnitude of index i (0..127) by its formula: m·2^-9 if e == 0 else the f32 with
// biased exponent e + 120 and mantissa m << 20, i.e. (1 + m/8)·2^(e−7) (kE4M3.v[i] for i < 127).
inline float e4m3_magnitude(uint32_t i) {
  const uint32_t e = i >> 3, m = i & 7u;
  uint32_t b = ((e + 120u) << 23) | (m << 20);
  float normal;
  std::memcpy(&normal, &b, sizeof normal);
  return e == 0 ? static_cast<float>(m) * 0x1p-9f : normal;
}

}  // namespace

float e4m3_value(int i) {
  DS4_CHECK(i >= 0 && i < kE4M3Count);
  return kE4M3.v[i];
}

float e4m3_nearest(float v) {
  const float sign = v < 0.0f ? -1.0f : 1.0f;
  const float a = std::fmin(std::fabs(v), kE4M3Max);
  return sign * grid_nearest<3, -6>(a);
}

void fp8_e4m3_roundtrip(float* x, int n_leading) {
  DS4_CHECK(n_leading >= 0 && n_leading % kFp8BlockSize == 0);
  for (int off = 0; off < n_leading; off += kFp8BlockSize) {
    round_block<3, -6, kFp8BlockSize>(x + off, kE4M3Max, kFp8MinAmax);
  }
}

void fp8_kv_row_store(float* x, int head_dim, int n_rot, uint8_t* store) {
  const int lead = head_dim - n_rot;
  DS4_CHECK(n_rot >= 0 && lead >= 0 && lead % kFp8BlockSize == 0);
  uint8_t* exps = store + lead;
  for (int off = 0; off < lead; off += kFp8BlockSize) {
    round_block<3, -6, kFp8BlockSize, true>(x + off, kE4M3Max, kFp8MinAmax, store + off, exps + off / kFp8BlockSize);
  }
  const int rope = fp8_rope_offset(lead);
  if (rope > lead + lead / kFp8BlockSize) store[rope - 1] = 0;
  for (int i = 0; i < n_rot; ++i) {
    const uint16_t h = f32_to_f16(x[lead + i]);
    std::memcpy(store + rope + 2 * i, &h, sizeof h);
  }
}

float fp8_stored_value(int code, int exp_byte) {
  DS4_CHECK(code >= 0 && code < 256 && exp_byte >= 0 && exp_byte < 256);
  const float sign = (code & 128) != 0 ? -1.0f : 1.0f;
  return f16_round(sign * e4m3_magnitude(static_cast<uint32_t>(code) & 127u) * ldexpf(1.0f, exp_byte - 127));
}

// Per 64-block: the scale once, then each code's value (sign·g)·scale and its f16 rounding
// (quant/half.cpp's f16_round_row lanes), 8 elements at a time with GCC (target clones
// x86-64-v4 / avx2 / default on x86); every lane runs fp8_stored_value's operations (the same
// magnitude, product order and rounding), so the values are its bits for every (code, byte)
// (Fp8Store.DecodeEqualsStoredValueForEveryCodeAndByte). Then the RoPE dims widened.
#if defined(__GNUC__) && !defined(__clang__)
#if defined(__x86_64__)
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#endif
void fp8_row_decode(const uint8_t* store, int head_dim, int n_rot, float* out) {
  typedef float F8 __attribute__((vector_size(32)));
  typedef uint32_t U8 __attribute__((vector_size(32)));
  typedef int32_t I8 __attribute__((vector_size(32)));
  typedef uint8_t B8 __attribute__((vector_size(8)));
  const int lead = head_dim - n_rot;
  const uint8_t* exps = store + lead;
  for (int b = 0; b < lead / kFp8BlockSize; ++b) {
    const float scale = ldexpf(1.0f, static_cast<int>(exps[b]) - 127);
    for (int q = 0; q < kFp8BlockSize / 8; ++q) {
      const int at = b * kFp8BlockSize + 8 * q;
      B8 cb;
      std::memcpy(&cb, store + at, sizeof cb);
      const U8 c = __builtin_convertvector(cb, U8);
      const U8 e = (c >> 3) & 15u, m = c & 7u;
      const U8 normal = ((e + 120u) << 23) | (m << 20);
      const F8 sub = __builtin_convertvector(m, F8) * 0x1p-9f;
      const F8 g = e == 0u ? sub : (F8)normal;
      const F8 sign = (c & 128u) != 0u ? F8{} - 1.0f : F8{} + 1.0f;
      const U8 x = (U8)(sign * g * scale);
      // f16_round: nearest even on the f16 grid, |x| >= 65520 to inf, NaN to the quiet NaN.
      const U8 sgn = x & 0x80000000u;
      const U8 a = x & 0x7fffffffu;
      const U8 rn = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
      const F8 rs = ((F8)a + 0.5f) - 0.5f;
      U8 r = (I8)(a < 0x38800000u) ? (U8)rs : rn;
      r = (I8)(a >= 0x477ff000u) ? U8{} + 0x7f800000u : r;
      r = (I8)(a > 0x7f800000u) ? U8{} + 0x7fc00000u : r;
      r |= sgn;
      std::memcpy(out + at, &r, sizeof r);
    }
  }
  f16_to_f32_row(reinterpret_cast<const uint16_t*>(store + fp8_rope_offset(lead)), out + lead, n_rot);
}
#else
void fp8_row_decode(const uint8_t* store, int head_dim, int n_rot, float* out) {
  const int lead = head_dim - n_rot;
  const uint8_t* exps = store + lead;
  for (int i = 0; i < lead; ++i) out[i] = fp8_stored_value(store[i], exps[i / kFp8BlockSize]);
  f16_to_f32_row(reinterpret_cast<const uint16_t*>(store + fp8_rope_offset(lead)), out + lead, n_rot);
}
#endif

float e2m1_value(int i) {
  DS4_CHECK(i >= 0 && i < 8);
  return kE2M1[i];
}

float e2m1_nearest(float v) {
  const float sign = v < 0.0f ? -1.0f : 1.0f;
  const float a = std::fmin(std::fabs(v), kE2M1Max);
  return sign * grid_nearest<1, 0>(a);
}

void fp4_e2m1_roundtrip_row(float* x, int n) {
  DS4_CHECK(n >= 0 && n % kFp4BlockSize == 0);
  for (int off = 0; off < n; off += kFp4BlockSize) {
    round_block<1, 0, kFp4BlockSize>(x + off, kE2M1Max, kFp4MinAmax);
  }
}

void fp4_e2m1_roundtrip_row_store(float* x, int n, uint8_t* store) {
  DS4_CHECK(n >= 0 && n % kFp4BlockSize == 0);
  uint8_t* exps = store + n / 2;
  for (int off = 0; off < n; off += kFp4BlockSize) {
    round_block<1, 0, kFp4BlockSize, true>(x + off, kE2M1Max, kFp4MinAmax, store + off / 2, exps + off / kFp4BlockSize);
  }
}

float fp4_stored_value(int code, int exp_byte) {
  DS4_CHECK(code >= 0 && code < 16 && exp_byte >= 0 && exp_byte < 256);
  const float sign = (code & 8) != 0 ? -1.0f : 1.0f;
  return f16_round(sign * kE2M1[code & 7] * ldexpf(1.0f, exp_byte - 127));
}

const float* fp4_value_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(256 * 16);
    for (int e = 0; e < 256; ++e) {
      for (int c = 0; c < 16; ++c) t[static_cast<size_t>(e * 16 + c)] = fp4_stored_value(c, e);
    }
    return t;
  }();
  return table.data();
}

// A table lookup per element (bit-exact on any ISA). With GCC on x86, 8 elements at a time:
// the block's 16 table values as two 8-lane vectors and a two-input shuffle by the codes
// (vpermps / vpermt2ps in the AVX2 / AVX-512 clones).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
void fp4_row_decode(const uint8_t* store, int n, float* out, const float* table) {
  typedef float F8 __attribute__((vector_size(32)));
  typedef int32_t I8 __attribute__((vector_size(32)));
  const I8 shift = {0, 4, 8, 12, 16, 20, 24, 28};
  const uint8_t* exps = store + n / 2;
  for (int b = 0; b < n / kFp4BlockSize; ++b) {
    F8 lo, hi;
    std::memcpy(&lo, table + static_cast<int>(exps[b]) * 16, sizeof lo);
    std::memcpy(&hi, table + static_cast<int>(exps[b]) * 16 + 8, sizeof hi);
    const uint8_t* c = store + b * (kFp4BlockSize / 2);
    float* o = out + b * kFp4BlockSize;
    for (int q = 0; q < kFp4BlockSize / 8; ++q) {
      uint32_t w;  // codes of elements 8q .. 8q+7, element 8q in the low nibble
      std::memcpy(&w, c + 4 * q, sizeof w);
      const I8 idx = ((I8{} + static_cast<int32_t>(w)) >> shift) & 15;
      const F8 v = __builtin_shuffle(lo, hi, idx);
      std::memcpy(o + 8 * q, &v, sizeof v);
    }
  }
}
#else
void fp4_row_decode(const uint8_t* store, int n, float* out, const float* table) {
  const uint8_t* exps = store + n / 2;
  for (int b = 0; b < n / kFp4BlockSize; ++b) {
    const float* t = table + static_cast<int>(exps[b]) * 16;
    const uint8_t* c = store + b * (kFp4BlockSize / 2);
    float* o = out + b * kFp4BlockSize;
    for (int j = 0; j < kFp4BlockSize / 2; ++j) {
      o[2 * j] = t[c[j] & 15];
      o[2 * j + 1] = t[c[j] >> 4];
    }
  }
}
#endif

void hadamard128_inplace(float* x) {
  for (int stride = 1; stride < kHadamardDim; stride <<= 1) {
    for (int base = 0; base < kHadamardDim; base += 2 * stride) {
      for (int i = 0; i < stride; ++i) {
        const float a = x[base + i];
        const float b = x[base + stride + i];
        x[base + i] = a + b;
        x[base + stride + i] = a - b;
      }
    }
  }
  for (int i = 0; i < kHadamardDim; ++i) x[i] = x[i] * kHadamardScale;
}

void indexer_qat_row(float* x128) {
  hadamard128_inplace(x128);
  fp4_e2m1_roundtrip_row(x128, kHadamardDim);
}

void indexer_qat_row_store(float* x, int n, uint8_t* store) {
  DS4_CHECK(n >= 0 && n % kHadamardDim == 0);
  for (int off = 0; off < n; off += kHadamardDim) hadamard128_inplace(x + off);
  fp4_e2m1_roundtrip_row_store(x, n, store);
}

}  // namespace ds4::quant
