// backend/cuda/common.cuh — device helpers shared by the kernels of backend/cuda.
//
// Role: exact f16 -> f32, realigning word loads of 2-byte-aligned block fields, the
// x86-compatible round-to-int of the activation quantizers, the warp's Q8_0 activation block
// (the one definition of its scale and codes: quantize_q8_0_act and the staged r = 1 matvec,
// which quantizes its row itself, both call it), and the launch-error check.
// Invariants: every helper is exact (no rounding beyond what its name says); nothing here
// depends on FMA contraction (the whole folder builds with --fmad=false).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace ds4::cuda::detail {

inline constexpr unsigned kFullMask = 0xffffffffu;

// Exact for every finite value, ±0, ±inf and subnormals (NaN stays NaN; its payload may
// differ from quant::f16_to_f32, which only matters for NaN weights, whose dots are NaN
// either way).
__device__ __forceinline__ float f16_to_f32(uint16_t h) { return __half2float(__ushort_as_half(h)); }

__device__ __forceinline__ uint16_t load_u16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}

// N little-endian 32-bit words starting at the 2-byte-aligned address p (block fields that
// follow an f16 scale sit at 2 mod 4): aligned loads, then a funnel shift when p is not
// 4-byte aligned. Reads exactly the bytes [p - (p mod 4), p + 4N): the last piece is a 16-bit
// load, so a row's final block never reads past its allocation.
template <int N>
__device__ __forceinline__ void load_words_even(const uint8_t* p, uint32_t (&out)[N]) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint32_t* w = reinterpret_cast<const uint32_t*>(a & ~static_cast<uintptr_t>(3));
  const uint32_t sh = static_cast<uint32_t>(a & 2u) * 8u;  // 0 or 16
  uint32_t v[N + 1];
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = __ldg(w + i);
  v[N] = sh != 0 ? static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(w + N))) : 0u;
#pragma unroll
  for (int i = 0; i < N; ++i) out[i] = __funnelshift_r(v[i], v[i + 1], sh);
}

// clamp(lrintf(v), -128, 127) as x86-64 computes it: round half to even; NaN and ±inf give
// the "integer indefinite" value (LONG_MIN / INT_MIN), i.e. -128 after the clamp. Finite
// |v| here is never beyond ~128 (it is x/d with |x| <= 127·d), so saturation cannot differ.
__device__ __forceinline__ int quant_round(float v) {
  if (!(fabsf(v) <= 3.0e38f)) return -128;  // NaN, ±inf
  int q = __float2int_rn(v);
  q = q > 127 ? 127 : q;
  return q < -128 ? -128 : q;
}

// Maximum over the warp (every lane gets it). Order-free: fmaxf of non-NaN values.
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int s = 16; s >= 1; s /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, s));
  return v;
}

// One Q8_0 activation block (quant::quantize_q8_0_act, byte for byte) in pieces that any split
// of the block's 32 elements combines — the one definition of the block's scale and codes:
//   amax = the maximum of q8_0_act_mag(x) over the block (fmaxf, order-free: the magnitudes
//          are non-negative, never -0, and NaN -> 0 never wins, as the CPU's strict '>' from 0
//          skips it);
//   d = q8_0_act_scale(amax, &id) = amax / 127, id = d != 0 ? 1 / d : 0 (IEEE divisions);
//   code(x) = q8_0_act_code(x, id) = quant_round(x · id).
// quantize_q8_0_act runs them a warp per block (q8_0_act_block); the staged r = 1 matvec
// (matvec_quant.cu) a thread per block on its f32 row.
__device__ __forceinline__ float q8_0_act_mag(float v) {
  const float av = fabsf(v);
  return av > 0.0f ? av : 0.0f;  // NaN -> 0: never the maximum
}
__device__ __forceinline__ float q8_0_act_scale(float amax, float* id) {
  const float d = amax / 127.0f;
  *id = d != 0.0f ? 1.0f / d : 0.0f;
  return d;
}
__device__ __forceinline__ int8_t q8_0_act_code(float v, float id) { return static_cast<int8_t>(quant_round(v * id)); }

