// backend/cuda/moe_r1.h — the fused routed-expert kernels for ONE token row (decode), as
// matvec_quant.cu's expert_gate_up / expert_down_sum call them at n_rows = 1 under
// MoeR1Kernel::kNew (cuda_kernels.h). Internal to backend/cuda.
// Invariant: *done = true means the kernel was launched on `stream` (the Status is the launch's);
// *done = false launched nothing (a shape the kernels do not take: rows not 16-byte aligned,
// n_in above 16 super-blocks, more than kMoeR1MaxSlots slots) and the caller's warp kernels run
// the call, with the same bits either way.
// Launch-order contract: both kernels read sel before their PDL wait (to start their weight
// copies during the kernel before them), so sel's writer must not be the launch just before
// them on the stream (moe.cu: route, quantize x, gate/up, quantize mid, down).
#pragma once

#include <cstdint>

#include "backend/cuda/cuda_kernels.h"

namespace ds4::cuda {

inline constexpr int kMoeR1MaxSlots = 8;  // n_used the one-row down kernel takes (a warp per slot)

// The IQ2_XXS decode tables of the expert kernels, built on the host: entries 0-255
// quant::kIq2XxsGrid, 256-383 the byte masks of the 128 sign patterns (quant::kIq2Signs[si]:
// byte b = 0xff where bit b is set).
inline constexpr int kIq2DecodeTables = 256 + 128;
void iq2_decode_tables(uint64_t (&tables)[kIq2DecodeTables]);

Status expert_gate_up_r1(ExpertFormat f, const ExpertWeights& gate, const ExpertWeights& up, const int32_t* sel,
                         const float* wt, int n_used, const quant::BlockQ8K* x, float clamp, float* mid,
                         Stream stream, bool* done);
Status expert_down_sum_r1(ExpertFormat f, const ExpertWeights& down, const int32_t* sel, int n_used,
                          const quant::BlockQ8K* midq, const float* add, float* out, Stream stream, bool* done);

}  // namespace ds4::cuda
