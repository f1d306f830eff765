// engine/backend_flags.h — the backend flags, declared once for every frontend that opens an
// Engine (`ds4`, `ds4-bench`, `ds4-bench-spec`, `ds4-bench-batch`, `ds4-server`): where the
// model runs (--backend, --device, the --cpu / --cuda shorthands), the CPU's kernel path and
// thread count (--isa, -t/--threads), the reference numerics (--f32-activations) and the CUDA
// debugging / measuring switches (--cuda-sync, --cuda-profile = DS4_CUDA_GAP_PROFILE, the A/B
// switches --cuda-hc-fused = DS4_CUDA_HC_FUSED, --cuda-q8-r1 = DS4_CUDA_Q8_R1, --cuda-graphs =
// DS4_CUDA_GRAPHS, --cuda-moe = DS4_CUDA_MOE, --cuda-dense-rows = DS4_CUDA_DENSE_ROWS, --cuda-pdl = DS4_CUDA_PDL,
// --cuda-pdl-all = DS4_CUDA_PDL_ALL, --cuda-wide-persistent = DS4_CUDA_WIDE_PERSISTENT,
// --cuda-batch-steps = DS4_CUDA_BATCH_STEPS, --cuda-attn = DS4_CUDA_ATTN, --cuda-fuse-norms =
// DS4_CUDA_FUSE_NORMS, --cuda-hc-products = DS4_CUDA_HC_PRODUCTS, --cuda-fold-input-norm =
// DS4_CUDA_FOLD_INPUT_NORM, --cuda-lanes = DS4_CUDA_LANES, --cuda-fold-hc-post =
// DS4_CUDA_FOLD_HC_POST) and the prefill chunk (--prefill-chunk = DS4_PREFILL_CHUNK), with their
// DS4_* environment mirrors in one table (core/flags.h), and the one way from their values to
// EngineOptions.
//
// Invariants:
//   * Each of these flags is declared here and nowhere else; a frontend registers the table on
//     its FlagTable and reads the values only through apply_backend_flags().
//   * The backend: --backend (or DS4_BACKEND), replaced by --cpu / --cuda when the shorthand is
//     on the command line and --backend is not. "auto" becomes CUDA when this build has it and
//     GPU --device is usable, else the CPU — except that --device given on the command line
//     asks for CUDA (so a missing GPU is an error, not a silent CPU run), and --f32-activations
//     (reference numerics, CPU only) picks the CPU.
//   * Bad values give kInvalidArgument naming the flag, never an abort; what only the machine
//     can answer (no CUDA in this build, no such GPU) is the engine's Status, passed on verbatim.
#pragma once

#include <string>

#include "core/flags.h"
#include "core/status.h"
#include "engine/engine.h"

namespace ds4 {

struct BackendFlags {
  std::string backend = "auto";  // --backend: auto|cpu|cuda
  int device = 0;                // --device: GPU index
  bool cpu = false;              // --cpu  = --backend cpu
  bool cuda = false;             // --cuda = --backend cuda
  std::string isa = "auto";      // --isa: auto|scalar|avx2|avx512
  int threads = 0;               // -t/--threads: 0 = all cores
  bool f32_activations = false;  // --f32-activations
  bool cuda_sync = false;        // --cuda-sync: wait after every CUDA op (debugging)
  bool cuda_profile = false;     // --cuda-profile (DS4_CUDA_GAP_PROFILE): the op-timeline profiler
  int cuda_hc_fused = 2;         // --cuda-hc-fused (DS4_CUDA_HC_FUSED): 0 three launches, 1 fused, 2 staged
  // --cuda-q8-r1 (DS4_CUDA_Q8_R1): auto|new|new-prequant|wide|wide-fused|old Q8_0 r = 1 path
  std::string cuda_q8_r1 = "auto";
  int cuda_graphs = 0;  // --cuda-graphs (DS4_CUDA_GRAPHS): 0 off, 1 a graph per decode forward, N per N ops
  std::string cuda_moe = "new";           // --cuda-moe (DS4_CUDA_MOE): old|new|tc routed-expert kernels
  std::string cuda_dense_rows = "wide";   // --cuda-dense-rows (DS4_CUDA_DENSE_ROWS): tiles|wide
  bool cuda_pdl = true;  // --cuda-pdl / --no-cuda-pdl (DS4_CUDA_PDL): programmatic dependent launch
  bool cuda_pdl_all = true;  // --cuda-pdl-all / --no-cuda-pdl-all (DS4_CUDA_PDL_ALL): every kernel with PDL
  bool cuda_wide_persistent = false;  // --cuda-wide-persistent (DS4_CUDA_WIDE_PERSISTENT)
  bool cuda_batch_steps = true;  // --cuda-batch-steps / --no-cuda-batch-steps (DS4_CUDA_BATCH_STEPS)
  std::string cuda_attn = "split";  // --cuda-attn (DS4_CUDA_ATTN): split|fused sink attention of prefill groups
  bool cuda_fuse_norms = true;  // --cuda-fuse-norms / --no-cuda-fuse-norms (DS4_CUDA_FUSE_NORMS): norms in kernels
  bool cuda_hc_products = false;  // --cuda-hc-products (DS4_CUDA_HC_PRODUCTS): HC pre's dot over its products
  bool cuda_fold_input_norm = false;  // --cuda-fold-input-norm (DS4_CUDA_FOLD_INPUT_NORM): q_a's norm in q_b's kernel
  bool cuda_lanes = true;   // --cuda-lanes (DS4_CUDA_LANES): independent ops of a layer on two streams
  bool cuda_fold_hc_post = false;  // --cuda-fold-hc-post (DS4_CUDA_FOLD_HC_POST): HC post in the next HC pre
  int prefill_chunk = 0;  // --prefill-chunk (DS4_PREFILL_CHUNK): rows per prefill forward, 0 = default
};

// Registers the backend flags on `t`, bound to *f (whose current values are the defaults).
void register_backend_flags(FlagTable& t, BackendFlags* f);

// Checks the values and fills options->backend, device, n_threads, cpu_isa and
// f32_activations. `t` is the table the flags were parsed by (it tells which were given on
// the command line).
Status apply_backend_flags(const BackendFlags& f, const FlagTable& t, EngineOptions* options);

// The start-up line every frontend prints on stderr once its engine is open:
// "<program>: backend cpu: avx512, 16 threads".
std::string backend_line(const std::string& program, const ModelInfo& info);

}  // namespace ds4