// The warp form: lane l holds element l (v); returns lane l's code and sets *d to the block's
// scale (every lane). Every lane of the warp must call it (shuffles).
__device__ __forceinline__ int8_t q8_0_act_block(float v, float* d) {
  float id;
  *d = q8_0_act_scale(warp_max(q8_0_act_mag(v)), &id);
  return q8_0_act_code(v, id);
}

// The block's Q8_0 scale and quant words from its 32 values.
__device__ __forceinline__ float q8_0_act_words(const float (&v)[32], uint32_t (&qw)[8]) {
  float m[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // 4 partial maxima (order-free), shorter chains
#pragma unroll
  for (int i = 0; i < 32; ++i) m[i & 3] = fmaxf(m[i & 3], q8_0_act_mag(v[i]));
  float id;
  const float d = q8_0_act_scale(fmaxf(fmaxf(m[0], m[1]), fmaxf(m[2], m[3])), &id);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    uint32_t word = 0;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      word |= static_cast<uint32_t>(static_cast<uint8_t>(q8_0_act_code(v[4 * k + j], id))) << (8 * j);
    qw[k] = word;
  }
  return d;
}

// Block b's 32 values of the f32 row x (16-byte aligned): 8 16-byte loads.
__device__ __forceinline__ void load_block32(const float* x, int64_t b, float (&v)[32]) {
  const float4* xb = reinterpret_cast<const float4*>(x) + 8 * b;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const float4 f = __ldg(xb + i);
    v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
  }
}

// The thread form: block b of the f32 row x (16-byte aligned) by one thread, 8 16-byte loads;
// its 32 codes packed into qw (qs[4k .. 4k+3] in qw[k], little-endian as BlockQ8_0Act's bytes),
// its scale returned. A warp instruction serves 32 blocks, so a kernel that quantizes the row
// in every CTA (the one-row Q8_0 kernels' fused forms) pays ~10 warp instructions per block,
// not the warp form's ~60. Same pieces, same bits.
__device__ __forceinline__ float q8_0_act_block_words(const float* x, int64_t b, uint32_t (&qw)[8]) {
  float v[32];
  load_block32(x, b, v);
  return q8_0_act_words(v, qw);
}

// The same for block b of rms_norm(x) · w (w nullptr: unweighted) given the row's scale:
// element i is (x[i]·scale)·w[i], rms_norm_row's expression; with normed, the block's 32
// normed values are also stored there.
__device__ __forceinline__ float q8_0_act_block_words_normed(const float* x, int64_t b, float scale,
                                                             const float* w, float* normed, uint32_t (&qw)[8]) {
  float v[32];
  load_block32(x, b, v);
#pragma unroll
  for (int i = 0; i < 32; ++i) {
    v[i] = __fmul_rn(v[i], scale);
    if (w != nullptr) v[i] = __fmul_rn(v[i], __ldg(w + 32 * b + i));
  }
  if (normed != nullptr) {
    float4* nb = reinterpret_cast<float4*>(normed) + 8 * b;
#pragma unroll
    for (int i = 0; i < 8; ++i) nb[i] = make_float4(v[4 * i], v[4 * i + 1], v[4 * i + 2], v[4 * i + 3]);
  }
  return q8_0_act_words(v, qw);
}

// The float closing of a Q2_K / Q4_K super-block (quant/dot.h): (yd·wd)·isum − (yd·wm)·summs,
// each product and the difference rounded on its own (the folder builds with --fmad=false).
__device__ __forceinline__ float kquant_close(float yd, float wd, float wm, int32_t isum, int32_t summs) {
  const float d = yd * wd;
  const float dmin = yd * wm;
  const float a = d * static_cast<float>(isum);
  const float c = dmin * static_cast<float>(summs);
  return a - c;
}

// Expands the 4 low bits of s to byte masks (bit b -> byte b = 0xff).
__device__ __forceinline__ uint32_t sign_mask4(uint32_t s) {
  return ((s & 0xfu) * 0x00204081u & 0x01010101u) * 0xffu;
}

