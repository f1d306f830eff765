// backend/cpu/matmul.h — the CPU backend's matmul wrapper: one place that turns a
// MatmulParams (weight type, r rows) into dot products.
//
// Role: routes every dense matmul and expert matmul of the CPU backend to the multi-row
// kernels of backend/cpu/kernels.h (per-ISA tables, all with the bits of the quant reference
// dots of quant/dot.h), split over output rows across the pool.
// Invariants: y[i][o] == reference dot(W row o, quantized x[i]) for every i, o, whatever the
// row count and thread count; no allocation after the first call at a given size
// (activation blocks live in a per-thread buffer that only grows). Under
// ActivationNumerics::kF32 the same holds with y[i][o] == dot_f32(dequantized row o, x[i]).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "quant/quant.h"

namespace ds4 {
class ThreadPool;
}

namespace ds4::backend::cpu {

class Matmul {
 public:
  explicit Matmul(ThreadPool* pool, ActivationNumerics act = ActivationNumerics::kQuantized)
      : pool_(pool), act_(act) {}
  // Supported weight types: F32, F16 (canonical dense dot), Q8_0 (activations -> Q8_0, or
  // under kF32: matmul_dequant_f32).
  void matmul(const MatmulParams& p);
  ActivationNumerics activation_numerics() const { return act_; }

 private:
  ThreadPool* pool_;
  ActivationNumerics act_;
};

// ---- ActivationNumerics::kF32 (reference numerics; backend/cpu/moe_f32.cpp) -----------------
// y[k][o] = dot_f32(dequantize_row(W row o), x + k*x_stride) for k < n_rows, o < w.n_out, for
// any quantized type quant::dequantize_row knows. Each weight row is dequantized once per call
// into a per-thread buffer (grows only; no per-call allocation after the first) and dotted
// with every activation row; threads split output rows. Same bits for every (k, o) whatever
// n_rows, the thread count or the ISA.
void matmul_dequant_f32(const Matrix& w, const float* x, int64_t x_stride, int n_rows, float* y,
                        int64_t y_stride, ThreadPool* pool);

// quant::dequantize_row, bit for bit, with faster Q8_0, IQ2_XXS and Q2_K paths.
void dequantize_weight_row(GgmlType t, const void* src, float* dst, int64_t n);

// Backend::moe under ActivationNumerics::kF32: same operation sequence as the quantized path
// (router weight folded into mid, down outputs summed in slot order) but every expert dot is
// matmul_dequant_f32's (f32 x and mid, no Q8_K). Uses at most moe_scratch_bytes() of scratch.
void moe_f32(const MoeParams& p, ThreadPool* pool);

// Routed-expert pairs (row, slot) q = row * n_used + slot, sorted stably by expert id sel[q]
// (insertion sort: no allocation; n_pairs is small) so each expert's weights are read once for
// all its rows. Writes order[n_pairs] (sorted position -> pair), groups[] (first sorted
// position of each expert group) and inv[n_pairs] (pair -> sorted position); returns the
// number of groups. Shared by Backend::moe in both activation numerics.
int group_pairs_by_expert(const int32_t* sel, int n_pairs, int32_t* order, int32_t* groups, int32_t* inv);

// dot(expert weight row r, Q8_K activation) for IQ2_XXS, Q2_K and Q4_K weights.
float dot_expert_row(const Matrix& w, int64_t r, const quant::BlockQ8K* x);

// y[k][o] = dot_expert_row(w, o, x + k*x_stride) for k < n_rows, o < w.n_out (row k of y at
// y + k*y_stride). Same bits as dot_expert_row for every (k, o).
void expert_matmul(const Matrix& w, const quant::BlockQ8K* x, int64_t x_stride, int n_rows,
                   float* y, int64_t y_stride, ThreadPool* pool);

}  // namespace ds4::backend::cpu
