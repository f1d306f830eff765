// backend/registry.h — backends by name: the engine (and any frontend-facing code) asks for
// "cpu" or "cuda" here and never includes a backend's own folder.
//
// Role: one table of the backends this build has, each with a factory that takes the common
// options and validates the ones it understands (the CPU backend owns its ISA choice).
// Invariants: an unknown name or a bad option is an error Status naming it, never an abort.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"

namespace ds4::backend {

struct BackendOptions {
  int n_threads = 0;  // <= 0: all hardware threads
  ActivationNumerics act = ActivationNumerics::kQuantized;
  // CPU kernel path: "auto" (or ""), "scalar", "avx2", "avx512". Process-wide (every path gives
  // the same bits, so this only changes speed); ignored by other backends.
  std::string cpu_isa = "auto";
  int device = 0;  // GPU index (the CUDA backend); ignored by the CPU backend
  // CUDA: wait for every op to finish, so a device fault is reported by the op that caused it
  // (with its shapes) instead of at the next synchronization. Slow; for debugging.
  bool cuda_sync = false;
  // CUDA: the op-timeline profiler (backend/op_profile.h): per op its device time, bytes and
  // GB/s, and the gaps between ops and at host round trips; the report goes to stderr when the
  // backend is destroyed. Ignored by the CPU backend.
  bool cuda_profile = false;
  // CUDA: HC pre / collapse as the three-launch path (0), one fused kernel per call (1) or one
  // staged kernel per call (2); A/B, same bits. Ignored by the CPU backend.
  int cuda_hc_fused = 2;  // the staged kernel: the fastest whole token measured (H100, docs/CUDA.md)
  // CUDA: the kernel of Q8_0 matvecs of one activation row (cuda::Q8_0R1Kernel; process-wide,
  // set when the backend is made; every choice gives the same bits): "auto" (the staged kernel
  // where it measured faster, the output head; the wide kernel below it), "new" (the staged
  // kernel wherever it takes the shape, quantizing the row itself), "new-prequant" (the staged
  // kernel after a quantize launch), "wide" (the wide kernel after a quantize launch),
  // "wide-fused" (the wide kernel quantizing the row itself), "old" (the warp kernels).
  // --cuda-q8-r1 / DS4_CUDA_Q8_R1.
  std::string cuda_q8_r1 = "auto";
  // CUDA: graphs for one-row (decode) forwards, --cuda-graphs / DS4_CUDA_GRAPHS: 0 off (the
  // default: each op launched from the host), 1 the forward's ops captured and launched as one
  // graph, N in 2..kMaxCudaGraphSegmentOps a graph per N ops (the device runs one while the host
  // captures the next). Same bits; off under cuda_sync / cuda_profile. Ignored by the CPU backend.
  int cuda_graphs = 0;
  // CUDA: the routed-expert kernels, "old" or "new" (the one-row rewrite and the expert-grouped
  // kernel for 2+ rows), --cuda-moe / DS4_CUDA_MOE; the F16/F32 matmul of 9+ rows, "tiles" or
  // "wide", --cuda-dense-rows / DS4_CUDA_DENSE_ROWS. Same bits; ignored by the CPU backend.
  std::string cuda_moe = "new";
  std::string cuda_dense_rows = "wide";
  // CUDA: programmatic dependent launch of the wide Q8_0 kernel (--cuda-pdl / DS4_CUDA_PDL): it
  // starts streaming its weights while the kernel before it runs. Same bits.
  bool cuda_pdl = true;
  // CUDA: every other kernel launched with PDL too, each waiting for the one before at its top
  // (--cuda-pdl-all / DS4_CUDA_PDL_ALL; cuda::set_pdl_all). Same bits.
  bool cuda_pdl_all = true;
  // CUDA: the one-row Q8_0 (wide) kernel on a persistent grid, each CTA walking several row
  // groups (--cuda-wide-persistent / DS4_CUDA_WIDE_PERSISTENT; cuda::set_wide_persistent). Same bits.
  bool cuda_wide_persistent = false;
  // CUDA: the compressor steps batched (--cuda-batch-steps / DS4_CUDA_BATCH_STEPS): a prefill
  // group's windows pooled in parallel, a verify group's steps in one launch; else one launch
  // per step. Same bits.
  bool cuda_batch_steps = true;
  // CUDA: the sink attention of prefill groups (9+ queries), "split" or "fused" (one block per 8
  // heads of a query), --cuda-attn / DS4_CUDA_ATTN. Same bits; ignored by the CPU backend.
  std::string cuda_attn = "split";
  // CUDA: the ops' folded norms (HcPreParams::normed, attention_inputs' q heads and kv) inside
  // their kernels (--cuda-fuse-norms / DS4_CUDA_FUSE_NORMS; cuda::set_fused_norms) or as rms_norm
  // launches. Same bits.
  bool cuda_fuse_norms = true;
  // CUDA: the staged HC-pre kernel's decode dot over its products (--cuda-hc-products;
  // cuda::set_hc_products) and a matmul's folded input norm inside the one-row wide kernel
  // (--cuda-fold-input-norm; cuda::set_fold_input_norm). Same bits; off (products: no gain on an
  // H100; the folded norm: not yet measured with the wide kernel on).
  bool cuda_hc_products = false;
  bool cuda_fold_input_norm = false;
  // CUDA: the lanes of Backend::fork / join on two streams (--cuda-lanes / DS4_CUDA_LANES;
  // process-wide, read at each fork). Same bits; on (2K decode +2% on an H100).
  bool cuda_lanes = true;
  // CUDA: HcPreParams::post_first inside the staged HC-pre kernel (--cuda-fold-hc-post;
  // cuda::set_fold_hc_post). Same bits; off (7.6% slower per decoded token on an H100).
  bool cuda_fold_hc_post = false;
};

// The largest --cuda-graphs segment (ops per graph).
inline constexpr int kMaxCudaGraphSegmentOps = 65536;

// Names make_backend() accepts, in preference order ("cpu" first).
std::vector<std::string> backend_names();

// "auto" → "cuda" when this build has the CUDA backend and GPU `device` is usable, else "cpu";
// any other name is returned as given (make_backend checks it).
std::string resolve_backend_name(std::string_view name, int device);

// The backend called `name` (kInvalidArgument for an unknown name, kUnsupported for an option
// this machine or build cannot honour).
Expected<std::unique_ptr<Backend>> make_backend(std::string_view name, const BackendOptions& options);
// Sets the process-wide kernel switches of backend `name` from `options` (CUDA: the A/B kernel
// choices and --cuda-lanes; the CPU has none) without making a backend: an A/B tool flips them
// between two forwards of a live backend, with no model reload. Every choice gives the same
// bits. A bad value is an invalid-argument error, as make_backend gives.
Status apply_backend_switches(std::string_view name, const BackendOptions& options);

}  // namespace ds4::backend
