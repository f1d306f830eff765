// backend/cuda/cuda_profile.h — the CUDA side of the op-timeline profiler (backend/op_profile.h):
// an OpClock whose marks are timed CUDA events recorded on the backend's stream.
//
// Role: make_cuda_backend() wraps the CudaBackend in make_profiling_backend() with this clock
// when --cuda-profile / DS4_CUDA_GAP_PROFILE=1 is on; off, nothing of this runs.
// Invariants: every event is created up front (no allocation or event creation per op); a mark
// is one cudaEventRecord; a failure (launch or device fault) ends the process with one message
// naming the profiler, like every other CudaBackend failure.
#pragma once

#include <memory>

#include "backend/cuda/cuda_kernels.h"
#include "backend/op_profile.h"
#include "core/status.h"

namespace ds4::backend {

// `capacity` timed events on `stream` (an error if the device cannot create them).
Expected<std::unique_ptr<OpClock>> make_cuda_event_clock(cuda::Stream stream, int capacity);

}  // namespace ds4::backend
