// backend/cuda/moe_rows.h — the expert-grouped routed-expert path for several rows (moe_rows.cu),
// as moe.cu's dispatch calls it. Internal to backend/cuda.
// Invariant: a call that sets *done = true ran the whole op on `stream` (the same bits as the
// per-pair path: every (pair, output) dot is quant/dot.h's sequence, the slot sum the CPU's);
// *done = false launched nothing (a shape or expert count the grouped kernels do not take) and
// the caller runs the per-pair path, which also reports bad shapes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "core/status.h"

namespace ds4::cuda {

// Experts the grouping kernel counts in shared memory; more take the per-pair path.
inline constexpr int kMoeRowsMaxExperts = 4096;

// The per-pair path's scratch layout (moe.cu), which the grouped path extends: byte offsets
// from the 64-aligned scratch start of xq [n_rows × n_embd/256] Q8_K, mid [pairs × n_ff] f32,
// midq [pairs × n_ff/256] Q8_K, each 64-byte aligned; total = the aligned end + 64 (room to
// align an unaligned scratch start).
struct MoeLayout {
  size_t xq, mid, midq, total;
};
MoeLayout moe_layout(int64_t n_embd, int64_t n_ff, int n_used, int n_rows);

// Bytes of p.scratch the grouped path lays out for n_rows rows (<= backend::moe_scratch_bytes).
size_t moe_rows_scratch_bytes(int64_t n_embd, int64_t n_ff, int n_used, int n_rows);

// Whether kTensor's CTAs tile both matrices of these widths (else those launches run the dp4a
// grouped kernels, the same bits).
bool moe_rows_tc_fills(int64_t n_embd, int64_t n_ff);

// The routed experts of p (p.n_rows >= 2, shapes already checked by moe: n_embd and n_ff
// multiples of 256, up like gate, down the reverse) with gate/up of format f_gu and down f_down.
Status moe_rows_try(const backend::MoeParams& p, ExpertFormat f_gu, ExpertFormat f_down, Stream stream,
                    bool* done);

}  // namespace ds4::cuda
