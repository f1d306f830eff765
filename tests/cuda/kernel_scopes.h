// tests/cuda/kernel_scopes.h — RAII scopes for the CUDA backend's process-wide kernel choices,
// shared by the CUDA tests.
//
// Role: a test sets a choice for one scope and the previous value comes back when it ends
// (also on an ASSERT's early return), so later tests in the binary see what they expect.
#pragma once

#include "backend/cuda/cuda_kernels.h"

namespace ds4::cuda::test_util {

// The one-row Q8_0 kernel choice (set_q8_0_r1_kernel).
struct R1KernelScope {
  explicit R1KernelScope(Q8_0R1Kernel k) : saved(q8_0_r1_kernel()) { set_q8_0_r1_kernel(k); }
  ~R1KernelScope() { set_q8_0_r1_kernel(saved); }
  Q8_0R1Kernel saved;
};

// The wide kernel's grid (set_wide_persistent).
struct PersistentScope {
  explicit PersistentScope(bool on) : saved(wide_persistent()) { set_wide_persistent(on); }
  ~PersistentScope() { set_wide_persistent(saved); }
  bool saved;
};

}  // namespace ds4::cuda::test_util
