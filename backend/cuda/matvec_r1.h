// backend/cuda/matvec_r1.h — the Q8_0 kernels for one activation row, the staged one
// (matvec_q8_0_r1.cu) and the wide one (matvec_q8_0_wide.cu), as matvec_quant.cu's r = 1
// dispatch calls them. Internal to backend/cuda.
// Invariant: a call that returns true launched the kernel on `stream` (the caller checks the
// launch status); false launched nothing and the caller's warp kernels run the rows, with the
// same bits either way.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_kernels.h"

namespace ds4::cuda {

// The groups of matvec_q8_0_grouped, by value: the launch needs no device copy of the pointers.
struct Q8_0GroupArgs {
  Q8_0Group g[kMaxMatvecGroups];
};

// One quantized row x (nb blocks) against w when the Q8_0R1Kernel choice takes the staged
// kernel for w.n_out and the shape fits it (16-byte aligned rows, nb a multiple of 8).
bool r1_try_launch(const Weights& w, int nb, const quant::BlockQ8_0Act* x, float* y, Stream stream);
// The same for n_groups matrices of one shape (matvec_q8_0_grouped at r = 1).
bool r1_try_launch_grouped(const Q8_0GroupArgs& args, int n_groups, size_t row_bytes, int64_t n_in, int64_t n_out,
                           Stream stream);

// The wide kernel (matvec_q8_0_wide.cu; r1_try_launch calls it under kWide / kAuto): one
// quantized row x (nb blocks) against w when the shape fits it (16-byte aligned rows, nb a
// multiple of 8, shared memory); false launched nothing. Whatever the Q8_0R1Kernel choice.
bool wide_try_launch(const Weights& w, int nb, const quant::BlockQ8_0Act* x, float* y, Stream stream);
bool wide_try_launch_grouped(const Q8_0GroupArgs& args, int n_groups, size_t row_bytes, int64_t n_in, int64_t n_out,
                             Stream stream);
// The same kernel quantizing the f32 row itself (x 16-byte aligned, not overlapping y): the
// fused matmul of one row (matvec_q8_0_r1_f32 / matvec_q8_0_grouped_r1_f32 under kWideFused,
// and kAuto where kR1WideFusedMaxIn allows); false launched nothing.
// With norm: the row is rms_norm(x) · norm->weight (cuda_kernels.h RowNorm).
bool wide_try_launch_f32(const Weights& w, const float* x, float* y, Stream stream, const RowNorm* norm = nullptr);
bool wide_try_launch_grouped_f32(const Q8_0GroupF32* groups, int n_groups, size_t row_bytes, int64_t n_in,
                                 int64_t n_out, Stream stream);

}  // namespace ds4::cuda
