// backend/cuda/matmul.cu — the matmul and RMS-norm ops of backend/cuda/ops.h on top of the
// kernels of cuda_kernels.h.
//
// Role: MatmulParams dispatch on the weight type: Q8_0 weights quantize the activation rows to
// Q8_0 blocks in the backend's scratch, then the r-row Q8_0 matvec; F16 / F32 weights take the
// f32 rows directly. Rows run in tiles of kMaxRows (each row keeps its own accumulators, so a
// tile boundary changes no bit). The CPU twin is backend/cpu/matmul.cpp.
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
  switch (m.type) {
    case gguf::GgmlType::kQ8_0: {
      const size_t need = matmul_scratch_bytes(m.n_in, p.n_rows);
      if (need > scratch.bytes) {
        return internal_error("cuda: matmul Q8_0 (n_in %lld, rows %d) needs %zu scratch bytes, has %zu",
                              static_cast<long long>(m.n_in), p.n_rows, need, scratch.bytes);
      }
      auto* xq = static_cast<quant::BlockQ8_0Act*>(scratch.data);
      const int64_t nb = m.n_in / quant::kQK8_0;
      DS4_RETURN_IF_ERROR(quantize_q8_0_act(p.x, p.x_stride, p.n_rows, m.n_in, xq, nb, stream));
      for (int k0 = 0; k0 < p.n_rows; k0 += kMaxRows) {
        const int r = p.n_rows - k0 < kMaxRows ? p.n_rows - k0 : kMaxRows;
        DS4_RETURN_IF_ERROR(matvec_q8_0(w, xq + k0 * nb, nb, r, p.y + k0 * p.y_stride, p.y_stride, stream));
      }
      return Status();
    }
    case gguf::GgmlType::kF16:
    case gguf::GgmlType::kF32: {
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

Status rms_norm(const backend::RmsNormParams& p, Stream stream) {
  return rms_norm(p.x, p.weight, p.out, p.n, p.stride, p.n_rows, p.eps, stream);
}

}  // namespace ds4::cuda
