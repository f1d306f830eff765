// backend/cuda/cuda_kernels.h — the CUDA backend's core kernels behind a narrow host API.
//
// Role: host launchers over raw DEVICE pointers for the decode hot path: activation
// quantization (Q8_0, Q8_K), matvecs for r = 1..8 activation rows that read each weight once
// (Q8_0, F16, F32; IQ2_XXS, Q2_K, Q4_K expert rows), the fused routed-expert FFN, RMS norm and the greedy read-out
// (top_two), and the small runtime wrapper CudaBackend uses (streams, events, pinned memory,
// copies). The Backend ops are built on them in ops.h.
// Invariants (design.md §4, ds4-architecture.md §3):
//   * Every result is BIT-IDENTICAL to the CPU oracle: quant/dot.h's dots (integer parts
//     exact, float parts in the CPU's order: the 64-lane order for dense rows, one sequential
//     accumulator over blocks for quantized rows), quant's activation quantizers (byte for
//     byte, NaN/inf handled as x86 lrintf does), cpu_ops' rms_norm_row (quant::sumsq_f64's
//     64-lane double sum) and core/reduce.h's top_two. The .cu files build with --fmad=false and IEEE
//     division and square root, so no product is fused into an add.
//   * Batch invariance: row k of an r-row call gets the bits it gets alone (each row keeps
//     its own accumulator; weights are shared, reductions never are).
//   * Launchers are asynchronous on `stream` (nullptr = the default stream), allocate
//     nothing, and return an error Status naming the op and its shapes when an argument is
//     invalid or the launch fails; they never abort.
//   * This header includes no CUDA header, so host-only code can include it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"
#include "quant/blocks.h"

struct CUstream_st;  // = cudaStream_t's pointee
struct CUevent_st;   // = cudaEvent_t's pointee

