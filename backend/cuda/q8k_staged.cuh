// backend/cuda/q8k_staged.cuh — a Q8_K activation block as the expert kernels stage it in
// shared memory (matvec_quant.cu's fused expert kernels, moe_rows.cu's grouped ones).
//
// Layout (kActBlockBytes = 304, a multiple of 16): the quants of 32-element group G at bytes
// 16G (elements 0..15) and 128 + 16G (elements 16..31), so the 8 lanes of a block read 8
// consecutive 16-byte pieces (no bank conflict); the 16 bsums (int16) at 256, d (f32) at 288.
// Invariants: the readers below are the only interpretation of those bytes; every writer
// (stage_act, moe_rows.cu's word copy act_word_to) produces exactly this layout.
#pragma once

#include <cstdint>

namespace ds4::cuda::detail {

inline constexpr int kActBlockBytes = 304;

// The 32 int8 quants of group grp, as 8 words of 4.
__device__ __forceinline__ void act_q32(const uint8_t* ab, int grp, int (&q)[8]) {
  const int4 lo = *reinterpret_cast<const int4*>(ab + 16 * grp);
  const int4 hi = *reinterpret_cast<const int4*>(ab + 128 + 16 * grp);
  q[0] = lo.x, q[1] = lo.y, q[2] = lo.z, q[3] = lo.w;
  q[4] = hi.x, q[5] = hi.y, q[6] = hi.z, q[7] = hi.w;
}
// bsum i (the sum of the block's 16 quants 16i .. 16i + 15).
__device__ __forceinline__ int32_t act_bsum(const uint8_t* ab, int i) {
  return reinterpret_cast<const int16_t*>(ab + 256)[i];
}
// The block's scale d.
__device__ __forceinline__ float act_d(const uint8_t* ab) { return *reinterpret_cast<const float*>(ab + 288); }

}  // namespace ds4::cuda::detail
