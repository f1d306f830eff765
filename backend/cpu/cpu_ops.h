// backend/cpu/cpu_ops.h — scalar building blocks of the CPU backend, exposed for unit tests
// and for the session's small per-row steps (router scores).
//
// Role: the exact source-order formulas of ds4-architecture.md §3 (RMSNorm, RoPE tail with
// YaRN, sigmoid/softplus, Sinkhorn split) and the per-row bodies of the CPU backend's HC pre /
// HC post / sink attention ops (their vector loops through backend/cpu/kernels.h, same bits on
// every ISA).
// Everything here is single-threaded, allocation-free and depends only on its arguments, so
// it is trivially batch invariant.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "core/detmath.h"
#include "core/math.h"
#include "core/rope.h"

namespace ds4::backend::cpu {

// out = x · (1/sqrtf((float)(Σ(double)x²/n) + eps)) (· w), left to right (§3.2); the sum is
// quant::sumsq_f64 (64 double lane partials, then a halving tree).
void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps);
// rms_norm_row on n_rows rows (row i at x + i·stride, out + i·stride; in place ok), bit for
// bit. Each row's statistic keeps its own 64 lane partials (the kernel table's
// sumsq_rows_f64, up to 8 rows per call).
void rms_norm_rows(const float* x, const float* w, float* out, int64_t n, int64_t stride, int n_rows,
                   float eps);

// §3.8: RoPE on dims [head_dim - n_rot, head_dim) of each of n_head heads, interleaved pairs.
void rope_tail_rows(float* x, int n_head, int head_dim, int n_rot, int64_t pos,
                    const RopeParams& rp, bool inverse);

// §3.9 from core/detmath.h (shared with every backend, so their bits agree).
using ds4::sigmoid_stable;  // core/math.h
inline float softplus_stable(float x) { return detmath::softplus_f32(x); }
inline float silu(float x) { return detmath::silu_f32(x); }

// §4.2 steps 3-5: mix [2*n_hc + n_hc*n_hc] -> pre [n_hc], post [n_hc], comb [n_hc*n_hc].
void hc_split_sinkhorn(const float* mix, const float* scale, const float* base, int n_hc,
                       int iters, float eps, float* pre, float* post, float* comb);

// The vector helpers (dot_f32_many, weighted_sum, ...) are the kernels of backend/cpu/kernels.h.

// ---- op bodies shared by the CPU backend (single-threaded over the given range) ----------
// HC pre after the mix matmul (§4.2 steps 3-6) for every row: Sinkhorn split of p.mix into
// pre / p.post / p.comb, then p.y = Σ_h pre[h]·x[h] (from 0, streams in order). n_hc <= 16.
void hc_pre_finish_rows(const HcPreParams& p);
// HC post (§4.2): out[c] = f·post[c], then + comb[r][c]·x[r] for r in order. n_hc <= 16.
void hc_post_rows(const HcPostParams& p);
// AttentionInputsParams (backend.h) of row r alone.
void attention_inputs_row(const AttentionInputsParams& p, int r);
// Sink attention (§4.5) of heads [h_begin, h_end): per head the scores of the raw rows then
// the allowed compressed rows (disallowed: -1e30 in p.scores), running max from the sink,
// den = exp(sink - mx) + Σ exp(s - mx) in key order, out = (Σ w·key in key order)·(1/den),
// then (p.n_rot > 0) the head's tail de-rotated at p.pos. Stored keys (p.stored_keys(): f16
// raw rows, FP8 compressed rows) are decoded exactly, chunk by chunk, into a stack buffer: the
// bits of the same keys as f32.
void sink_attention_heads(const SinkAttentionParams& p, int64_t h_begin, int64_t h_end);

}  // namespace ds4::backend::cpu
