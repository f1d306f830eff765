// backend/cuda/ops.h — the Backend ops of backend/backend.h as CUDA launchers.
//
// Role: one launcher per op, taking the op's own param struct (backend.h) whose pointers are
// all DEVICE addresses (inside device Buffers or uploaded weights) and whose sizes are host
// values; CudaBackend (cuda_backend.cpp) forwards each Backend call here. The kernels live
// in the .cu files of this folder, grouped by the part of the forward pass they serve:
// hc.cu (HC pre / post / collapse), elementwise.cu (embed, add, hc_mean, swiglu, get_rows,
// argmax), reduce.cu (top_k; argmax with a margin), attention.cu (attention inputs, compressor
// step, indexer select, sink attention), moe.cu (router, routed experts; moe_rows.cu: the
// routed experts of several rows grouped by expert).
// Invariants (design.md §4; the CUDA backend issue, item 4):
//  * Every output is BIT-IDENTICAL to the CPU backend's (backend/cpu, the oracle) for the same
//    inputs: the same float operations in the same order per output element (the CPU's lanes
//    and trees, sequential sums where the CPU sums sequentially), every transcendental from
//    core/detmath.h, no FMA contraction (the folder builds with --fmad=false).
//  * Batch invariance: a row's / query's result never depends on the other rows of the call.
//  * Launchers are asynchronous on `stream`, allocate nothing (scratch comes in the params or
//    from OpScratch), read nothing back, and return an error Status naming the op and its
//    shapes when a launch fails or an argument is outside what the kernels support; never abort.
//  * This header includes no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "core/status.h"

