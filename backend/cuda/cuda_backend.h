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

// The CUDA backend on device `device` (kUnsupported without a usable Hopper GPU, saying why).
// sync_each_op: wait for every op, so a device fault names the op that caused it (debugging).
// profile: wrap it in the op-timeline profiler (backend/op_profile.h; report on stderr when the
// backend is destroyed). Off, the ops run with no profiling code at all.
// hc_fused: HC pre / collapse as the three-launch path (0), one fused kernel per call (1) or one
// staged kernel per call (2) (ops.h's HcKernel); anything else is an invalid-argument error.
// q8_r1: the Q8_0 kernel for one activation row, auto|new|new-prequant|wide|wide-fused|old
// (BackendOptions::cuda_q8_r1; cuda::set_q8_0_r1_kernel, process-wide; same bits, A/B timing);
// anything else is an invalid-argument error.
// graphs: CUDA graphs for one-row forwards (BackendOptions::cuda_graphs): 0 off, 1 the ops of a
// forward captured and launched as one graph, N in 2..kMaxCudaGraphSegmentOps a graph per N ops
// (the device runs one while the host captures the next); same bits. Off under sync_each_op or
// profile (each op must run on its own; a warning says so); out of range: invalid argument.
Expected<std::unique_ptr<Backend>> make_cuda_backend(int device, bool sync_each_op = false, bool profile = false,
                                                     int hc_fused = 2, const std::string& q8_r1 = "auto",
                                                     int graphs = 0);

}  // namespace ds4::backend
