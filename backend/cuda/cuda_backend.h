// backend/cuda/cuda_backend.h — the CUDA implementation of backend.h (NVIDIA Hopper, sm_90).
//
// Role: the factory backend/registry.cpp calls for "cuda". The backend keeps every Buffer and
// the bound weights in device memory and runs each op of backend.h as the launchers of
// backend/cuda/ops.h on one stream, in issue order; only upload / download cross PCIe.
// Invariants: the same bits as the CPU backend for every op (ops.h); not host-addressable;
// a CUDA error inside an op (which Backend's void ops cannot return) ends the process with one
// message naming the op and its shapes — after a device fault the context is unusable.
#pragma once

#include <memory>

#include "backend/backend.h"
#include "core/status.h"

namespace ds4::backend {

// How to make the CUDA backend (BackendOptions' cuda_* fields, checked again here).
struct CudaBackendConfig {
  int device = 0;  // GPU index
  // Wait for every op, so a device fault names the op that caused it (debugging).
  bool sync_each_op = false;
  // Wrap the backend in the op-timeline profiler (backend/op_profile.h; report on stderr when the
  // backend is destroyed). Off, the ops run with no profiling code at all.
  bool profile = false;
  // HC pre / collapse as the three-launch path (0), one fused kernel per call (1) or one staged
  // kernel per call (2) (ops.h's HcKernel).
  int hc_fused = 2;
  // The Q8_0 kernel for one activation row, auto|new|new-prequant|wide|wide-fused|old
  // (cuda::set_q8_0_r1_kernel, process-wide).
  std::string q8_r1 = "auto";
  // CUDA graphs for one-row forwards: 0 off, 1 the ops of a forward captured and launched as one
  // graph, N in 2..kMaxCudaGraphSegmentOps a graph per N ops (the device runs one while the host
  // captures the next). Off under sync_each_op or profile (each op must run on its own; a
  // warning says so).
  int graphs = 0;
  // The routed-expert kernels: "old" (the one-row kernel kOld and the pair kernel for 2+ rows)
  // or "new" (the one-row rewrite kNew and the expert-grouped kernel for 2+ rows);
  // cuda::set_moe_r1_kernel / set_moe_rows_kernel, process-wide.
  std::string moe = "new";
  // The F16/F32 matmul of 9+ rows: "tiles" (8-row tiles) or "wide" (the many-row kernel);
  // cuda::set_dense_rows_kernel, process-wide.
  std::string dense_rows = "wide";
  // Programmatic dependent launch of the wide Q8_0 kernel (cuda::set_pdl, process-wide).
  bool pdl = true;
  // Every other kernel launched with PDL too (cuda::set_pdl_all, process-wide).
  bool pdl_all = true;
  // The wide Q8_0 kernel on a persistent grid (cuda::set_wide_persistent, process-wide).
  bool wide_persistent = false;
  // compressor_steps as one launch per 16 steps and compressor_rows as its two parallel
  // launches (true), or one compressor_step launch per step.
  bool batch_steps = true;
  // The sink attention of 9+ queries (prefill groups): "split" or "fused" (cuda::set_sink_kernel,
  // process-wide).
  std::string attn = "split";
  // The folded norms of hc_pre and attention_inputs inside their kernels (cuda::set_fused_norms,
  // process-wide).
  bool fuse_norms = true;
  // HC pre's decode dot over its products (cuda::set_hc_products) and a matmul's folded input
  // norm in the wide kernel (cuda::set_fold_input_norm); process-wide.
  bool hc_products = false;
  bool fold_input_norm = false;
  // Two streams for the lanes of backend.h's fork / join (the shared expert beside the
  // router, the compressor projections beside q_b); off: every op on one stream. Off under
  // graphs or profile (an info line says so).
  bool lanes = true;
  // HcPreParams::post_first inside the staged HC-pre kernel (cuda::set_fold_hc_post; process-wide).
  bool fold_hc_post = false;
};

// The CUDA backend of `c` (kUnsupported without a usable Hopper GPU, saying why). Every kernel
// choice gives the same bits (A/B timing); a value out of range is an invalid-argument error.
Expected<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendConfig& c);
// The process-wide kernel switches of `c` (q8_r1, moe, dense_rows, pdl, pdl_all,
// wide_persistent, attn, fuse_norms, hc_products, fold_input_norm, fold_hc_post, lanes),
// validated, then set: make_cuda_backend applies them; an A/B tool may apply others between two
// forwards of a live backend (same bits, no reload). The other fields are ignored here.
Status apply_cuda_switches(const CudaBackendConfig& c);

}  // namespace ds4::backend
