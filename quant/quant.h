// quant/quant.h — ds4cpp's quantization library: block formats, (de)quantization of rows,
// activation quantizers, and (via quant/dot.h) the reference dot products.
//
// Role: everything that knows the bit layout of F32, F16, BF16, Q8_0, Q8_K, Q2_K, Q4_K and
// IQ2_XXS. Includes the split headers, so `#include "quant/quant.h"` is enough:
//   quant/half.h        f16/bf16 conversions, f16_round
//   quant/blocks.h      block structs (static_assert'ed sizes), Q4_K scale unpack
//   quant/iq2_tables.h  IQ2_XXS grid and sign tables
//   quant/dot.h         reference dots (the numerics every kernel must reproduce)
//   quant/kv_sim.h      FP8-E4M3 KV and Hadamard+FP4 indexer round trips
// Invariants: a "row" of n elements of a block type is n / block_elems consecutive blocks
// (n must be a multiple of the block size — a programmer invariant checked with DS4_CHECK;
// callers validate user-supplied shapes with validate_row first). Dequantization is exact
// per format semantics and matches the GGUF python package bit for bit (tests/quant).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/status.h"
#include "gguf/types.h"
#include "quant/blocks.h"
#include "quant/dot.h"
#include "quant/half.h"
#include "quant/iq2_tables.h"
#include "quant/kv_sim.h"

namespace ds4::quant {

using gguf::GgmlType;

// ---- Type support ------------------------------------------------------------------------
// dequantize_row: F32 F16 BF16 Q8_0 Q8_K Q2_K Q4_K IQ2_XXS.
bool can_dequantize(GgmlType t);
// quantize_row: F32 F16 BF16 Q8_0 Q8_K Q2_K Q4_K IQ2_XXS.
bool can_quantize(GgmlType t);
// OK when t can be dequantized and n >= 0 is a multiple of t's block size; otherwise an
// error naming the type and n (kUnsupported / kInvalidArgument).
Status validate_row(GgmlType t, int64_t n);
// Bytes of a row of n elements (n a multiple of the block size; t known).
size_t row_bytes(GgmlType t, int64_t n);

// ---- Dequantization (exact; matches gguf.quants.dequantize bit for bit) -------------------
void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n);
void dequantize_row_q8_0(const BlockQ8_0* src, float* dst, int64_t n);      // w = f16(d)·q
void dequantize_row_q8_k(const BlockQ8K* src, float* dst, int64_t n);       // w = d·q
void dequantize_row_q2_k(const BlockQ2K* src, float* dst, int64_t n);       // (d·sc)·q − dmin·m
void dequantize_row_q4_k(const BlockQ4K* src, float* dst, int64_t n);       // (d·sc)·q − dmin·m
void dequantize_row_iq2_xxs(const BlockIQ2XXS* src, float* dst, int64_t n); // ((d·(.5+ls))·.25)·g·±1

// ---- Weight quantizers (model generation, training export) --------------------------------
// F32: copy. F16/BF16: round to nearest even. Q8_0: d = amax/127, id = d ? 1/d : 0,
// q = roundf(x·id) (half away from zero, as GGML/gguf-py), stored f16(d). Q8_K: as
// quantize_q8_k_act. Q2_K / Q4_K: per-sub-block scale/min search, then super-block scales.
// IQ2_XXS: per group of 32 a scale search; each 8-chunk takes the best grid point under the
// parity-constrained sign pattern. All accept any finite input (non-finite inputs are a
// programmer error). Deterministic; no allocation beyond the stack.
void quantize_row(GgmlType t, const float* src, void* dst, int64_t n);
void quantize_row_q8_0(const float* src, BlockQ8_0* dst, int64_t n);
void quantize_row_q2_k(const float* src, BlockQ2K* dst, int64_t n);
void quantize_row_q4_k(const float* src, BlockQ4K* dst, int64_t n);
void quantize_row_iq2_xxs(const float* src, BlockIQ2XXS* dst, int64_t n);

// Fills dst with n elements' worth of random but VALID blocks of type t (finite normal f16
// scales, any quant bits) whose dequantized values have RMS roughly `magnitude`.
// Deterministic in (seed); for huge synthetic models where real quantization is too slow.
// Supports every type quantize_row supports.
void fill_random_blocks(GgmlType t, void* dst, int64_t n, float magnitude, uint64_t seed);

// ---- Activation quantizers (exactly per spec) ---------------------------------------------
// §3.3, per block of 32: amax = max|x|; d = amax/127; id = d != 0 ? 1/d : 0;
// q = clamp(lrintf(x·id), -128, 127) (round half to EVEN); out.d = d (f32). n % 32 == 0.
void quantize_q8_0_act(const float* x, BlockQ8_0Act* out, int64_t n);
// §3.4, per block of 256: max = the x with the largest |x| (first wins ties); all-zero block
// -> d = 0, qs = 0, bsums = 0. Else iscale = -127/max; q = clamp(lrintf(iscale·x), -128,
// 127); bsums[j] = Σ q[16j..16j+15]; d = 1/iscale. n % 256 == 0.
void quantize_q8_k_act(const float* x, BlockQ8K* out, int64_t n);

}  // namespace ds4::quant
