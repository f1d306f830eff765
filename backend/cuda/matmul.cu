// backend/cuda/matmul.cu — the matmul and RMS-norm ops of backend/cuda/ops.h on top of the
// kernels of cuda_kernels.h.
//
// Role: MatmulParams dispatch on the weight type: Q8_0 weights quantize the activation rows to
// Q8_0 blocks in the backend's scratch, then the r-row Q8_0 matvec — except one row the staged
// r = 1 kernel takes (Q8_0R1Kernel::kStaged, the default): it quantizes the f32 row itself, one
// launch, scratch untouched (matvec_q8_0_r1_f32; the same bits); F16 / F32 weights take the
// f32 rows directly; more than kMaxRows of them run on the many-row kernel under
// DenseRowsKernel::kWide (matvec_f16_rows / matvec_f32_rows, one launch). Rows run in tiles
// (kMaxRows, or the tensor-core GEMM's tiles from kQ8_0TcMinRows Q8_0 rows; each row keeps its
// own accumulators, so a tile boundary changes no bit). matmul_grouped: n Q8_0 matrices of one shape (the grouped
// output LoRA) take one quantization launch and one matvec launch for all groups (same
// per-row kernel body, same bits; one fused launch at one row, as matmul; one row of mixed
// widths, one fused wide launch where the kernel choice fuses it); narrow F16 / F32
// matrices over rows of one length take one launch of the staged kernel (up to
// kMaxDenseGroups, any n_out each); other group lists run matmul one by one. The CPU twin is
// backend/cpu/matmul.cpp.
#include <cuda_runtime.h>

#include "backend/cuda/ops.h"
#include "quant/blocks.h"