// The 8 byte masks of IQ2_XXS sign pattern si (7 bits; quant::kIq2Signs[si] adds the parity bit)
// as one word: byte b = 0xff where bit b of the sign byte is set (low word: sign_mask4 of the
// low nibble, high word: of the high one).
__device__ __forceinline__ uint64_t iq2_sign_masks(uint32_t si) {
  const uint32_t sv = si | ((static_cast<uint32_t>(__popc(si)) & 1u) << 7);  // quant::kIq2Signs[si]
  return sign_mask4(sv) | (static_cast<uint64_t>(sign_mask4(sv >> 4)) << 32);
}

// The exact integer part of 32-element group g of an IQ2_XXS block, ls·Σ signed grid·q8
// (quant/dot.h iq2_xxs_block_isum's term for one group): qh = the group's 4 uint16 words (grid
// indices, then signs and the 4-bit scale), aq = the group's 32 activation quants as 8 words,
// grid = quant::kIq2XxsGrid, masks(si) = iq2_sign_masks(si) (built, or read from a table). The
// signs are applied by xor with byte masks and corrected (a ^ m = a·(−1) − 1 per negated byte,
// so Σ g·(a ^ m) − Σ g·m = Σ g·(±a)).
template <class SignMasks>
__device__ __forceinline__ int32_t iq2_xxs_group_isum_masks(const uint16_t* qh, const int (&aq)[8],
                                                            const uint64_t* grid, SignMasks masks) {
  const uint32_t aux0 = qh[0] | (static_cast<uint32_t>(qh[1]) << 16);
  const uint32_t aux1 = qh[2] | (static_cast<uint32_t>(qh[3]) << 16);
  const int32_t ls = static_cast<int32_t>(2 * (aux1 >> 28) + 1);
  int sumi = 0, corr = 0;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const uint64_t g = grid[(aux0 >> (8 * c)) & 0xffu];
    const uint64_t m = masks((aux1 >> (7 * c)) & 127u);
    const int glo = static_cast<int>(static_cast<uint32_t>(g)), ghi = static_cast<int>(static_cast<uint32_t>(g >> 32));
    const int mlo = static_cast<int>(static_cast<uint32_t>(m)), mhi = static_cast<int>(static_cast<uint32_t>(m >> 32));
    sumi = __dp4a(glo, aq[2 * c] ^ mlo, sumi);
    sumi = __dp4a(ghi, aq[2 * c + 1] ^ mhi, sumi);
    corr = __dp4a(glo, mlo, corr);
    corr = __dp4a(ghi, mhi, corr);
  }
  return (sumi - corr) * ls;
}

// The masks built per use (a popc and two sign_mask4 per 8 quants).
__device__ __forceinline__ int32_t iq2_xxs_group_isum(const uint16_t* qh, const int (&aq)[8], const uint64_t* grid) {
  return iq2_xxs_group_isum_masks(qh, aq, grid, [](uint32_t si) { return iq2_sign_masks(si); });
}

// The masks read from signs[si] = iq2_sign_masks(si) (a table of 128, in shared memory): the
// same integers in fewer instructions; the one-row expert kernels (moe_r1.cu) are bound by
// instruction issue, not memory.
__device__ __forceinline__ int32_t iq2_xxs_group_isum(const uint16_t* qh, const int (&aq)[8], const uint64_t* grid,
                                                      const uint64_t* signs) {
  return iq2_xxs_group_isum_masks(qh, aq, grid, [signs](uint32_t si) { return signs[si]; });
}

}  // namespace ds4::cuda::detail

namespace ds4::cuda {

// An error Status for a failed launch (or an invalid configuration), naming op and shape.
Status launch_status(const char* op, int64_t n_in, int64_t n_out, int r);
// A kernel's one-time set-up (an attribute, an opt-in) failed on device dev: clears the CUDA
// error and warns once that `fallback` runs its calls instead, so a kernel that turns itself
// off for the process shows in every run's log rather than only as lost speed.
void kernel_off(const char* kernel, const char* fallback, int dev);

}  // namespace ds4::cuda
