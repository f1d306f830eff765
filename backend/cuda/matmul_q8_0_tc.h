// backend/cuda/matmul_q8_0_tc.h — the Q8_0 tensor-core matmul of many activation rows
// (matmul_q8_0_tc.cu), as matvec_quant.cu's dispatch calls it. Internal to backend/cuda.
// Invariant: a call that sets *launched = true launched the kernel on `stream` (its launch
// status is the returned Status); *launched = false launched nothing (the shape, the row count
// or the Q8_0RowsKernel choice declined it) and the caller's r <= 8 kernels run the rows, with
// the same bits either way. Shapes the caller would reject are declined, never reported here.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/matvec_r1.h"

namespace ds4::cuda {

// n_groups (1..kMaxMatvecGroups) Q8_0 matrices of one shape, group g: y[g] row k =
// W[g] · x[g] row k for k < r (x rows xs blocks apart, y rows ys floats apart; xs, ys > 0).
// force: run whatever r is and whatever the Q8_0RowsKernel choice (kMatvec excepted: auto tile).
Status tc_try_launch(const Q8_0GroupArgs& args, int n_groups, size_t row_bytes, int64_t n_in, int64_t n_out,
                     int64_t xs, int r, int64_t ys, Stream stream, bool force, bool* launched);

}  // namespace ds4::cuda