namespace ds4::cuda {

// Device scratch owned by the CudaBackend for ops whose params carry none (the Q8_0
// activation rows of a matmul). `bytes` is what is available at `data`.
struct OpScratch {
  void* data = nullptr;
  size_t bytes = 0;
};

// Bytes of OpScratch a matmul of n_rows rows of n_in needs (Q8_0 activation blocks).
size_t matmul_scratch_bytes(int64_t n_in, int n_rows);

// ---- matmul (matvec.cu dispatch on the weight type: Q8_0 via quantize_q8_0_act, F16, F32) ----
Status matmul(const backend::MatmulParams& p, const OpScratch& scratch, Stream stream);
// p[0..n): one launch pair when grouped_q8_0 (all Q8_0, one shape, row count and strides,
// each group's weights 4-byte aligned,
// 2 <= n <= kMaxMatvecGroups), else matmul one by one; the bits of n matmul calls either way.
bool grouped_q8_0(const backend::MatmulParams* p, int n);
size_t matmul_grouped_scratch_bytes(const backend::MatmulParams* p, int n);
Status matmul_grouped(const backend::MatmulParams* p, int n, const OpScratch& scratch, Stream stream);

// ---- hc.cu ---------------------------------------------------------------------------------
Status rms_norm(const backend::RmsNormParams& p, Stream stream);
// HC pre / collapse. With `tickets` (kHcTicketRows uint32 counters in device memory, zero
// before the first call; CudaBackend allocates them once) ONE fused launch per kHcTicketRows
// rows, leaving the counters zero and p.flat unwritten; calls sharing the counters must be
// ordered (one stream). nullptr: the three-launch path (rms_norm -> flat, matvec_f16 -> mix,
// finish), kept for A/B (DS4_CUDA_HC_FUSED=0). With tickets, `kernel` picks the one-launch
// kernel: kFused (DS4_CUDA_HC_FUSED=1: the row read from global memory as the chains go) or
// kStaged (=2: the row and the block's weight rows copied to shared memory at once, one dot
// chain per thread). Same bits on every path (mix included).
inline constexpr int kHcTicketRows = 4096;
enum class HcKernel { kFused, kStaged };
Status hc_pre(const backend::HcPreParams& p, Stream stream, uint32_t* tickets = nullptr,
              HcKernel kernel = HcKernel::kFused);
Status hc_post(const backend::HcPostParams& p, Stream stream);
Status hc_collapse(const backend::HcCollapseParams& p, Stream stream, uint32_t* tickets = nullptr,
                   HcKernel kernel = HcKernel::kFused);
// The staged kernel's decode dot (one output per block, rows · mix_dim blocks at most one per
// SM): true computes the block's products with all its threads, then runs the 64 chains over
// them; false (the default until measured on a GPU) runs the chains over the weights and x
// directly. The same bits; process-wide (--cuda-hc-products), for A/B.
void set_hc_products(bool on);
bool hc_products();
// HcPreParams::post_first folded into the staged HC-pre kernel (every block makes the row from
// the post's inputs, each writes its share of it) instead of an hc_post launch before it. The
// same bits; process-wide (--cuda-fold-hc-post), for A/B.
void set_fold_hc_post(bool on);
bool fold_hc_post();

// ---- elementwise.cu ------------------------------------------------------------------------
Status embed(const backend::EmbedParams& p, Stream stream);
Status add(const backend::AddParams& p, Stream stream);
Status hc_mean(const backend::HcMeanParams& p, Stream stream);
Status swiglu(const backend::SwigluParams& p, Stream stream);
Status get_rows(const backend::GetRowsParams& p, Stream stream);
Status argmax(const backend::ArgmaxParams& p, Stream stream);  // with a margin: reduce.cu
Status fill_f32(float* dst, size_t n, float value, Stream stream);
// Backend::copy_many: n device -> device copies, kCopyBatch regions per launch.
inline constexpr int kCopyBatch = 32;
Status copy_many(const backend::CopyRegion* regions, int n, Stream stream);

// ---- reduce.cu -----------------------------------------------------------------------------
Status top_k(const backend::TopKParams& p, Stream stream);

// ---- attention.cu --------------------------------------------------------------------------
Status attention_inputs(const backend::AttentionInputsParams& p, Stream stream);
// Where the ops' folded norms run (attention_inputs' q_head_norm / kv_norm, hc_pre's normed):
// false as rms_norm launches inside the op, true inside their kernels (the backend's default)
// (attention_inputs: a warp per head's statistic in the 64-lane order, then the scale; the
// staged hc_pre kernel's last block: the same over y; rms_norm's bits either way; hc_pre's
// other kernels still launch rms_norm). Process-wide (--cuda-fuse-norms).
void set_fused_norms(bool on);
bool fused_norms();
Status compressor_step(const backend::CompressorStepParams& p, Stream stream);
// p[0..n) in order, each step seeing the state the steps before it left: the bits of n
// compressor_step calls, up to 16 steps per launch.
Status compressor_steps(const backend::CompressorStepParams* p, int n, Stream stream);
// A chain's n steps (backend::CompressorRowsParams, the bits of the steps one by one) in two
// launches: every emitted row pooled in parallel, then the state after. *done false when it
// declines the shapes (ratio past 128, head_dim past 1024: the caller runs the steps).
Status compressor_rows(const backend::CompressorRowsParams& p, Stream stream, bool* done);
// p[0..n): independent queries (host array; the launcher passes them to the device by value,
// in launches of as many as fit the kernel parameter space).
Status indexer_select(const backend::IndexerSelectParams* p, int n, Stream stream);
Status sink_attention(const backend::SinkAttentionParams* p, int n, Stream stream);
// sink_attention's kernels (the same bits either way): kSplit, the scores of each tile of 8
// keys per block then a combine launch per output-dim slice (many small blocks: a decode's
// query); kFused (for calls of kSinkFusedMinQueries queries or more, more than a verify's
// rows: prefill groups), one block per (8 heads, query) staging the queries once and keeping
// every chain of a head in one block, up to 32 queries per launch; head_dims past 512 run
// split. Process-wide; tests and benchmarks switch it.
enum class SinkKernel { kSplit, kFused };
inline constexpr int kSinkFusedMinQueries = 9;
void set_sink_kernel(SinkKernel k);
SinkKernel sink_kernel();
// The fused kernel on p[0..n) whatever n (tests, benchmarks): *done false when it declines
// the shapes (a head_dim past 512), an error when sink_attention would give one.
Status sink_attention_fused(const backend::SinkAttentionParams* p, int n, Stream stream, bool* done);

// ---- moe.cu --------------------------------------------------------------------------------
Status route(const backend::RouteParams& p, Stream stream);
// Scratch: p.scratch, of backend::moe_scratch_bytes(n_embd, n_ff, n_used, n_rows) bytes (the
// CUDA kernels may lay it out their own way within that size).
Status moe(const backend::MoeParams& p, Stream stream);
// Bytes of p.scratch that moe uses (its own layout; never more than backend::moe_scratch_bytes
// of the same shape, which tests/cuda checks).
size_t moe_device_scratch_bytes(int64_t n_embd, int64_t n_ff, int n_used, int n_rows);
// moe's kernels for n_rows >= 2 (the same bits either way; n_rows == 1 always takes the
// one-row kernels): kGrouped (moe_rows.cu; the backend's default) reads each touched expert
// once per call for all the rows that chose it, dp4a dots; kTensor the same grouping with the
// integer dots on the int8 tensor cores (moe_rows.cu; --cuda-moe tc); kPairs the per-pair
// kernels (one expert read per (row, slot) pair). Shapes the grouped kernels do not take (more
// than kMoeRowsMaxExperts experts, unaligned rows) run the per-pair kernels; output widths the
// tensor-core CTAs do not fill run the dp4a grouped ones. Process-wide; tests and benchmarks
// switch it.
enum class MoeRowsKernel { kPairs, kGrouped, kTensor };
void set_moe_rows_kernel(MoeRowsKernel k);
MoeRowsKernel moe_rows_kernel();

}  // namespace ds4::cuda
