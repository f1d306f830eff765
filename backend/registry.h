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
  // CUDA: HC pre / collapse as one fused kernel per call (false: the three-launch path, for A/B;
  // same bits). Ignored by the CPU backend.
  bool cuda_hc_fused = true;
  // CUDA: Q8_0 matvecs of one activation row on the warp kernels that preceded the staged
  // kernel (cuda::Q8_0R1Kernel::kWarp; process-wide, set when the backend is made). Same bits;
  // for A/B timing (--cuda-q8-r1=old / DS4_CUDA_Q8_R1=old).
  bool cuda_q8_r1_old = false;
  // CUDA: the staged kernel, but a Q8_0 matmul of one row quantizes its activation in a launch
  // of its own first (cuda::Q8_0R1Kernel::kStagedPrequant) instead of in the matvec launch.
  // Same bits; for A/B timing of the fusion (--cuda-q8-r1=new-prequant). cuda_q8_r1_old wins.
  bool cuda_q8_r1_prequant = false;
};

// Names make_backend() accepts, in preference order ("cpu" first).
std::vector<std::string> backend_names();

// "auto" → "cuda" when this build has the CUDA backend and GPU `device` is usable, else "cpu";
// any other name is returned as given (make_backend checks it).
std::string resolve_backend_name(std::string_view name, int device);

// The backend called `name` (kInvalidArgument for an unknown name, kUnsupported for an option
// this machine or build cannot honour).
Expected<std::unique_ptr<Backend>> make_backend(std::string_view name, const BackendOptions& options);

}  // namespace ds4::backend
