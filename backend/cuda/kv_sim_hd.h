// backend/cuda/kv_sim_hd.h — the per-element steps of quant/kv_sim and quant/half's f16_round,
// as host+device (DS4_HD) functions for the CUDA attention kernels.
//
// Role: the FP8-E4M3 / FP4-E2M1 block round trips (block scale from the block's amax, then
// each element's clamp, nearest grid value and rescale), the Hadamard-128 butterfly scale and
// f16_round / f32_to_f16, the indexer rows' FP4 store (fp4_code, fp4_stored_value) and the
// compressed rows' FP8 store (fp8_code, fp8_stored_value, fp8_rope_offset: quant/kv_sim.h's
// layouts and values), written once so that attention.cu's warp-parallel kernels and the host test
// (tests/cuda/kv_sim_hd_test.cpp, which compares the sequential row forms below with quant::
// bit for bit) share them. The block scale is ldexpf(1, detmath::ceil_log2_f32(amax / max)),
// the definition the CPU oracle uses.
// Invariants:
//  * Every function performs exactly the float operations of its quant:: counterpart in the
//    same order (no FMA: the .cu files build with --fmad=false, host code with
//    -ffp-contract=off); bit patterns are handled with integer arithmetic only.
//  * amax is order-free (a max over |x| that ignores NaN), so any reduction tree may compute
//    it; everything else is elementwise.
//  * Includes no CUDA header (host translation units include it too).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/detmath.h"