namespace ds4::cuda {

size_t matmul_scratch_bytes(int64_t n_in, int n_rows) {
  return static_cast<size_t>(n_rows) * static_cast<size_t>(n_in / quant::kQK8_0) * sizeof(quant::BlockQ8_0Act);
}

Status matmul(const backend::MatmulParams& p, const OpScratch& scratch, Stream stream) {
  const backend::Matrix& m = p.w;
  const Weights w{m.data, m.row_bytes, m.n_in, m.n_out};
  if (p.normed != nullptr) {  // the folded input norm: in the wide kernel, else rms_norm first
    if (p.n_rows == 1 && m.type == gguf::GgmlType::kQ8_0) {
      const RowNorm rn{p.norm_weight, p.normed, p.norm_eps};
      bool fused = false;
      DS4_RETURN_IF_ERROR(matvec_q8_0_r1_f32(w, p.x, p.y, &fused, stream, &rn));
      if (fused) return Status();
    }
    DS4_RETURN_IF_ERROR(rms_norm(backend::input_norm(p), stream));
    backend::MatmulParams q = p;
    q.x = p.normed;
    q.normed = nullptr;
    return matmul(q, scratch, stream);
  }
  switch (m.type) {
    case gguf::GgmlType::kQ8_0: {
      const size_t need = matmul_scratch_bytes(m.n_in, p.n_rows);
      if (need > scratch.bytes) {
        return internal_error("cuda: matmul Q8_0 (n_in %lld, rows %d) needs %zu scratch bytes, has %zu",
                              static_cast<long long>(m.n_in), p.n_rows, need, scratch.bytes);
      }
      if (p.n_rows == 1) {  // one launch when the staged kernel quantizes the row itself
        bool fused = false;
        DS4_RETURN_IF_ERROR(matvec_q8_0_r1_f32(w, p.x, p.y, &fused, stream));
        if (fused) return Status();
      }
      auto* xq = static_cast<quant::BlockQ8_0Act*>(scratch.data);
      const int64_t nb = m.n_in / quant::kQK8_0;
      DS4_RETURN_IF_ERROR(quantize_q8_0_act(p.x, p.x_stride, p.n_rows, m.n_in, xq, nb, stream));
      // All rows in one call: matvec_q8_0 runs many rows as one tensor-core GEMM, fewer in
      // tiles of kMaxRows.
      return matvec_q8_0(w, xq, nb, p.n_rows, p.y, p.y_stride, stream);
    }
    case gguf::GgmlType::kF16:
    case gguf::GgmlType::kF32: {
      if (p.n_rows > kMaxRows && dense_rows_kernel() == DenseRowsKernel::kWide) {  // all rows, one launch
        const Status s = m.type == gguf::GgmlType::kF16
                             ? matvec_f16_rows(w, p.x, p.x_stride, p.n_rows, p.y, p.y_stride, stream)
                             : matvec_f32_rows(w, p.x, p.x_stride, p.n_rows, p.y, p.y_stride, stream);
        if (s.code() != ErrorCode::kUnsupported) return s;  // else the tiles below
      }
      for (int k0 = 0; k0 < p.n_rows; k0 += kMaxRows) {
        const int r = p.n_rows - k0 < kMaxRows ? p.n_rows - k0 : kMaxRows;
        const float* x = p.x + k0 * p.x_stride;
        float* y = p.y + k0 * p.y_stride;
        DS4_RETURN_IF_ERROR(m.type == gguf::GgmlType::kF16 ? matvec_f16(w, x, p.x_stride, r, y, p.y_stride, stream)
                                                           : matvec_f32(w, x, p.x_stride, r, y, p.y_stride, stream));
      }
      return Status();
    }
    default:
      return unsupported("cuda: matmul of %s weights (n_in %lld, n_out %lld) is not supported",
                         gguf::type_name(m.type), static_cast<long long>(m.n_in), static_cast<long long>(m.n_out));
  }
}

size_t matmul_grouped_scratch_bytes(const backend::MatmulParams* p, int n) {
  size_t most = 0;
  for (int i = 0; i < n; ++i) {
    const size_t b = matmul_scratch_bytes(p[i].w.n_in, p[i].n_rows);
    most = b > most ? b : most;
  }
  return grouped_q8_0(p, n) ? static_cast<size_t>(n) * most : most;
}

bool grouped_q8_0(const backend::MatmulParams* p, int n) {
  if (n < 2 || n > kMaxMatvecGroups) return false;
  const backend::MatmulParams& a = p[0];
  for (int i = 0; i < n; ++i) {
    const backend::MatmulParams& b = p[i];
    if (b.w.type != gguf::GgmlType::kQ8_0 || b.w.n_in != a.w.n_in || b.w.n_out != a.w.n_out ||
        b.w.row_bytes != a.w.row_bytes || b.n_rows != a.n_rows || b.x_stride != a.x_stride ||
        b.y_stride != a.y_stride || reinterpret_cast<uintptr_t>(b.w.data) % 4 != 0)
      return false;  // (the grouped kernel reads each group's first row 4-byte aligned)
  }
  return true;
}

// n F16 (or n F32) narrow matrices over rows of one length (the compressors' and indexer's
// projections of one h): one staged launch for all, each group the bits of its own matmul.
// False when the shapes are not that kernel's (then the matmuls run one by one).
bool dense_grouped(const backend::MatmulParams* p, int n, Stream stream, Status* status) {
  const gguf::GgmlType t = p[0].w.type;
  if (n < 2 || n > kMaxDenseGroups || (t != gguf::GgmlType::kF16 && t != gguf::GgmlType::kF32)) return false;
  DenseGroup g[kMaxDenseGroups];
  for (int i = 0; i < n; ++i) {
    const backend::MatmulParams& q = p[i];
    if (q.w.type != t || q.w.n_in != p[0].w.n_in || q.n_rows != p[0].n_rows) return false;
    g[i] = DenseGroup{static_cast<const uint8_t*>(q.w.data), q.w.row_bytes, q.x, q.x_stride == 0 ? q.w.n_in : q.x_stride,
                      q.y, q.y_stride == 0 ? q.w.n_out : q.y_stride, q.w.n_out};
  }
  bool done = false;
  const Status s = matvec_dense_grouped(t == gguf::GgmlType::kF16, g, n, p[0].w.n_in, p[0].n_rows, &done, stream);
  *status = s;
  return done || !s.ok();
}

// One row of Q8_0 matrices of one n_in and row length but mixed widths (attention's q_a and kv
// of one h): one fused wide launch when the kernel choice fuses it (matvec_q8_0_grouped_r1_f32
// with each group's n_out); false when it does not (then the matmuls run one by one).
bool mixed_q8_0_r1(const backend::MatmulParams* p, int n, Stream stream, Status* status) {
  if (n < 2 || n > kMaxMatvecGroups || p[0].n_rows != 1) return false;
  int64_t n_out = 0;
  Q8_0GroupF32 fg[kMaxMatvecGroups];
  for (int g = 0; g < n; ++g) {
    const backend::MatmulParams& q = p[g];
    if (q.w.type != gguf::GgmlType::kQ8_0 || q.n_rows != 1 || q.w.n_in != p[0].w.n_in ||
        q.w.row_bytes != p[0].w.row_bytes || q.w.n_out <= 0)
      return false;
    n_out = q.w.n_out > n_out ? q.w.n_out : n_out;
    fg[g] = Q8_0GroupF32{q.w.data, q.x, q.y, q.w.n_out};
  }
  bool fused = false;
  const Status s = matvec_q8_0_grouped_r1_f32(fg, n, p[0].w.row_bytes, p[0].w.n_in, n_out, &fused, stream);
  *status = s;
  return fused || !s.ok();
}

Status matmul_grouped(const backend::MatmulParams* p, int n, const OpScratch& scratch, Stream stream) {
  for (int i = 0; i < n; ++i)
    if (p[i].normed != nullptr) return invalid_argument("cuda: matmul_grouped: a folded input norm (matmul only)");
  if (Status s; dense_grouped(p, n, stream, &s)) return s;
  if (!grouped_q8_0(p, n)) {
    if (Status s; mixed_q8_0_r1(p, n, stream, &s)) return s;
    for (int i = 0; i < n; ++i) DS4_RETURN_IF_ERROR(matmul(p[i], scratch, stream));
    return Status();
  }
  const backend::Matrix& m = p[0].w;
  const int rows = p[0].n_rows;
  const size_t need = matmul_grouped_scratch_bytes(p, n);
  if (need > scratch.bytes) {
    return internal_error("cuda: matmul_grouped Q8_0 (%d x n_in %lld, rows %d) needs %zu scratch bytes, has %zu", n,
                          static_cast<long long>(m.n_in), rows, need, scratch.bytes);
  }
  if (rows == 1) {  // one launch when the staged kernel quantizes the rows itself
    Q8_0GroupF32 fg[kMaxMatvecGroups];
    for (int g = 0; g < n; ++g) fg[g] = Q8_0GroupF32{p[g].w.data, p[g].x, p[g].y};
    bool fused = false;
    DS4_RETURN_IF_ERROR(matvec_q8_0_grouped_r1_f32(fg, n, m.row_bytes, m.n_in, m.n_out, &fused, stream));
    if (fused) return Status();
  }
  // Group g's activation rows at xq + g·rows·nb: the layout of n matmul calls, side by side.
  auto* xq = static_cast<quant::BlockQ8_0Act*>(scratch.data);
  const int64_t nb = m.n_in / quant::kQK8_0;
  const int64_t group_blocks = nb * rows;
  const float* xs[kMaxMatvecGroups];
  Q8_0Group groups[kMaxMatvecGroups];
  for (int g = 0; g < n; ++g) {
    xs[g] = p[g].x;
    groups[g] = Q8_0Group{p[g].w.data, xq + g * group_blocks, p[g].y};
  }
  DS4_RETURN_IF_ERROR(quantize_q8_0_act_grouped(xs, n, p[0].x_stride, rows, m.n_in, xq, nb, group_blocks, stream));
  return matvec_q8_0_grouped(groups, n, m.row_bytes, m.n_in, m.n_out, nb, rows, p[0].y_stride, stream);
}

Status rms_norm(const backend::RmsNormParams& p, Stream stream) {
  return rms_norm(p.x, p.weight, p.out, p.n, p.stride, p.n_rows, p.eps, stream);
}

}  // namespace ds4::cuda
