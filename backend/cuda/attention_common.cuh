// backend/cuda/attention_common.cuh — device helpers shared by attention.cu and indexer.cu.
//
// Role: the canonical 64-lane dot on a half-warp, an ordered block prefix sum, the
// launch-status check, the per-launch query count of the multi-query ops, and the key loads
// from f32 rows (the drafter's keys) or the target's stores (f16 raw rows, FP8 compressed rows).
// Invariants: half_dot64 is quant::dot_f32's operation sequence exactly (half-warp lane hl
// runs the partials p[hl], p[hl+16], p[hl+32], p[hl+48]: partial l sums elements i ≡ l mod 64
// in increasing i, the n % 64 tail included; then the halving tree 32, 16 in-thread and
// 8, 4, 2, 1 by shuffles within the 16 lanes);
// block_scan_counts is exact integer arithmetic in thread order; load_key widens an f16 key
// exactly (quant::f16_to_f32's value, NaN payloads included) and decodes an FP8 store's
// element to its f16 row's value (kvsim::fp8_stored_value), so stored keys give the bits of
// the same keys stored as f32.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kv_sim_hd.h"
#include "core/status.h"

namespace ds4::cuda::attn {

using detail::kFullMask;

inline constexpr int kMaxBatch = 8;  // queries per launch of the multi-query ops

// Status of the launch just made: an error naming op and shapes when it failed.
inline Status launch_result(const char* op, const char* shapes) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status();
  return resource_error("cuda: %s (%s) failed to launch: %s", op, shapes, cudaGetErrorString(e));
}

// The halving tree of the 64 partials held 4 per half-warp lane (p[c] = partial hl + 16·c):
// h = 32 and 16 in-thread, then 8, 4, 2, 1 by shuffles within the 16 lanes. Valid on hl == 0.
__device__ __forceinline__ float tree64_half(float (&p)[4]) {
  p[0] = __fadd_rn(p[0], p[2]);  // h = 32: p[hl] + p[hl+32], p[hl+16] + p[hl+48]
  p[1] = __fadd_rn(p[1], p[3]);
  float d = __fadd_rn(p[0], p[1]);  // h = 16
#pragma unroll
  for (int s = 8; s >= 1; s >>= 1) d = __fadd_rn(d, __shfl_down_sync(kFullMask, d, s, 16));
  return d;
}

// Element e of a key row, as f32: f32 keys as they are; f16 keys by the hardware conversion
// when finite (exact), by kvsim's (the CPU's NaN payload rule) for ±inf / NaN.
__device__ __forceinline__ float load_key(const float* k, int64_t e) { return __ldg(k + e); }
__device__ __forceinline__ float f16_key_value(uint32_t h) {
  return (h & 0x7c00u) != 0x7c00u ? __half2float(__ushort_as_half(static_cast<uint16_t>(h))) : kvsim::f16_to_f32(static_cast<uint16_t>(h));
}
__device__ __forceinline__ float load_key(const uint16_t* k, int64_t e) {
  return f16_key_value(__ldg(reinterpret_cast<const unsigned short*>(k) + e));
}

// A key row of the target's stores: a raw ring row of f16 bits (lead 0) or a compressed row's
// FP8 store (lead = head_dim − n_rot: codes and exponent bytes of elements [0, lead), the RoPE
// dims as f16 from kvsim::fp8_rope_offset(lead) on). Plain data (a __shared__ array holds it).
struct StoredKey {
  const uint8_t* row;
  int lead;
};
__device__ __forceinline__ float load_key(const StoredKey& k, int64_t e) {
  if (e < k.lead)
    return kvsim::fp8_stored_value(__ldg(k.row + e), __ldg(k.row + k.lead + e / kvsim::kFp8Block));
  return load_key(reinterpret_cast<const uint16_t*>(k.row + kvsim::fp8_rope_offset(k.lead)), e - k.lead);
}

// Eight elements per load: whether load_key8 may read this row (8-byte aligned row, lead and
// the RoPE offset multiples of 8, so an 8-element run is all codes of one exponent block or
// all f16), and elements [e, e + 8) (e % 8 == 0, e + 8 <= head_dim) with 8-byte loads: the
// values of load_key, one memory round trip instead of eight (the sink kernels waited on their
// 1- and 2-byte key loads more than on anything else).
__device__ __forceinline__ bool key_vec8(const StoredKey& k) {
  return (reinterpret_cast<uintptr_t>(k.row) & 7u) == 0 && (k.lead & 7) == 0 &&
         (kvsim::fp8_rope_offset(k.lead) & 7) == 0;
}
__device__ __forceinline__ void load_key8(const StoredKey& k, int e, float (&v)[8]) {
  if (e < k.lead) {
    const uint2 c = __ldg(reinterpret_cast<const uint2*>(k.row + e));
    const uint32_t x = __ldg(k.row + k.lead + e / kvsim::kFp8Block);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[j] = kvsim::fp8_stored_value((c.x >> (8 * j)) & 0xffu, x);
      v[4 + j] = kvsim::fp8_stored_value((c.y >> (8 * j)) & 0xffu, x);
    }
  } else {
    const uint2* h = reinterpret_cast<const uint2*>(k.row + kvsim::fp8_rope_offset(k.lead) + 2 * (e - k.lead));
    const uint2 a = __ldg(h), b = __ldg(h + 1);
    const uint32_t w[4] = {a.x, a.y, b.x, b.y};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[2 * j] = f16_key_value(w[j] & 0xffffu);
      v[2 * j + 1] = f16_key_value(w[j] >> 16);
    }
  }
}
// Elements [e, e + 8) of any stored row: load_key8 where key_vec8 allows it, else one by one.
__device__ __forceinline__ void load_key8_any(const StoredKey& k, int e, float (&v)[8]) {
  if (key_vec8(k)) {
    load_key8(k, e, v);
    return;
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = load_key(k, e + j);
}

// quant::dot_f32(a, b, n) on a half-warp (hl = lane & 15; both halves of the warp call it
// together), element e of a read as load(e) (a row of f32, f16 bits or an FP4 store: every
// form reads the same floats). The result is valid on hl == 0.
template <class Load>
__device__ __forceinline__ float half_dot64(const Load& load, const float* b, int n, int hl) {
  float p[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // p[c] = partial hl + 16·c
  for (int i = 0; i < n; i += 64) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int e = i + 16 * c + hl;
      if (e < n) p[c] = __fadd_rn(p[c], __fmul_rn(load(e), b[e]));
    }
  }
  return tree64_half(p);
}

// Exclusive prefix sum of v >= 0 over the block in thread order; *total gets the sum.
// warp_sums: shared scratch of 32 ints. Every thread of the block must call it.
__device__ __forceinline__ int block_scan_counts(int v, int* warp_sums, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = (blockDim.x + 31) >> 5;
  int incl = v;
  for (int s = 1; s < 32; s <<= 1) {
    const int o = __shfl_up_sync(kFullMask, incl, s);
    if (lane >= s) incl += o;
  }
  __syncthreads();  // earlier readers of warp_sums are done
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  int before = 0, all = 0;
  for (int w = 0; w < nwarps; ++w) {
    const int c = warp_sums[w];
    if (w < warp) before += c;
    all += c;
  }
  *total = all;
  return before + incl - v;
}

}  // namespace ds4::cuda::attn