namespace ds4::cuda::kvsim {

inline constexpr int kFp8Block = 64;
inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kFp8MinAmax = 1.0e-4f;
inline constexpr int kFp4Block = 32;
inline constexpr float kE2M1Max = 6.0f;
inline constexpr float kFp4MinAmax = 7.052966104933725e-38f;
inline constexpr int kHadamardDim = 128;
inline constexpr float kHadamardScale = 0.08838834764831845f;

DS4_HD uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

DS4_HD float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// ldexpf(1.0f, k) for any int k: exact powers of two (normals and subnormals), +inf above
// 127, +0 below -149.
DS4_HD float pow2f(int k) {
  if (k > 127) return f32_from_bits(0x7f800000u);
  if (k >= -126) return f32_from_bits(static_cast<uint32_t>(k + 127) << 23);
  if (k >= -149) return f32_from_bits(1u << (k + 149));
  return 0.0f;
}

// quant::f16_to_f32, exact for every input (NaN keeps its payload in the top mantissa bits).
DS4_HD float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return f32_from_bits(sign);
    const float v = static_cast<float>(mant) * 0x1p-24f;  // subnormal: mant·2^-24, exact
    return f32_from_bits(f32_bits(v) | sign);
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

// |x| by clearing the sign bit (what kv_sim's vector code does; fabsf is the same).
DS4_HD float abs_bits(float x) { return f32_from_bits(f32_bits(x) & 0x7fffffffu); }

// One step of the block amax: NaN never replaces the running maximum (kv_sim's
// `av > m ? av : m` from m = 0).
DS4_HD float amax_step(float m, float v) {
  const float av = abs_bits(v);
  return av > m ? av : m;
}

// The amax of the n values at x, in index order from 0 (the sequential row forms' blocks).
DS4_HD float block_amax(const float* x, int n) {
  float m = 0.0f;
  for (int i = 0; i < n; ++i) m = amax_step(m, x[i]);
  return m;
}

// The exponent k of the block scale 2^k from the block's amax: ceil_log2(max(amax, min_amax)
// / max) (-126 .. 128 for E2M1; 128 when amax is inf).
DS4_HD int block_exp(float amax, float max, float min_amax) {
  if (amax < min_amax) amax = min_amax;
  return detmath::ceil_log2_f32(amax / max);
}

// The block scale from the block's amax: ldexpf(1, ceil_log2(max(amax, min_amax) / max)).
DS4_HD float block_scale(float amax, float max, float min_amax) { return pow2f(block_exp(amax, max, min_amax)); }

// One element of a block round trip onto a grid of kMbits mantissa bits whose smallest
// normal value is 2^kMinNormalExp (E4M3: <3, -6>, E2M1: <1, 0>): kv_sim's round_block lane.
// Its parts: the grid magnitude g, and *sign = ±1; the value is sign * g * scale.
template <int kMbits, int kMinNormalExp>
DS4_HD float round_elem_parts(float v, float scale, float max, float* sign_out) {
  constexpr uint32_t kDrop = 23 - kMbits;
  constexpr uint32_t kHalf = (1u << (kDrop - 1)) - 1u;
  const float kMinNormal = pow2f(kMinNormalExp);
  const float kBig = pow2f(kMinNormalExp - kMbits + 23);
  float t = v / scale;
  t = t > max ? max : t;
  t = t < -max ? -max : t;
  const float sign = t < 0.0f ? -1.0f : 1.0f;
  const float ax = abs_bits(t);
  const float a = ax < max ? ax : max;
  uint32_t bits = f32_bits(a);
  bits = (bits + kHalf + ((bits >> kDrop) & 1u)) & ~((1u << kDrop) - 1u);
  const float normal = f32_from_bits(bits);
  const float sub = (a + kBig) - kBig;
  *sign_out = sign;
  return a >= kMinNormal ? normal : sub;
}

template <int kMbits, int kMinNormalExp>
DS4_HD float round_elem(float v, float scale, float max) {
  float sign;
  const float g = round_elem_parts<kMbits, kMinNormalExp>(v, scale, max, &sign);
  return sign * g * scale;
}

DS4_HD float fp8_elem(float v, float scale) { return round_elem<3, -6>(v, scale, kE4M3Max); }
DS4_HD float fp4_elem(float v, float scale) { return round_elem<1, 0>(v, scale, kE2M1Max); }

// ---- FP4 store of the indexer rows (quant/kv_sim.h: fp4_row_bytes, fp4_stored_value) ----
// Per row of n values: n/2 code bytes (element 2j low nibble, 2j+1 high), then n/32 exponent
// bytes (k + 127 of the block's scale 2^k). code = (sign < 0) << 3 | E2M1 index of g.
DS4_HD constexpr int fp4_row_bytes(int n) { return n / 2 + n / kFp4Block; }

// E2M1 index of a grid magnitude g in {0, .5, 1, 1.5, 2, 3, 4, 6}, and back.
DS4_HD uint32_t e2m1_index(float g) {
  return g < 1.0f ? static_cast<uint32_t>(g * 2.0f) : (f32_bits(g) >> 22) - 0xfcu;
}
DS4_HD float e2m1_magnitude(uint32_t index) {
  return index < 2u ? static_cast<float>(index) * 0.5f : f32_from_bits((index + 0xfcu) << 22);
}

// The code of fp4_elem(v, scale): the sign and magnitude that value is built from.
DS4_HD uint32_t fp4_code(float v, float scale) {
  float sign;
  const float g = round_elem_parts<1, 0>(v, scale, kE2M1Max, &sign);
  return (sign < 0.0f ? 8u : 0u) | e2m1_index(g);
}

// quant::f16_round(x) = f16_to_f32(f32_to_f16(x)): nearest even onto the f16 grid, |x| >=
// 65520 to ±inf, NaN to the quiet NaN 0x7fc00000 with x's sign.
DS4_HD float f16_round(float x) {
  const uint32_t u = f32_bits(x);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return f32_from_bits(sign | 0x7fc00000u);
  if (a >= 0x477ff000u) return f32_from_bits(sign | 0x7f800000u);
  if (a < 0x38800000u) {
    // f16 subnormal range: a multiple of 2^-24, nearest even (exact subtraction).
    const float r = (f32_from_bits(a) + 0.5f) - 0.5f;
    return f32_from_bits(f32_bits(r) | sign);
  }
  const uint32_t r = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u;
  return f32_from_bits(r | sign);
}

// quant::f32_to_f16(x): the bits of f16_round(x) (a value on the f16 grid, ±inf or the quiet
// NaN), repacked; so f16_to_f32(f32_to_f16(x)) == f16_round(x) bit for bit.
DS4_HD uint16_t f32_to_f16(float x) {
  const uint32_t u = f32_bits(f16_round(x));
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);   // NaN
  if (a == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // inf
  if (a < 0x38800000u) {
    // Zero or an f16 subnormal: a multiple of 2^-24 below 2^-14, so a·2^24 is an exact integer.
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(f32_from_bits(a) * 16777216.0f));
  }
  return static_cast<uint16_t>(sign | (((a >> 23) - 112u) << 10) | ((a >> 13) & 0x3ffu));
}

// The value of a stored element: f16_round((sign * g) * 2^(exp_byte - 127)), fp4_elem's
// expression on the stored parts, then the f16 rounding of the former f16 store.
DS4_HD float fp4_stored_value(uint32_t code, uint32_t exp_byte) {
  const float sign = (code & 8u) != 0 ? -1.0f : 1.0f;
  return f16_round(sign * e2m1_magnitude(code & 7u) * pow2f(static_cast<int>(exp_byte) - 127));
}

// ---- FP8 store of the compressed KV rows (quant/kv_sim.h: fp8_row_bytes, fp8_stored_value) ----
// Per row of head_dim values, lead = head_dim − n_rot: lead code bytes ((sign < 0) << 7 | E4M3
// index), lead/64 exponent bytes (k + 127), a zero byte when that ends odd, then the n_rot
// RoPE dims as f16 bits from fp8_rope_offset(lead) on.

DS4_HD constexpr int fp8_rope_offset(int lead) { return (lead + lead / kFp8Block + 1) & ~1; }
DS4_HD constexpr int fp8_row_bytes(int head_dim, int n_rot) { return fp8_rope_offset(head_dim - n_rot) + 2 * n_rot; }

