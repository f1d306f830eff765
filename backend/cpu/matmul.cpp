// backend/cpu/matmul.cpp — reference-dot matmuls split over output rows (see matmul.h).
#include "backend/cpu/matmul.h"

#include <vector>

#include "core/status.h"
#include "core/threadpool.h"
#include "backend/cpu/kernels.h"

namespace ds4::backend::cpu {

namespace {

std::vector<quant::BlockQ8_0Act>& act_buffer() {
  thread_local std::vector<quant::BlockQ8_0Act> buf;
  return buf;
}

ds4::backend::cpu::TensorRows rows_of(const Matrix& w) {
  return ds4::backend::cpu::TensorRows{w.data, static_cast<int64_t>(w.row_bytes), w.n_in};
}

}  // namespace

void Matmul::matmul(const MatmulParams& p) {
  const Matrix& w = p.w;
  const int64_t n_in = w.n_in;
  switch (w.type) {
    case GgmlType::kQ8_0: {
      if (act_ == ActivationNumerics::kF32) {
        matmul_dequant_f32(w, p.x, p.x_stride, p.n_rows, p.y, p.y_stride, pool_);
        return;
      }
      const int64_t nb = n_in / quant::kQK8_0;
      auto& buf = act_buffer();
      if (buf.size() < static_cast<size_t>(nb * p.n_rows)) buf.resize(static_cast<size_t>(nb * p.n_rows));
      quant::BlockQ8_0Act* xq = buf.data();
      for (int i = 0; i < p.n_rows; ++i) ds4::backend::cpu::quantize_q8_0_act(p.x + i * p.x_stride, xq + i * nb, n_in);
      ds4::backend::cpu::matmul_q8_0(rows_of(w), xq, p.n_rows, p.y, w.n_out, pool_, nb, p.y_stride);
      return;
    }
    case GgmlType::kF16:
      ds4::backend::cpu::matmul_f16(rows_of(w), p.x, p.n_rows, p.y, w.n_out, pool_, p.x_stride, p.y_stride);
      return;
    case GgmlType::kF32:
      ds4::backend::cpu::matmul_f32(rows_of(w), p.x, p.n_rows, p.y, w.n_out, pool_, p.x_stride, p.y_stride);
      return;
    default:
      DS4_CHECK_MSG(false, "matmul: unsupported dense weight type");
  }
}

int group_pairs_by_expert(const int32_t* sel, int n_pairs, int32_t* order, int32_t* groups, int32_t* inv) {
  for (int q = 0; q < n_pairs; ++q) order[q] = q;
  for (int q = 1; q < n_pairs; ++q) {
    const int32_t v = order[q];
    int j = q;
    for (; j > 0 && sel[order[j - 1]] > sel[v]; --j) order[j] = order[j - 1];
    order[j] = v;
  }
  int n_groups = 0;
  for (int q = 0; q < n_pairs; ++q) {
    inv[order[q]] = q;
    if (q == 0 || sel[order[q]] != sel[order[q - 1]]) groups[n_groups++] = q;
  }
  return n_groups;
}

float dot_expert_row(const Matrix& w, int64_t r, const quant::BlockQ8K* x) {
  const int64_t nb = w.n_in / quant::kQKK;
  const uint8_t* row = w.data + r * w.row_bytes;
  switch (w.type) {
    case GgmlType::kIQ2_XXS:
      return quant::dot_iq2_xxs_q8_k(reinterpret_cast<const quant::BlockIQ2XXS*>(row), x, nb);
    case GgmlType::kQ2_K:
      return quant::dot_q2_k_q8_k(reinterpret_cast<const quant::BlockQ2K*>(row), x, nb);
    case GgmlType::kQ4_K:
      return quant::dot_q4_k_q8_k(reinterpret_cast<const quant::BlockQ4K*>(row), x, nb);
    default:
      DS4_CHECK_MSG(false, "expert dot: unsupported weight type");
  }
  return 0.0f;
}

void expert_matmul(const Matrix& w, const quant::BlockQ8K* x, int64_t x_stride, int n_rows,
                   float* y, int64_t y_stride, ThreadPool* pool) {
  const ds4::backend::cpu::TensorRows rows = rows_of(w);
  switch (w.type) {
    case GgmlType::kIQ2_XXS:
      ds4::backend::cpu::matmul_iq2_xxs(rows, x, n_rows, y, w.n_out, pool, x_stride, y_stride);
      return;
    case GgmlType::kQ2_K:
      ds4::backend::cpu::matmul_q2_k(rows, x, n_rows, y, w.n_out, pool, x_stride, y_stride);
      return;
    case GgmlType::kQ4_K:
      ds4::backend::cpu::matmul_q4_k(rows, x, n_rows, y, w.n_out, pool, x_stride, y_stride);
      return;
    default:
      DS4_CHECK_MSG(false, "expert matmul: unsupported weight type");
  }
}

}  // namespace ds4::backend::cpu
