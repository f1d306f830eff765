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

// ---- Dense: the CANONICAL 64-LANE ORDER -------------------------------------------------
// dot_f32 (f(v) = v), dot_f16 (f(v) = f16_to_f32(v)), dot_bf16 (f(v) = bf16_to_f32(v)):
//
//   float p[64] = {0};                                 // 64 lane partial sums
//   for (i = 0; i < n; ++i) {                          // element i belongs to lane i % 64,
//     t = f(w[i]) * x[i];  p[i % 64] = p[i % 64] + t;  // in increasing i; mul, then add
//   }                                                  // (the n % 64 tail included)
//   for (h = 32; h >= 1; h /= 2)                       // fixed halving tree: 32,16,8,4,2,1
//     for (j = 0; j < h; ++j) p[j] = p[j] + p[j+h];
//   return p[0];
//
// Why 64 lanes (it replaced a 16-lane order with a sequential n % 16 tail in one deliberate
// change of the CPU's bits): the lanes are independent chains, so a GPU runs one row on 64
// chains (one warp: lane t runs p[t] and p[t+32]; the tree by shuffles) instead of 16, and the
// CPU keeps one accumulator vector per 8 (AVX2) or 16 (AVX-512) lanes, which also hides the
// add latency. Lanes are independent, so a kernel may compute them in several passes (a
// subset of lanes per pass) and in column blocks, as long as each lane sees its elements in
// increasing i. SIMD twins: lane vector v holds p[8v..8v+7] (AVX2) or p[16v..16v+15]
// (AVX-512); the tree's steps h >= 8 (AVX2) / h >= 16 (AVX-512) add whole vectors (vector v
// gets vector v + h/width), the rest are in-register halvings (high half onto low half).
// Lanes start at +0.0f, so an empty or all-(−0) row returns +0.0f on every path.
// Multi-row kernels must run this exact per-row sequence for each row (batch invariance).
inline constexpr int kDotLanes = 64;  // lanes of this order and of sumsq_f64's below
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

// ---- The RMSNorm statistic: Σ x² in double, the same 64-lane order ------------------------
//   double p[64] = {0};
//   for (i = 0; i < n; ++i) { q = (double)x[i] * (double)x[i];  p[i % 64] = p[i % 64] + q; }
//   for (h = 32; h >= 1; h /= 2) for (j = 0; j < h; ++j) p[j] = p[j] + p[j+h];
//   return p[0];
// (q is exact: a float's 24-bit significand squared fits double's 53 bits; only the adds
// round.) Backends feed it into rms = 1 / sqrtf((float)(ss / n) + eps) unchanged.
double sumsq_f64(const float* x, int64_t n);

}  // namespace ds4::quant
