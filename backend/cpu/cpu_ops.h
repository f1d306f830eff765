// backend/cpu/cpu_ops.h — scalar building blocks of the CPU backend, exposed for unit tests
// and for the session's small per-row steps (router scores).
//
// Role: the exact source-order formulas of ds4-architecture.md §3 (RMSNorm, RoPE tail with
// YaRN, sigmoid/softplus, Sinkhorn split). Everything here is single-threaded, allocation-free
// and depends only on its arguments, so it is trivially batch invariant.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace ds4::backend::cpu {

// out = x · (1/sqrtf((float)(Σ(double)x²/n) + eps)) (· w), left to right (§3.2).
void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps);
// rms_norm_row on n_rows rows (row i at x + i·stride, out + i·stride; in place ok), bit for
// bit. The rows' sequential double sums run interleaved (up to 8 independent chains), so a
// batch costs little more than one row's add-latency chain.
void rms_norm_rows(const float* x, const float* w, float* out, int64_t n, int64_t stride, int n_rows,
                   float eps);

// §3.8: RoPE on dims [head_dim - n_rot, head_dim) of each of n_head heads, interleaved pairs.
void rope_tail_rows(float* x, int n_head, int head_dim, int n_rot, int64_t pos,
                    const model::RopeParams& rp, bool inverse);

// §3.9
float sigmoid_stable(float x);
float softplus_stable(float x);
inline float silu(float x) { return x * sigmoid_stable(x); }

// §4.2 steps 3-5: mix [2*n_hc + n_hc*n_hc] -> pre [n_hc], post [n_hc], comb [n_hc*n_hc].
void hc_split_sinkhorn(const float* mix, const float* scale, const float* base, int n_hc,
                       int iters, float eps, float* pre, float* post, float* comb);

}  // namespace ds4::backend::cpu
