// backend/cuda/hc.cu — hyper-connection ops on the device: HC pre (flatten-norm, F16 mix
// matvec, Sinkhorn, weighted stream sum), HC post and the output-head HC collapse.
//
// Role: hc_pre / hc_post / hc_collapse of ops.h, bit-identical to backend/cpu (cpu_backend.cpp
// hc_pre / hc_collapse, cpu_ops.cpp hc_pre_finish_rows / hc_post_rows).
// Layout: the norm and the mix matvec are the tested launchers of cuda_kernels.h (rms_norm
// unweighted, matvec_f16). The per-row Sinkhorn (a few hundred flops on n_hc² values) runs on
// one warp, a lane per HC row / column (sinkhorn_row_warp: the CPU's scalar sequence per
// value); every block of a row's stream sum recomputes it into shared memory instead of a
// second launch, and only the row's first block writes post / comb. Stream sums are elementwise: y = 0 (or f·post), then
// y = y + w[h]·x[h] for h in stream order — kernels.h weighted_sum's sequence per element.
// Invariants: no allocation (flat / mix scratch come in the params), asynchronous on the stream.
#include "backend/cuda/common.cuh"
#include "backend/row_math.h"
#include "backend/cuda/ops.h"

namespace ds4::cuda {

namespace {

using backend::GgmlType;

constexpr int kThreads = 256;
constexpr int kElemsPerBlock = 1024;  // stream-sum elements of one row per block

unsigned chunks(int64_t n) { return static_cast<unsigned>((n + kElemsPerBlock - 1) / kElemsPerBlock); }

// HC Sinkhorn split of one row (cpu_ops' sinkhorn_init + sinkhorn_iterate) on the 32 lanes of
// one warp: lane k < n owns pre[k], post[k] and comb row k in the row phases (softmax, row
// normalization) and comb column k in the column phases. Every value gets the scalar form's
// operation sequence (sequential sums in index order, `1.0f / (sum + eps)` then a multiply);
// only independent rows or columns run side by side. a = comb [n·n], a[r·n + c]: input r ->
// output c. Called by all 32 lanes of the warp.
__device__ void sinkhorn_row_warp(const float* mix, const float* scale, const float* base, int n, int iters,
                                  float eps, float* pre, float* post, float* a) {
  const int k = threadIdx.x & 31;
  const bool on = k < n;
  if (on) {
    const float zp = mix[k] * scale[0] + base[k];
    pre[k] = 1.0f / (1.0f + detmath::exp_f32(-zp)) + eps;
    const int off = n + k;
    const float zq = mix[off] * scale[1] + base[off];
    post[k] = 2.0f / (1.0f + detmath::exp_f32(-zq));
    float row_max = -1.0e30f;
    for (int c = 0; c < n; ++c) {
      const int o = 2 * n + k * n + c;
      const float v = mix[o] * scale[2] + base[o];
      a[k * n + c] = v;
      if (v > row_max) row_max = v;
    }
    float sum = 0.0f;
    for (int c = 0; c < n; ++c) {
      const float e = detmath::exp_f32(a[k * n + c] - row_max);
      a[k * n + c] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
    for (int c = 0; c < n; ++c) a[k * n + c] = a[k * n + c] * inv + eps;
  }
  __syncwarp();
  auto col_norm = [&]() {
    if (on) {
      float sum = 0.0f;
      for (int r = 0; r < n; ++r) sum += a[r * n + k];
      const float inv = 1.0f / (sum + eps);
      for (int r = 0; r < n; ++r) a[r * n + k] *= inv;
    }
    __syncwarp();
  };
  col_norm();
  for (int it = 1; it < iters; ++it) {
    if (on) {
      float sum = 0.0f;
      for (int c = 0; c < n; ++c) sum += a[k * n + c];
      const float inv = 1.0f / (sum + eps);
      for (int c = 0; c < n; ++c) a[k * n + c] *= inv;
    }
    __syncwarp();
    col_norm();
  }
}

// grid (n_rows, chunks of n_embd). Sinkhorn on warp 0 into shared memory, then the
// weighted stream sum y[d] = 0 + pre[0]·x[0][d] + pre[1]·x[1][d] + ...
__global__ void __launch_bounds__(kThreads) hc_pre_finish_kernel(
    const float* __restrict__ x, const float* __restrict__ mix, const float* __restrict__ scale,
    const float* __restrict__ base, int n_hc, int64_t n_embd, int iters, float eps, float* __restrict__ y,
    float* __restrict__ post, float* __restrict__ comb) {
  __shared__ float pre_s[backend::rowmath::kMaxHc];
  __shared__ float post_s[backend::rowmath::kMaxHc];
  __shared__ float comb_s[backend::rowmath::kMaxHc * backend::rowmath::kMaxHc];
  const int64_t row = blockIdx.x;
  const int nn = n_hc * n_hc;
  const int64_t mix_dim = 2 * n_hc + nn;
  if (threadIdx.x < 32) sinkhorn_row_warp(mix + row * mix_dim, scale, base, n_hc, iters, eps, pre_s, post_s, comb_s);
  __syncthreads();
  if (blockIdx.y == 0) {
    for (int i = threadIdx.x; i < n_hc; i += blockDim.x) post[row * n_hc + i] = post_s[i];
    for (int i = threadIdx.x; i < nn; i += blockDim.x) comb[row * nn + i] = comb_s[i];
  }
  const int64_t d0 = static_cast<int64_t>(blockIdx.y) * kElemsPerBlock;
  const float* xr = x + row * n_hc * n_embd;
  for (int64_t d = d0 + threadIdx.x; d < n_embd && d < d0 + kElemsPerBlock; d += blockDim.x) {
    float acc = 0.0f;
    for (int h = 0; h < n_hc; ++h) acc = acc + pre_s[h] * xr[h * n_embd + d];
    y[row * n_embd + d] = acc;
  }
}

// grid (n_rows · n_hc, chunks): out[i][c][d] = f[i][d]·post[i][c], then + comb[r][c]·x[i][r][d]
// for r in stream order.
__global__ void __launch_bounds__(kThreads) hc_post_kernel(const float* __restrict__ f, const float* __restrict__ x,
                                                           const float* __restrict__ post,
                                                           const float* __restrict__ comb, float* __restrict__ out,
                                                           int n_hc, int64_t n_embd) {
  const int64_t row = blockIdx.x / n_hc;
  const int c = static_cast<int>(blockIdx.x % n_hc);
  const float pc = post[row * n_hc + c];
  const float* cm = comb + row * n_hc * n_hc;
  const float* xr = x + row * n_hc * n_embd;
  const float* fr = f + row * n_embd;
  float* o = out + (row * n_hc + c) * n_embd;
  const int64_t d0 = static_cast<int64_t>(blockIdx.y) * kElemsPerBlock;
  for (int64_t d = d0 + threadIdx.x; d < n_embd && d < d0 + kElemsPerBlock; d += blockDim.x) {
    float acc = fr[d] * pc;
    for (int r = 0; r < n_hc; ++r) acc = acc + cm[r * n_hc + c] * xr[r * n_embd + d];
    o[d] = acc;
  }
}

// grid (n_rows, chunks): w[h] = sigmoid(mix[h]·scale + base[h]) + hc_eps, y = 0 + Σ w[h]·x[h].
__global__ void __launch_bounds__(kThreads) hc_collapse_kernel(const float* __restrict__ x,
                                                               const float* __restrict__ mix, float scale,
                                                               const float* __restrict__ base, float hc_eps,
                                                               int n_hc, int64_t n_embd, float* __restrict__ y) {
  __shared__ float w_s[backend::rowmath::kMaxHc];
  const int64_t row = blockIdx.x;
  if (threadIdx.x < n_hc) {
    const int h = threadIdx.x;
    w_s[h] = detmath::sigmoid_f32(mix[row * n_hc + h] * scale + base[h]) + hc_eps;
  }
  __syncthreads();
  const float* xr = x + row * n_hc * n_embd;
  const int64_t d0 = static_cast<int64_t>(blockIdx.y) * kElemsPerBlock;
  for (int64_t d = d0 + threadIdx.x; d < n_embd && d < d0 + kElemsPerBlock; d += blockDim.x) {
    float acc = 0.0f;
    for (int h = 0; h < n_hc; ++h) acc = acc + w_s[h] * xr[h * n_embd + d];
    y[row * n_embd + d] = acc;
  }
}

Status hc_shape_error(const char* op, int n_hc, int64_t n_embd, int n_rows, const char* why) {
  return invalid_argument("cuda: %s: unsupported shape (n_hc %d, n_embd %lld, rows %d): %s", op, n_hc,
                          static_cast<long long>(n_embd), n_rows, why);
}

// The flatten-norm + F16 mix matvec shared by pre and collapse: flat = rms_norm(x) (unweighted),
// mix[i] = fn · flat[i] (rows mix_dim apart).
Status norm_and_mix(const char* op, const float* x, const backend::Matrix& fn, int n_hc, int64_t n_embd,
                    int n_rows, float eps, float* flat, float* mix, int64_t mix_dim, Stream stream) {
  const int64_t hc_dim = n_hc * n_embd;
  if (fn.type != GgmlType::kF16 || fn.n_in != hc_dim || fn.n_out != mix_dim)
    return invalid_argument("cuda: %s: fn must be F16 [%lld -> %lld] (got type %u, [%lld -> %lld])", op,
                            static_cast<long long>(hc_dim), static_cast<long long>(mix_dim),
                            static_cast<unsigned>(fn.type), static_cast<long long>(fn.n_in),
                            static_cast<long long>(fn.n_out));
  Status s = rms_norm(x, nullptr, flat, hc_dim, hc_dim, n_rows, eps, stream);
  if (!s.ok()) return s;
  const Weights w{fn.data, fn.row_bytes, fn.n_in, fn.n_out};
  return matvec_f16(w, flat, hc_dim, n_rows, mix, mix_dim, stream);
}

}  // namespace

Status hc_pre(const backend::HcPreParams& p, Stream stream) {
  if (p.n_hc < 1 || p.n_hc > backend::rowmath::kMaxHc || p.n_embd <= 0 || p.n_rows < 0)
    return hc_shape_error("hc_pre", p.n_hc, p.n_embd, p.n_rows, "need 1 <= n_hc <= 16, n_embd > 0");
  if (p.n_rows == 0) return Status();
  const int64_t mix_dim = 2 * p.n_hc + static_cast<int64_t>(p.n_hc) * p.n_hc;
  Status s = norm_and_mix("hc_pre", p.x, p.fn, p.n_hc, p.n_embd, p.n_rows, p.norm_eps, p.flat, p.mix, mix_dim,
                          stream);
  if (!s.ok()) return s;
  const dim3 grid(static_cast<unsigned>(p.n_rows), chunks(p.n_embd));
  hc_pre_finish_kernel<<<grid, kThreads, 0, stream>>>(p.x, p.mix, p.scale, p.base, p.n_hc, p.n_embd,
                                                       p.sinkhorn_iters, p.hc_eps, p.y, p.post, p.comb);
  return launch_status("hc_pre", p.n_hc * p.n_embd, p.n_embd, p.n_rows);
}

Status hc_post(const backend::HcPostParams& p, Stream stream) {
  if (p.n_hc < 1 || p.n_hc > backend::rowmath::kMaxHc || p.n_embd <= 0 || p.n_rows < 0)
    return hc_shape_error("hc_post", p.n_hc, p.n_embd, p.n_rows, "need 1 <= n_hc <= 16, n_embd > 0");
  if (p.n_rows == 0) return Status();
  const dim3 grid(static_cast<unsigned>(p.n_rows * p.n_hc), chunks(p.n_embd));
  hc_post_kernel<<<grid, kThreads, 0, stream>>>(p.f, p.x, p.post, p.comb, p.out, p.n_hc, p.n_embd);
  return launch_status("hc_post", p.n_hc * p.n_embd, p.n_hc * p.n_embd, p.n_rows);
}

Status hc_collapse(const backend::HcCollapseParams& p, Stream stream) {
  if (p.n_hc < 1 || p.n_hc > backend::rowmath::kMaxHc || p.n_embd <= 0 || p.n_rows < 0)
    return hc_shape_error("hc_collapse", p.n_hc, p.n_embd, p.n_rows, "need 1 <= n_hc <= 16, n_embd > 0");
  if (p.n_rows == 0) return Status();
  Status s = norm_and_mix("hc_collapse", p.x, p.fn, p.n_hc, p.n_embd, p.n_rows, p.norm_eps, p.flat, p.mix,
                          p.n_hc, stream);
  if (!s.ok()) return s;
  const dim3 grid(static_cast<unsigned>(p.n_rows), chunks(p.n_embd));
  hc_collapse_kernel<<<grid, kThreads, 0, stream>>>(p.x, p.mix, p.scale, p.base, p.hc_eps, p.n_hc, p.n_embd, p.y);
  return launch_status("hc_collapse", p.n_hc * p.n_embd, p.n_embd, p.n_rows);
}

}  // namespace ds4::cuda