// E4M3FN index e·8 + m of a grid magnitude g (0 <= g <= 448), and back (index 127, never
// written, by the same formula: 480).
DS4_HD uint32_t e4m3_index(float g) {
  return g < 0x1p-6f ? static_cast<uint32_t>(g * 512.0f) : (f32_bits(g) >> 20) - 960u;
}
DS4_HD float e4m3_magnitude(uint32_t index) {
  const uint32_t e = index >> 3, m = index & 7u;
  return e == 0 ? static_cast<float>(m) * 0x1p-9f : f32_from_bits(((e + 120u) << 23) | (m << 20));
}

// The code of fp8_elem(v, scale): the sign and magnitude that value is built from.
DS4_HD uint32_t fp8_code(float v, float scale) {
  float sign;
  const float g = round_elem_parts<3, -6>(v, scale, kE4M3Max, &sign);
  return (sign < 0.0f ? 128u : 0u) | e4m3_index(g);
}

// The value of a stored element: f16_round((sign * g) * 2^(exp_byte - 127)), fp8_elem's
// expression on the stored parts, then the f16 rounding of the former f16 store.
DS4_HD float fp8_stored_value(uint32_t code, uint32_t exp_byte) {
  const float sign = (code & 128u) != 0 ? -1.0f : 1.0f;
  return f16_round(sign * e4m3_magnitude(code & 127u) * pow2f(static_cast<int>(exp_byte) - 127));
}

// Sequential row forms (the host test's subjects; the kernels run the same steps in parallel).
DS4_HD void fp8_roundtrip_row(float* x, int n_leading) {
  for (int off = 0; off < n_leading; off += kFp8Block) {
    const float m = block_amax(x + off, kFp8Block);
    const float s = block_scale(m, kE4M3Max, kFp8MinAmax);
    for (int i = 0; i < kFp8Block; ++i) x[off + i] = fp8_elem(x[off + i], s);
  }
}

// fp8_roundtrip_row(x, head_dim − n_rot) that also writes the row's FP8 store (the RoPE dims
// of x, untouched, as f16 bits).
DS4_HD void fp8_kv_row_store(float* x, int head_dim, int n_rot, uint8_t* store) {
  const int lead = head_dim - n_rot;
  for (int off = 0; off < lead; off += kFp8Block) {
    const float m = block_amax(x + off, kFp8Block);
    const int k = block_exp(m, kE4M3Max, kFp8MinAmax);
    const float s = pow2f(k);
    store[lead + off / kFp8Block] = static_cast<uint8_t>(k + 127);
    for (int i = 0; i < kFp8Block; ++i) store[off + i] = static_cast<uint8_t>(fp8_code(x[off + i], s));
    for (int i = 0; i < kFp8Block; ++i) x[off + i] = fp8_elem(x[off + i], s);
  }
  const int rope = fp8_rope_offset(lead);
  if (rope > lead + lead / kFp8Block) store[rope - 1] = 0;
  for (int i = 0; i < n_rot; ++i) {
    const uint16_t h = f32_to_f16(x[lead + i]);
    store[rope + 2 * i] = static_cast<uint8_t>(h & 0xffu);  // little-endian, as the host's f16 arrays
    store[rope + 2 * i + 1] = static_cast<uint8_t>(h >> 8);
  }
}

// The unnormalized Walsh-Hadamard butterfly of 128 values in place, then the 1/sqrt(128)
// scale (quant::hadamard128_inplace's sequence).
DS4_HD void hadamard128(float* x) {
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

// indexer_qat_row of the 128 values at x that also writes their FP4 store (68 bytes; the
// codes at store[0, 64), the four exponent bytes at store[exps_off + 0..3]).
DS4_HD void indexer_qat_row_store(float* x, uint8_t* store, int exps_off) {
  hadamard128(x);
  for (int off = 0; off < kHadamardDim; off += kFp4Block) {
    const float m = block_amax(x + off, kFp4Block);
    const int k = block_exp(m, kE2M1Max, kFp4MinAmax);
    const float s = pow2f(k);
    store[exps_off + off / kFp4Block] = static_cast<uint8_t>(k + 127);
    for (int i = 0; i < kFp4Block; i += 2) {
      store[(off + i) / 2] = static_cast<uint8_t>(fp4_code(x[off + i], s) | (fp4_code(x[off + i + 1], s) << 4));
    }
    for (int i = 0; i < kFp4Block; ++i) x[off + i] = fp4_elem(x[off + i], s);
  }
}

DS4_HD void indexer_qat_row(float* x) {
  hadamard128(x);
  for (int off = 0; off < kHadamardDim; off += kFp4Block) {
    const float m = block_amax(x + off, kFp4Block);
    const float s = block_scale(m, kE2M1Max, kFp4MinAmax);
    for (int i = 0; i < kFp4Block; ++i) x[off + i] = fp4_elem(x[off + i], s);
  }
}

}  // namespace ds4::cuda::kvsim
