// quant/dot.h — reference dot products: these DEFINE ds4cpp's numerics.
//
// Role: scalar, obviously-ordered dot products of one weight row with one activation row.
// Every optimized kernel (backend/cpu scalar, AVX2, AVX-512, multi-row batch kernels) must
// reproduce these results BIT FOR BIT. Each function below states its exact float operation
// sequence; "+" and "·" are single IEEE f32 operations, each rounded, never fused (no FMA —
// the whole project is built with -ffp-contract=off), evaluated in the order written.
// Integer parts (Σ q·q) are exact int32, so their evaluation order is free.
//
// Invariants: n_blocks >= 0; all pointers to n_blocks (or n) valid elements; results depend
// only on the two rows (never on threads or on how many rows are computed together).
#pragma once

#include <cstdint>

#include "quant/blocks.h"

namespace ds4::quant {

// ---- Dense: the CANONICAL 16-LANE ORDER -------------------------------------------------
// dot_f32 (f(v) = v), dot_f16 (f(v) = f16_to_f32(v)), dot_bf16 (f(v) = bf16_to_f32(v)):
//
//   float p[16] = {0};                                 // 16 lane partial sums
//   m = n - n % 16;
//   for (i = 0; i < m; i += 16)
//     for (j = 0; j < 16; ++j) { t = f(w[i+j]) * x[i+j];  p[j] = p[j] + t; }   // mul, then add
//   for (s = 8; s >= 1; s /= 2)                        // fixed tree: 8, 4, 2, 1
//     for (j = 0; j < s; ++j) p[j] = p[j] + p[j+s];
//   r = p[0];
//   for (i = m; i < n; ++i) { t = f(w[i]) * x[i];  r = r + t; }                // sequential tail
//   return r;
//
// SIMD twins: AVX-512 = one 16-lane vector (lane j = p[j]), _mm512_mul_ps then _mm512_add_ps;
// AVX2 = two 8-lane vectors A (lanes p[0..7]) and B (p[8..15]), mul then add (NOT fmadd);
// then the tree: step 8 is A = A + B; steps 4, 2, 1 are p[j] = p[j] + p[j+s] for j < s
// within A (e.g. add the high 128-bit half to the low half, then 2 lanes, then 1 lane).
// Lanes start at +0.0f (setzero), so an empty or all-(−0) row returns +0.0f on every path.
// Multi-row kernels must run this exact per-row sequence for each row (batch invariance).
float dot_f32(const float* w, const float* x, int64_t n);
float dot_f16(const uint16_t* w, const float* x, int64_t n);
float dot_bf16(const uint16_t* w, const float* x, int64_t n);

// ---- Q8_0 weights × Q8_0 activations (§3.3) ----------------------------------------------
//   float acc = 0.0f;
//   for (b = 0; b < n_blocks; ++b) {
//     int32_t isum = Σ_{i<32} (int)w[b].qs[i] * (int)x[b].qs[i];      // exact
//     float s = f16_to_f32(w[b].d) * x[b].d;                          // rounded
//     float t = s * (float)isum;                                      // rounded
//     acc = acc + t;                                                  // single accumulator
//   }
//   return acc;
float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0Act* x, int64_t n_blocks);

// ---- K-quant / IQ2 weights × Q8_K activations (§3.5), n_blocks super-blocks of 256 -------
// IQ2_XXS:
//   float sumf = 0.0f;
//   for each block b:
//     float d = f16_to_f32(w[b].d) * y[b].d;
//     int32_t bsum = iq2_xxs_block_isum(w[b], y[b]);   // Σ_g ls_g·Σ_{32} signed_grid·q8, exact
//     sumf = sumf + d * (float)bsum;                   // (float)bsum is int->float RNE
//   return 0.125f * sumf;
// where ls_g = 2·(a1>>28)+1 for group g (so 0.125·ls = (0.5+scale4)·0.25).
float dot_iq2_xxs_q8_k(const BlockIQ2XXS* w, const BlockQ8K* y, int64_t n_blocks);

// Q2_K:
//   float sumf = 0.0f;
//   for each block b:
//     q2_k_block_isums(w[b], y[b], &isum, &summs);  // isum = Σ_sb (scales[sb]&15)·Σ_{16} q2·q8
//                                                   // summs = Σ_sb bsums[sb]·(scales[sb]>>4)
//     float dall = y[b].d * f16_to_f32(w[b].d);
//     float dmin = y[b].d * f16_to_f32(w[b].dmin);
//     float a = dall * (float)isum;
//     float c = dmin * (float)summs;
//     sumf = sumf + (a - c);
//   return sumf;
float dot_q2_k_q8_k(const BlockQ2K* w, const BlockQ8K* y, int64_t n_blocks);

// Q4_K (same shape as Q2_K; equals ds4's GPU form d·isum + (−dmin)·summs bit for bit):
//   float sumf = 0.0f;
//   for each block b:
//     q4_k_block_isums(w[b], y[b], &isum, &summs);  // isum = Σ_j sc_j·Σ_{32} q4·q8
//                                                   // summs = Σ_j m_j·(bsums[2j]+bsums[2j+1])
//     float d = y[b].d * f16_to_f32(w[b].d);
//     float dmin = y[b].d * f16_to_f32(w[b].dmin);
//     float a = d * (float)isum;
//     float c = dmin * (float)summs;
//     sumf = sumf + (a - c);
//   return sumf;
float dot_q4_k_q8_k(const BlockQ4K* w, const BlockQ8K* y, int64_t n_blocks);

// Exact integer parts of one super-block (shared by the reference dots and any SIMD twin's
// tests). All fit in int32 for every possible input.
int32_t iq2_xxs_block_isum(const BlockIQ2XXS& w, const BlockQ8K& y);
void q2_k_block_isums(const BlockQ2K& w, const BlockQ8K& y, int32_t* isum, int32_t* summs);
void q4_k_block_isums(const BlockQ4K& w, const BlockQ8K& y, int32_t* isum, int32_t* summs);
int32_t q8_0_block_isum(const BlockQ8_0& w, const BlockQ8_0Act& x);

}  // namespace ds4::quant