namespace ds4::cuda {

using Stream = CUstream_st*;

// Rows per launch of the multi-row matvecs; larger r runs as consecutive tiles of this many.
inline constexpr int kMaxRows = 8;

// ---- Device ---------------------------------------------------------------------------------
struct DeviceInfo {
  int device = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  size_t total_mem = 0;
  size_t l2_bytes = 0;
};
// OK with `info` filled when device `device` exists and the binary can run on it; otherwise
// an error saying why (no driver, no device, an unsupported compute capability).
Status probe_device(int device, DeviceInfo* info);

// Device memory (CudaBackend's buffers and the tests' device copies): errors name the size.
Status device_alloc(void** ptr, size_t bytes);
void device_free(void* ptr);
Status upload(void* dst, const void* src, size_t bytes);
Status download(void* dst, const void* src, size_t bytes);
Status synchronize();  // waits for all work; reports the first asynchronous kernel fault

// ---- Streams, copies, events (the CudaBackend's runtime; every call reports errors) ---------
using Event = CUevent_st*;
Status stream_create(Stream* stream);
void stream_destroy(Stream stream);
Status stream_sync(Stream stream);  // reports the first asynchronous kernel fault
// Any direction (unified addressing): ordered on `stream`. A pageable host source may be reused
// on return; a host destination is valid after stream_sync.
Status copy_async(void* dst, const void* src, size_t bytes, Stream stream);
Status memset_async(void* dst, int value, size_t bytes, Stream stream);
Status host_alloc_pinned(void** ptr, size_t bytes);
void host_free_pinned(void* ptr);
Status event_create(Event* event);  // without timing (ordering only)
Status event_create_timed(Event* event);  // with timing, for event_elapsed_ms
void event_destroy(Event event);
Status event_record(Event event, Stream stream);
Status event_sync(Event event);
// Work issued to `stream` after this call starts once `event`'s recorded work is done.
Status stream_wait_event(Stream stream, Event event);
// Milliseconds between two completed timed events (resolution about 0.5 us).
Status event_elapsed_ms(Event from, Event to, float* ms);
// Free and total bytes of the current device's memory.
Status mem_info(size_t* free_bytes, size_t* total_bytes);
// The pending launch error, if any, as a Status naming `what`.
Status last_error(const char* what);

// ---- Activation quantization (§3.3, §3.4) -----------------------------------------------------
// out row k (n/32 blocks, at out + k·out_stride blocks) = quant::quantize_q8_0_act(x row k).
Status quantize_q8_0_act(const float* x, int64_t x_stride, int n_rows, int64_t n,
                         quant::BlockQ8_0Act* out, int64_t out_stride, Stream stream = nullptr);
// Group g < n_groups: out row k of group g (at out + g·group_stride + k·out_stride blocks) =
// quant::quantize_q8_0_act(row k of x[g]) — n_groups quantize_q8_0_act calls in one launch.
Status quantize_q8_0_act_grouped(const float* const* x, int n_groups, int64_t x_stride, int n_rows, int64_t n,
                                 quant::BlockQ8_0Act* out, int64_t out_stride, int64_t group_stride,
                                 Stream stream = nullptr);
// out row k (n/256 blocks) = quant::quantize_q8_k_act(x row k).
Status quantize_q8_k_act(const float* x, int64_t x_stride, int n_rows, int64_t n,
                         quant::BlockQ8K* out, int64_t out_stride, Stream stream = nullptr);

// ---- Matvecs: y[k·y_stride + o] = dot(W row o, x row k), k < r, o < n_out ---------------------
// A weight view: row o at data + o·row_bytes, n_in elements of the type. data must be 4-byte
// aligned (16 for the fastest dense path); row_bytes a multiple of 2.
struct Weights {
  const void* data = nullptr;
  size_t row_bytes = 0;
  int64_t n_in = 0;
  int64_t n_out = 0;
};
// The dense (F16 / F32, elem bytes) kernels' shape check: an error naming op unless n_in,
// n_out and r are >= 0 and every row holds n_in elements, aligned to one (matvec_dense.cu).
Status check_dense_shape(const char* op, const Weights& w, int r, size_t elem);
// Q8_0 weights × Q8_0 activations (x row k at x + k·x_stride blocks): quant::dot_q8_0.
Status matvec_q8_0(const Weights& w, const quant::BlockQ8_0Act* x, int64_t x_stride, int r,
                   float* y, int64_t y_stride, Stream stream = nullptr);
// Up to kMaxMatvecGroups Q8_0 matrices of one shape in one launch (the grouped output LoRA):
// group g computes matvec_q8_0(Weights{w[g], row_bytes, n_in, n_out}, x[g], x_stride, r,
// y[g], y_stride) with the same bits (each output row's terms in block order by one lane).
inline constexpr int kMaxMatvecGroups = 64;
struct Q8_0Group {
  const void* w = nullptr;               // [n_out rows of row_bytes] Q8_0, 4-byte aligned
  const quant::BlockQ8_0Act* x = nullptr;  // [r, x_stride] activation blocks
  float* y = nullptr;                    // [r, y_stride] f32, first n_out written
};
Status matvec_q8_0_grouped(const Q8_0Group* groups, int n_groups, size_t row_bytes, int64_t n_in, int64_t n_out,
                           int64_t x_stride, int r, int64_t y_stride, Stream stream = nullptr);
// matvec_q8_0's kernel for r = 1 (every variant gives the same bits): kAuto (default) the staged
// kernel, after a quantize launch, where it measured faster (an H200's bench_cuda --rows=1
// q8_0: the output head, n_out >= kR1StagedMinRows, 148 vs 171 us) and the warp kernels on the
// other Flash shapes (where the staged kernel, fused or not, measured equal or slower: the
// 32768 -> 4096 output projection 65-86 vs 53 us); kStaged the
// staged kernel (q8_0_r1_kernel: rows tiled over a warp's lanes, weights through a cp.async
// stage; shapes it cannot take fall back to the warp kernels), which also quantizes an f32 row
// itself (matvec_q8_0_r1_f32: a Q8_0 matmul of one row is one launch); kStagedPrequant the
// same kernel on rows quantize_q8_0_act wrote first (two launches per matmul; A/B of the
// fusion); kWarp the kernels before it (one warp or 4 warps per row; two launches); kWide the
// wide kernel (matvec_q8_0_wide.cu: a CTA's rows copied by coalesced 16-byte cp.async, one
// block pair per thread; after a quantize launch; shapes it cannot take fall back to the warp
// kernels); kWideFused the wide kernel quantizing the f32 row itself where a one-row matmul
// calls it (matvec_q8_0_r1_f32 / matvec_q8_0_grouped_r1_f32: one launch), else as kWide.
// Under kAuto the wide kernel runs below the head (n_out < kR1StagedMinRows) where it takes the
// shape, when kR1WideInAuto (issue #30: designed for the small Flash shapes; the H200 A/B is
// bench_cuda --rows=1 q8_0, " wide" against " old"), fused into a lone matmul of at most
// kR1WideFusedMaxIn inputs (every CTA quantizes the whole row: cheap beside a launch for short
// rows, not for 8192+), and into grouped ones of at most kR1WideFusedMaxGroups matrices (q_a
// and kv, the shared expert's gate and up; the 8-group output LoRA keeps its quantize launch).
// Process-wide; the backend sets it once at start-up (--cuda-q8-r1 / DS4_CUDA_Q8_R1), tests
// and benchmarks switch it for A/B.
enum class Q8_0R1Kernel { kStaged, kWarp, kStagedPrequant, kAuto, kWide, kWideFused };
constexpr int64_t kR1StagedMinRows = 65536;  // kAuto: n_out from which the staged kernel runs
constexpr bool kR1WideInAuto = true;         // kAuto: the wide kernel below kR1StagedMinRows
constexpr int64_t kR1WideFusedMaxIn = 4096;  // kAuto: n_in up to which a one-row matmul fuses it
constexpr int kR1WideFusedMaxGroups = 2;     // kAuto: groups up to which a grouped one fuses it
void set_q8_0_r1_kernel(Q8_0R1Kernel k);
Q8_0R1Kernel q8_0_r1_kernel();
// Programmatic dependent launch (pdl.cuh) of the wide kernel: launched so that it may start
// while the kernel before it runs, it issues its weight chunks, then waits for that kernel
// before it reads the activation row. Same bits. Process-wide, off by default; the backend
// sets it once (--cuda-pdl / DS4_CUDA_PDL).
void set_pdl(bool on);
bool pdl();
// Every other kernel launched with PDL too (pdl.cuh's pdl_enter opens each: wait for the kernel
// before, then let the next one launch), so a kernel's launch overlaps the one before it. Same
// bits. Process-wide; off until set, the backend sets it once (--cuda-pdl-all, on by default /
// DS4_CUDA_PDL_ALL); pdl_all() in pdl.cuh.
void set_pdl_all(bool on);
// The wide kernel's grid: a CTA per row group (false, the default), or, for the shapes where
// it measured faster (wide_persistent_takes), as many CTAs as the SMs hold at once, each walking
// several row groups with 3 (group, chunk) pairs in flight (true: no partial second wave, no gap
// between a CTA's groups). Under it kAuto also fuses the quantization of those shapes' rows up
// to kR1WidePersistentFusedMaxIn inputs (each CTA quantizes the row once for all its groups).
// Same bits. Process-wide (--cuda-wide-persistent / DS4_CUDA_WIDE_PERSISTENT).
void set_wide_persistent(bool on);
bool wide_persistent();
// The shapes: rows of several chunks (past 4096 inputs) and lists of 3+ groups; rows of one
// chunk measured the same or slower on it (docs/CUDA.md, stop 46).
inline bool wide_persistent_takes(int64_t n_in, int n_groups) {
  return wide_persistent() && (n_in > 4096 || n_groups >= 3);
}
constexpr int64_t kR1WidePersistentFusedMaxIn = 8192;
// One activation row as f32 (x: n_in floats): y = matvec_q8_0(w, quantize_q8_0_act(x), r = 1),
// the same bits, in ONE launch: the staged kernel quantizes x into its shared memory with
// quantize_q8_0_act's device code (common.cuh's q8_0_act_* pieces). Runs under kStaged (the
// staged kernel), kWideFused (the wide kernel) and kAuto (the wide kernel, n_in <=
// kR1WideFusedMaxIn and n_out < kR1StagedMinRows; the grouped form never under kAuto), for
// shapes the kernel takes and x 16-byte aligned; otherwise launches nothing and
// sets *fused = false (the caller quantizes and calls matvec_q8_0; a bad shape is reported there).
// x must not overlap y: every CTA reads all of x while others write y (no caller aliases them).
// With norm (the matmul's folded input norm, backend::MatmulParams::normed): the wide kernel
// takes the row as rms_norm(x) · norm->weight (each CTA runs the statistic; CTA 0 also writes
// the normed row to norm->normed), rms_norm's bits; when the wide kernel does not take the
// call, *fused = false and nothing ran (the caller launches rms_norm, then the matmul).
struct RowNorm {
  const float* weight = nullptr;  // [n_in] or nullptr (unweighted)
  float* normed = nullptr;        // [n_in]
  float eps = 1e-6f;
};
Status matvec_q8_0_r1_f32(const Weights& w, const float* x, float* y, bool* fused, Stream stream = nullptr,
                          const RowNorm* norm = nullptr);
// Whether the wide kernel folds a RowNorm (true) or declines it (false, the default until
// measured on a GPU: the caller's rms_norm launch, then the matmul; the same bits). Process-wide
// (--cuda-fold-input-norm).
void set_fold_input_norm(bool on);
bool fold_input_norm();
// The grouped form (matvec_q8_0_grouped at r = 1 with f32 rows): group g computes
// matvec_q8_0_r1_f32(Weights{w[g], row_bytes, n_in, n_out}, x[g], y[g]); one launch for all.
// A group may have fewer outputs than the call's n_out (n_out > 0 here: mixed widths, e.g.
// q_a and kv of one h); only the wide kernel takes such a list (else *fused = false).
struct Q8_0GroupF32 {
  const void* w = nullptr;  // [n_out rows of row_bytes] Q8_0, 16-byte aligned for the fused kernel
  const float* x = nullptr;  // [n_in] f32, one row (16-byte aligned for the fused kernel)
  float* y = nullptr;        // [n_out] f32
  int64_t n_out = 0;         // this group's outputs, <= the call's; 0: the call's
};
Status matvec_q8_0_grouped_r1_f32(const Q8_0GroupF32* groups, int n_groups, size_t row_bytes, int64_t n_in,
                                  int64_t n_out, bool* fused, Stream stream = nullptr);
// The same result from the tensor-core kernel alone, whatever r and n_out (matvec_q8_0 takes
// it for r >= 2 on >= 4096 rows): for its parity tests and to benchmark it against the warp
// kernels. Unsupported when the r activation rows do not fit its shared memory.
Status matvec_q8_0_mma(const Weights& w, const quant::BlockQ8_0Act* x, int64_t x_stride, int r,
                       float* y, int64_t y_stride, Stream stream = nullptr);
// Q8_0 × MANY activation rows (prefill): matvec_q8_0 and matvec_q8_0_grouped with r >=
// kQ8_0TcMinRows run one tiled int8 tensor-core GEMM (matmul_q8_0_tc.cu: each weight tile read
// once per 64 or 128 rows, not once per kMaxRows) instead of r / 8 launches of the r <= 8
// kernels; the same bits (each output's quant::dot_q8_0 sequence, block by block). The choice
// (process-wide, for A/B in tests and benchmarks): kAuto (default) the tensor-core kernel with
// the largest tile that fills the GPU, kTcLarge / kTcMedium / kTcSmall that tile (128 x 128,
// 128 x 64, 64 x 32 outputs x rows), kMatvec the r <= 8 kernels in tiles of kMaxRows (the path
// before). Shapes the tensor-core kernel cannot take keep the r <= 8 kernels.
inline constexpr int kQ8_0TcMinRows = 16;
enum class Q8_0RowsKernel { kAuto, kTcLarge, kTcMedium, kTcSmall, kMatvec };
void set_q8_0_rows_kernel(Q8_0RowsKernel k);
Q8_0RowsKernel q8_0_rows_kernel();
// matvec_q8_0's result from the tensor-core GEMM whatever r (the tile by the choice above;
// kAuto under kMatvec): for its parity tests and benchmarks. Unsupported when it cannot run.
Status matmul_q8_0_tc(const Weights& w, const quant::BlockQ8_0Act* x, int64_t x_stride, int r, float* y,
                      int64_t y_stride, Stream stream = nullptr);
// F16 / F32 weights × f32 activations (x row k at x + k·x_stride floats): quant::dot_f16 /
// dot_f32, the canonical 64-lane order.
Status matvec_f16(const Weights& w, const float* x, int64_t x_stride, int r, float* y,
                  int64_t y_stride, Stream stream = nullptr);
Status matvec_f32(const Weights& w, const float* x, int64_t x_stride, int r, float* y,
                  int64_t y_stride, Stream stream = nullptr);
// Their kernel for narrow matrices (n_out < 4096: one CTA per output row and activation row;
// same bits): kStaged (the default) copies the x row and the weight row to shared memory at
// once and runs the 64 chains on four warps as the parts land (rows up to ~34K halves / 25K
// floats; longer ones take kTiled); kTiled streams 2,048-column tiles, one in flight, and sums
// on one warp (the kernel before; A/B). Process-wide; tests and benchmarks switch it.
enum class DenseNarrowKernel { kStaged, kTiled };
void set_dense_narrow_kernel(DenseNarrowKernel k);
DenseNarrowKernel dense_narrow_kernel();
// Several narrow F16 (f16) or F32 matvecs over rows of one length n_in in ONE launch of the
// staged kernel (grid: every group's outputs side by side): the bits of matvec_f16 / matvec_f32
// per group. Group g: weights w (row_bytes apart), x row k at x + k·xs, y row k at y + k·ys,
// and o_end = its n_out on input. *done = false (nothing launched) when the shapes are not the
// staged kernel's (n_out >= 4096, rows past its shared memory, r > kMaxRows, kTiled chosen).
inline constexpr int kMaxDenseGroups = 8;
struct DenseGroup {
  const uint8_t* w;
  size_t row_bytes;
  const float* x;
  int64_t xs;
  float* y;
  int64_t ys;
  int64_t o_end;  // on input: the group's n_out; in the kernel's table: the end of its outputs
};
struct DenseGroups {
  DenseGroup g[kMaxDenseGroups];
  int n;
};
Status matvec_dense_grouped(bool f16, const DenseGroup* groups, int n_groups, int64_t n_in, int r, bool* done,
                            Stream stream = nullptr);
// F16 / F32 × MANY activation rows (prefill, issue #30): matvec_f16's / matvec_f32's result
// (quant::dot_f16 / dot_f32 per output, the same bits) from one CUDA-core kernel for any r
// (matvec_dense_rows.cu): CTA tiles of 16 outputs × 16 rows (8 × 8 while that leaves under two
// CTAs per SM), each weight chunk staged in shared memory once per CTA and used by all its
// rows, instead of the r <= 8 kernels per kMaxRows rows. Unsupported only when the device
// cannot take its shared memory. matmul (ops.h) runs F16 / F32 weights with n_rows > kMaxRows
// on it under DenseRowsKernel::kWide; kTiles8 (the default until it has run on a GPU): the
// r <= 8 kernels in tiles of kMaxRows (the path before; A/B). Process-wide.
Status matvec_f16_rows(const Weights& w, const float* x, int64_t x_stride, int r, float* y,
                       int64_t y_stride, Stream stream = nullptr);
Status matvec_f32_rows(const Weights& w, const float* x, int64_t x_stride, int r, float* y,
                       int64_t y_stride, Stream stream = nullptr);
enum class DenseRowsKernel { kTiles8, kWide };
void set_dense_rows_kernel(DenseRowsKernel k);
DenseRowsKernel dense_rows_kernel();
// Expert rows × Q8_K activations (x row k at x + k·x_stride blocks): quant::dot_iq2_xxs_q8_k,
// dot_q2_k_q8_k, dot_q4_k_q8_k.
Status matvec_iq2_xxs(const Weights& w, const quant::BlockQ8K* x, int64_t x_stride, int r,
                      float* y, int64_t y_stride, Stream stream = nullptr);
Status matvec_q2_k(const Weights& w, const quant::BlockQ8K* x, int64_t x_stride, int r,
                   float* y, int64_t y_stride, Stream stream = nullptr);
Status matvec_q4_k(const Weights& w, const quant::BlockQ8K* x, int64_t x_stride, int r,
                   float* y, int64_t y_stride, Stream stream = nullptr);

// Routed experts: n_expert matrices of n_out rows × n_in stored back to back, expert e at
// data + e·expert_bytes.
struct ExpertWeights {
  const void* data = nullptr;
  size_t row_bytes = 0;
  size_t expert_bytes = 0;
  int64_t n_in = 0;
  int64_t n_out = 0;
  int64_t n_expert = 0;
};
// The routed-expert FFN of n_rows rows × n_used slots in two launches (moe.cu: quantize x,
// expert_gate_up, quantize mid, expert_down_sum). Pair q = i·n_used + s uses expert e = sel[q]
// (device memory); an id outside [0, n_expert) gives NaN outputs instead of a wild read. The
// dots are quant/dot.h's (the r = 1 matvecs' bits), the rest is the CPU's MoE op.
enum class ExpertFormat { kIQ2_XXS, kQ2_K, kQ4_K };
// mid[q·n_ff + o] = rowmath::moe_mid_value(dot(gate_e row o, x row i), dot(up_e row o, x row
// i), clamp, wt[q]) for q < n_rows·n_used, o < n_ff = gate.n_out; x rows n_embd/256 blocks
// apart. gate and up share the format and shape.
Status expert_gate_up(ExpertFormat f, const ExpertWeights& gate, const ExpertWeights& up, const int32_t* sel,
                      const float* wt, int n_rows, int n_used, const quant::BlockQ8K* x, float clamp, float* mid,
                      Stream stream = nullptr);
// out[i·n_embd + o] = ((0 + d(i, 0)) + d(i, 1)) + ... + d(i, n_used - 1), the slot order, where
// d(i, s) = dot(down_e row o, midq row q) (midq rows n_ff/256 blocks apart); then, with add,
// out = out + add[i·n_embd + o] (MoeParams::add: the shared expert, the add op's bits).
Status expert_down_sum(ExpertFormat f, const ExpertWeights& down, const int32_t* sel, int n_rows, int n_used,
                       const quant::BlockQ8K* midq, const float* add, float* out, Stream stream = nullptr);
// Which kernels run expert_gate_up / expert_down_sum at n_rows = 1 (decode; issue #30), same
// bits: kNew the one-row kernels of moe_r1.cu (activations in registers, every weight row of a
// warp in flight at once; shapes they do not take fall back), kOld (the default until kNew has
// run on a GPU) the warp kernels of matvec_quant.cu. Other row counts always run the warp kernels.
// Process-wide; tests and benchmarks switch it.
enum class MoeR1Kernel { kOld, kNew };
void set_moe_r1_kernel(MoeR1Kernel k);
MoeR1Kernel moe_r1_kernel();

// ---- Norm and read-out ----------------------------------------------------------------------
// out row k = rms_norm_row(x row k) (· weight when not null): ss = quant::sumsq_f64 (Σ (double)x²
// in the 64-lane order), scale = 1/sqrtf((float)(ss/n) + eps), out = x·scale·w. Rows `stride` floats apart
// (0 = n); out may equal x. weight is a model weight: no kernel of the stream writes it (under
// set_pdl_all the kernel copies it before waiting for the kernel before).
Status rms_norm(const float* x, const float* weight, float* out, int64_t n, int64_t stride,
                int n_rows, float eps, Stream stream = nullptr);
// Which rms_norm kernel runs (same bits): kStaged (the default) copies the whole row to shared
// memory at once and runs the 64 chains on four warps as its parts arrive (rows up to 16,384
// floats; longer rows take kChunked); kChunked stages 2,048-float chunks one after the other
// and sums on one warp (the kernel before; A/B). Process-wide; tests and benchmarks switch it.
enum class RmsNormKernel { kStaged, kChunked };
void set_rms_norm_kernel(RmsNormKernel k);
RmsNormKernel rms_norm_kernel_choice();

// core/reduce.h's TopTwo, written to device memory: id = first index of the maximum among
// non-NaN values (excluded index skipped), margin = top1 − top2 (+0 for ties).
struct TopTwoResult {
  int32_t id;
  float margin;
};
Status top_two(const float* logits, int64_t n, int32_t excluded, TopTwoResult* out,
               Stream stream = nullptr);
// The same for n_rows rows (row r at logits + r·stride): ids[r] and, when margins is not
// null, margins[r]. The argmax op with a margin (backend ArgmaxParams::margin).
Status top_two_rows(const float* logits, int64_t n, int64_t stride, int n_rows, int32_t excluded,
                    int32_t* ids, float* margins, Stream stream = nullptr);

}  // namespace ds4::cuda
