// backend/cuda/hc.cu — hyper-connection ops on the device: HC pre (flatten-norm, F16 mix
// matvec, Sinkhorn, weighted stream sum), HC post and the output-head HC collapse.
//
// Role: hc_pre / hc_post / hc_collapse of ops.h, bit-identical to backend/cpu (cpu_backend.cpp
// hc_pre / hc_collapse, cpu_ops.cpp hc_pre_finish_rows / hc_post_rows).
// Layout, fused (tickets given, HcKernel::kFused; DS4_CUDA_HC_FUSED=1): ONE launch per call, grid (rows,
// output groups). Each block recomputes its row's RMS statistic (thread t of the first 64
// runs lane partial t of rms_norm's order; the row is L2-resident), then each 64-thread pair
// runs one mix output's F16 dot on the normalized values flat[i] = x[i]·scale on the fly
// (lane partial t again, matvec_f16's order; both through lanes64.cuh), and writes mix. A
// per-row ticket (atomicAdd after a fence) elects the last block of the row, which runs the
// Sinkhorn (pre) or the sigmoid weights (collapse) and the weighted stream sum; it resets the
// ticket, so the counters are zero between calls. flat is not written (nothing reads it).
// Layout, staged (tickets given, HcKernel::kStaged; DS4_CUDA_HC_FUSED=2, the default): ONE launch, grid
// (rows, output groups of 1 (decode) or 4 (batches)); each block copies the row x and its
// weight rows to shared memory with cp.async at once, runs the statistic as x's parts arrive
// (lanes64.cuh's staged_scale), then one dot chain per thread from shared memory; the same
// ticket, the Sinkhorn, the stream sum from the staged x.
// Layout, three launches (tickets nullptr; DS4_CUDA_HC_FUSED=0): the launchers of
// cuda_kernels.h (rms_norm unweighted -> flat, matvec_f16 -> mix), then the finish kernel.
// The per-row Sinkhorn (a few hundred flops on n_hc² values) runs on one warp: for n_hc = 4 a
// lane per value (sinkhorn4_warp: one exp and one division per lane and phase), otherwise a
// lane per HC row / column; either way the CPU's scalar sequence per value. Stream sums are
// elementwise: y = 0 (or f·post), then y = y + w[h]·x[h] for h in stream order — kernels.h
// weighted_sum's sequence per element.
// Invariants: no allocation (flat / mix scratch come in the params, the tickets from the
// caller), asynchronous on the stream; a fused launch covers at most kHcTicketRows rows (more
// rows: several launches in stream order, each leaving its counters zero).
#include <atomic>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/lanes64.cuh"
#include "backend/row_math.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/pdl.cuh"

namespace ds4::cuda {

namespace {

using backend::GgmlType;

constexpr int kThreads = 256;
// Stream-sum elements of one row per block: one per thread, so a decode row's 4096 elements are
// 16 blocks (hc_post: 64) whose loads are all in flight at once, not 4 blocks looping over
// dependent rounds of loads (each round a memory latency: the kernel's time at one row).
constexpr int kElemsPerBlock = kThreads;

unsigned chunks(int64_t n) { return static_cast<unsigned>((n + kElemsPerBlock - 1) / kElemsPerBlock); }

// HC Sinkhorn split of one row (cpu_ops' sinkhorn_init + sinkhorn_iterate) on the 32 lanes of
// one warp: lane k < n owns pre[k], post[k] and comb row k in the row phases (softmax, row
// normalization) and comb column k in the column phases. Every value gets the scalar form's
// operation sequence (sequential sums in index order, `1.0f / (sum + eps)` then a multiply);
// only independent rows or columns run side by side. a = comb [n·n], a[r·n + c]: input r ->
// output c. Called by all 32 lanes of the warp.
__device__ void sinkhorn_init_warp(const float* mix, const float* scale, const float* base, int n, float eps,
                                   float* pre, float* post, float* a) {
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
}

// sinkhorn_iterate on the warp (after sinkhorn_init_warp): a lane per row / column.
__device__ void sinkhorn_iterate_warp(int n, int iters, float eps, float* a) {
  const int k = threadIdx.x & 31;
  const bool on = k < n;
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

// The whole split + Sinkhorn of one row for n = 4 (DS4's n_hc) with one value per lane: lane j
// < 16 owns comb element (r, c) = (j / 4, j % 4), lanes 16-19 pre[j - 16], lanes 20-23
// post[j - 20]. Every lane runs ONE exp and ONE division per phase, side by side, where the
// scalar forms above chain 6 exps per lane and divide line after line (an IEEE division is a
// branchy sequence the compiler cannot interleave: ~8 µs of the 20 iterations). A line's sum
// is gathered by shuffles in element order from 0 (the scalar sequence per value); each value
// gets exactly cpu_ops' operations. Each of the three functions below is called by all 32
// lanes of the warp.

// The split part of sinkhorn4_warp: pre (lanes 16-19) and post (lanes 20-23) stored, the
// comb element's value after the softmax returned (lanes 0-15; the rest get 1). The
// iterations below touch comb alone, so a caller may use pre while they run.
__device__ float sinkhorn4_split(const float* mix, const float* scale, const float* base, float eps, float* pre,
                                 float* post) {
  using detail::kFullMask;
  const int j = threadIdx.x & 31;
  const bool el = j < 16, is_pre = j >= 16 && j < 20, is_post = j >= 20 && j < 24;
  const int r4 = j & ~3;
  // z: the comb logit (el), else the pre / post logit.
  const int off = el ? 8 + j : (is_pre ? j - 16 : (is_post ? 4 + (j - 20) : 0));
  const float sc = scale[el ? 2 : (is_post ? 1 : 0)];
  const float z = mix[off] * sc + base[off];
  // The row max of the comb logits, in column order from -1e30 (lanes 16+ get a dummy).
  float row_max = -1.0e30f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float v = __shfl_sync(kFullMask, z, (r4 + k) & 15);
    if (v > row_max) row_max = v;
  }
  const float e = detmath::exp_f32(el ? z - row_max : -z);
  // The softmax row sum from 0 in column order; pre and post divide 1 + e.
  float sum = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) sum += __shfl_sync(kFullMask, e, (r4 + k) & 15);
  const float q = (is_post ? 2.0f : 1.0f) / (el ? sum : 1.0f + e);
  if (is_pre) pre[j - 16] = q + eps;
  if (is_post) post[j - 20] = q;
  return el ? e * q + eps : 1.0f;
}

// The iterations of sinkhorn4_warp on the lanes' values a (from sinkhorn4_split); lanes 0-15
// store comb. One normalization: every value times 1 / ((its line's sum from 0 in order) +
// eps). The reciprocal is __frcp_rn: 1/x rounded to nearest is the IEEE quotient 1.0f / x
// (the CPU's expression) for every x, in fewer dependent steps than the general division.
__device__ void sinkhorn4_iterate(float a, int iters, float eps, float* comb) {
  using detail::kFullMask;
  const int j = threadIdx.x & 31;
  const int r4 = j & ~3, c = j & 3;
  auto normalize = [&](bool cols) {
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < 4; ++k) s += __shfl_sync(kFullMask, a, cols ? 4 * k + c : r4 + k);
    const float inv = __frcp_rn(s + eps);
    a *= inv;
  };
  normalize(true);
  for (int it = 1; it < iters; ++it) {
    normalize(false);
    normalize(true);
  }
  if (j < 16) comb[j] = a;
}

__device__ void sinkhorn4_warp(const float* mix, const float* scale, const float* base, int iters, float eps,
                               float* pre, float* post, float* comb) {
  sinkhorn4_iterate(sinkhorn4_split(mix, scale, base, eps, pre, post), iters, eps, comb);
  __syncwarp();
}

__device__ void sinkhorn_row_warp(const float* mix, const float* scale, const float* base, int n, int iters,
                                  float eps, float* pre, float* post, float* a) {
  if (n == 4) {
    sinkhorn4_warp(mix, scale, base, iters, eps, pre, post, a);
    return;
  }
  sinkhorn_init_warp(mix, scale, base, n, eps, pre, post, a);
  sinkhorn_iterate_warp(n, iters, eps, a);
}

// grid (n_rows, chunks of n_embd). Sinkhorn on warp 0 into shared memory, then the
// weighted stream sum y[d] = 0 + pre[0]·x[0][d] + pre[1]·x[1][d] + ...
__global__ void __launch_bounds__(kThreads) hc_pre_finish_kernel(
    const float* __restrict__ x, const float* __restrict__ mix, const float* __restrict__ scale,
    const float* __restrict__ base, int n_hc, int64_t n_embd, int iters, float eps, float* __restrict__ y,
    float* __restrict__ post, float* __restrict__ comb) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
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
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
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
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
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

// ---- Fused: one launch per call -----------------------------------------------------------

constexpr int kPair = 64;      // threads of one 64-lane reduction: thread t runs lane partial t
constexpr int kMaxPairs = 4;   // mix outputs per block at most (256 threads)
constexpr int kMaxMix = 2 * backend::rowmath::kMaxHc + backend::rowmath::kMaxHc * backend::rowmath::kMaxHc;

enum class HcKind { kPre, kCollapse };

struct FusedArgs {
  const float* x;        // [rows, n_hc·n_embd]
  const uint8_t* fn;     // F16 [mix_dim rows of n_hc·n_embd], fn_row_bytes apart
  size_t fn_row_bytes;
  const float* base;     // [mix_dim]
  const float* scale3;   // pre: [3]
  float scale1;          // collapse
  int n_hc;
  int64_t n_embd;
  int mix_dim;           // pre: 2·n_hc + n_hc²; collapse: n_hc
  int iters;             // pre: Sinkhorn iterations
  float norm_eps, hc_eps;
  float* mix;            // [rows, mix_dim]
  float* y;              // [rows, n_embd]
  float* post;           // pre: [rows, n_hc]
  float* comb;           // pre: [rows, n_hc²]
  uint32_t* tickets;     // [rows]: zero on entry, zero again when the launch ends
  // The staged pre kernel only (fused_norms): normed = rms_norm(y) · norm_w in its last block.
  float* normed = nullptr;         // [rows, n_embd], or nullptr
  const float* norm_w = nullptr;   // [n_embd], or nullptr (unweighted)
  float norm_out_eps = 0.0f;
  // The staged pre kernel only (fold_hc_post): the HC post before it, folded in. x is its
  // output: every block makes the row from these (fold_post_row) instead of reading x, and
  // writes its share of the row to xout (= x).
  const float* pf = nullptr;     // [rows, n_embd] the sublayer output; nullptr: no fold
  const float* px = nullptr;     // [rows, n_hc·n_embd] the streams before
  const float* ppost = nullptr;  // [rows, n_hc]
  const float* pcomb = nullptr;  // [rows, n_hc²]
  float* xout = nullptr;         // [rows, n_hc·n_embd]
};

__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// The per-row ticket of the one-launch kernels, taken by thread 0 after the block's mix stores:
// release (a device fence, then the count); true for the last of the row's gridDim.y blocks,
// which acquires (a fence: every block's mix is visible after it) and resets the counter, so
// the next launch in stream order starts from zero.
__device__ __forceinline__ bool take_row_ticket(uint32_t* tickets, int64_t row) {
  __threadfence();
  const unsigned prev = atomicAdd(tickets + row, 1u);
  const bool last = prev == gridDim.y - 1;
  if (last) {
    __threadfence();
    tickets[row] = 0u;
  }
  return last;
}

// grid (rows, ceil(mix_dim / pairs)), blockDim = 64·pairs. Block (row, g): pair q computes
// mix output g·pairs + q; the row's last block to finish finishes the row.
template <HcKind kKind>
__global__ void __launch_bounds__(kMaxPairs * kPair) hc_fused_kernel(const FusedArgs a) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  __shared__ double sq_hi[32];
  __shared__ float dot_hi[kMaxPairs][32];
  __shared__ float s_scale;
  __shared__ bool s_last;
  __shared__ float mix_s[kMaxMix];
  __shared__ float w_s[backend::rowmath::kMaxHc];  // stream weights: pre (pre) or sigmoid (collapse)
  __shared__ float post_s[backend::rowmath::kMaxHc];
  __shared__ float comb_s[backend::rowmath::kMaxHc * backend::rowmath::kMaxHc];
  const int tid = threadIdx.x, t = tid & (kPair - 1), pair = tid / kPair, lane = tid & 31;
  const int64_t row = blockIdx.x;
  const int64_t n = static_cast<int64_t>(a.n_hc) * a.n_embd;
  const float* xr = a.x + row * n;
  const int o = static_cast<int>(blockIdx.y) * (static_cast<int>(blockDim.x) / kPair) + pair;
  const bool has_out = o < a.mix_dim;  // uniform over the pair
  const uint16_t* wr =
      reinterpret_cast<const uint16_t*>(a.fn + static_cast<size_t>(has_out ? o : 0) * a.fn_row_bytes);

  // The pair's weight row (2n bytes) on its way to the L2 while the statistic runs.
  if (has_out) {
    const char* wb = reinterpret_cast<const char*>(wr);
    for (int64_t b = static_cast<int64_t>(t) * 128; b < 2 * n; b += kPair * 128) prefetch_l2(wb + b);
  }

  // 1. The RMS statistic (rms_norm's order): thread t < 64 sums x[i]² for i ≡ t mod 64.
  double sq = 0.0;
  if (tid < kPair) {
#pragma unroll 8
    for (int64_t i = t; i < n; i += kPair) sq = detail::sumsq_step(sq, __ldg(xr + i));
    if (tid >= 32) sq_hi[lane] = sq;
  }
  __syncthreads();
  if (tid < 32) {
    sq = detail::tree64(sq, sq_hi[lane]);
    if (lane == 0) s_scale = detail::rms_scale(sq, n, a.norm_eps);
  }
  __syncthreads();
  const float scale = s_scale;

  // 2. The pair's mix output (matvec_f16's order) on flat[i] = x[i]·scale, rms_norm's product.
  float acc = 0.0f;
  if (has_out) {
#pragma unroll 8
    for (int64_t i = t; i < n; i += kPair) {
      const float f = __fmul_rn(__ldg(xr + i), scale);
      acc = detail::dot_step(acc, detail::f16_to_f32(__ldg(wr + i)), f);
    }
    if (t >= 32) dot_hi[pair][lane] = acc;
  }
  __syncthreads();
  if (has_out && t < 32) {
    acc = detail::tree64(acc, dot_hi[pair][lane]);
    if (lane == 0) {
      a.mix[row * a.mix_dim + o] = acc;
      __threadfence();
    }
  }

  // 3. The ticket: release (this block's mix stores, then a device fence, then the count), and
  // the last of the row's gridDim.y blocks goes on.
  __syncthreads();
  if (tid == 0) s_last = take_row_ticket(a.tickets, row);
  __syncthreads();
  if (!s_last) return;
  for (int i = tid; i < a.mix_dim; i += blockDim.x) mix_s[i] = __ldcg(a.mix + row * a.mix_dim + i);
  __syncthreads();

  // 4. The row's stream weights, then y = 0 + w[0]·x[0] + w[1]·x[1] + ... per element.
  const int nh = a.n_hc;
  if constexpr (kKind == HcKind::kPre) {
    const int nn = nh * nh;
    if (tid < 32) sinkhorn_row_warp(mix_s, a.scale3, a.base, nh, a.iters, a.hc_eps, w_s, post_s, comb_s);
    __syncthreads();
    for (int i = tid; i < nh; i += blockDim.x) a.post[row * nh + i] = post_s[i];
    for (int i = tid; i < nn; i += blockDim.x) a.comb[row * nn + i] = comb_s[i];
  } else {
    if (tid < nh) w_s[tid] = detmath::sigmoid_f32(mix_s[tid] * a.scale1 + a.base[tid]) + a.hc_eps;
    __syncthreads();
  }
  const int64_t E = a.n_embd;
  float* yr = a.y + row * E;
  constexpr int kU = 4;  // elements per thread in flight
  const int64_t step = static_cast<int64_t>(blockDim.x);
  for (int64_t d0 = tid; d0 < E; d0 += kU * step) {
    float sum[kU];
#pragma unroll
    for (int u = 0; u < kU; ++u) sum[u] = 0.0f;
    for (int h = 0; h < nh; ++h) {
      const float wh = w_s[h];
      float v[kU];
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        const int64_t d = d0 + u * step;
        v[u] = d < E ? __ldg(xr + h * E + d) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kU; ++u) sum[u] = sum[u] + wh * v[u];
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t d = d0 + u * step;
      if (d < E) yr[d] = sum[u];
    }
  }
}

// ---- Staged: one launch per call, the row in shared memory ----------------------------------

constexpr int kStagedThreads = 256;
constexpr int kMaxOuts = 4;                    // mix outputs per block at most (64 chains each)
constexpr int kStagedSmemMax = 200 * 1024;     // dynamic shared memory a block may take

__host__ __device__ inline int round_up(int v, int m) { return (v + m - 1) / m * m; }

// Dynamic shared memory of a staged block: the row x (f32, n rounded up to 4), `outs` weight
// rows (f16, n rounded up to 8, so each starts 16-byte aligned) and, with `products`, the one
// output's n products (f32, n rounded up to 4).
size_t staged_smem(int64_t n, int outs, bool products) {
  const size_t n4 = static_cast<size_t>(round_up(static_cast<int>(n), 4));
  return 4 * n4 + 2 * static_cast<size_t>(outs) * static_cast<size_t>(round_up(static_cast<int>(n), 8)) +
         (products ? 4 * n4 : 0);
}

// The staged kernel's dot for one output per block (decode): the products first, then the
// chains (set_hc_products; off until measured on a GPU).
std::atomic<bool> g_hc_products{false};
// The HC post before an HC pre folded into the staged kernel (set_fold_hc_post; off until
// measured on a GPU).
std::atomic<bool> g_fold_hc_post{false};

// One row of the folded HC post into shared memory: xs[c·E + d] = f[d]·post[c], then
// + comb[r][c]·x[r][d] for r in stream order (hc_post_kernel's expression, each product and sum
// rounded on its own). Block g of the row's gridDim.y blocks also writes the columns d (or, with
// float4s, the 4-column groups) ≡ g mod gridDim.y of every stream to xout: the row once in all.
// post_s / comb_s: the kernel's shared arrays (free until its last phase). The caller's next
// barrier makes xs visible to the block.
__device__ void fold_post_row(const FusedArgs& a, int64_t row, float* xs, float* post_s, float* comb_s) {
  const int nh = a.n_hc, nn = nh * nh;
  const int64_t E = a.n_embd;
  const int tid = threadIdx.x, g = blockIdx.y, G = gridDim.y;
  if (tid < nh) post_s[tid] = __ldg(a.ppost + row * nh + tid);
  if (tid < nn) comb_s[tid] = __ldg(a.pcomb + row * nn + tid);
  __syncthreads();
  const float* f = a.pf + row * E;
  const float* xb = a.px + row * nh * E;
  float* xo = a.xout + row * nh * E;
  const bool vec = E % 4 == 0 && (reinterpret_cast<uintptr_t>(f) | reinterpret_cast<uintptr_t>(xb) |
                                  reinterpret_cast<uintptr_t>(xo)) % 16 == 0;
  if (vec) {
    const int64_t E4 = E / 4;
    for (int64_t j = tid; j < E4; j += kStagedThreads) {
      const float4 fv = __ldg(reinterpret_cast<const float4*>(f) + j);
      const bool mine = j % G == g;
      for (int c = 0; c < nh; ++c) {
        const float pc = post_s[c];
        float4 acc = make_float4(__fmul_rn(fv.x, pc), __fmul_rn(fv.y, pc), __fmul_rn(fv.z, pc), __fmul_rn(fv.w, pc));
        for (int r = 0; r < nh; ++r) {
          const float w = comb_s[r * nh + c];
          const float4 xv = __ldg(reinterpret_cast<const float4*>(xb + r * E) + j);
          acc.x = __fadd_rn(acc.x, __fmul_rn(w, xv.x));
          acc.y = __fadd_rn(acc.y, __fmul_rn(w, xv.y));
          acc.z = __fadd_rn(acc.z, __fmul_rn(w, xv.z));
          acc.w = __fadd_rn(acc.w, __fmul_rn(w, xv.w));
        }
        reinterpret_cast<float4*>(xs + c * E)[j] = acc;
        if (mine) reinterpret_cast<float4*>(xo + c * E)[j] = acc;
      }
    }
    return;
  }
  for (int64_t d = tid; d < E; d += kStagedThreads) {
    const float fd = f[d];
    for (int c = 0; c < nh; ++c) {
      float acc = __fmul_rn(fd, post_s[c]);
      for (int r = 0; r < nh; ++r) acc = __fadd_rn(acc, __fmul_rn(comb_s[r * nh + c], xb[r * E + d]));
      xs[c * E + d] = acc;
      if (d % G == g) xo[c * E + d] = acc;
    }
  }
}

// The barrier of the staged kernel's last phases: the block's (t0 = 0), or named barrier 1 over
// threads t0 .. kStagedThreads - 1 (whole warps; warp 0 is running the Sinkhorn beside them).
__device__ __forceinline__ void tail_sync(int t0) {
  if (t0 == 0) {
    __syncthreads();
  } else {
    asm volatile("bar.sync 1, %0;" ::"r"(kStagedThreads - t0) : "memory");
  }
}

// grid (rows, ceil(mix_dim / outs)), kStagedThreads threads. Block (row, g):
//  1. copies the row x to shared memory (kStageParts cp.async groups) and its weight rows
//     o = g·outs + q (a fifth group; 16-byte copies, or plain loads for rows not 16-byte
//     aligned);
//  2. runs the RMS statistic (lanes64.cuh's staged_scale) as x's parts arrive;
//  3. runs the outs · 64 dot chains of matvec_f16's order, one per thread (thread 64q + l:
//     output q, lane partial l, i = l, l + 64, ... < n: acc + f16(w[i])·(x[i]·scale)), from
//     shared memory, then the tree per output on one warp each. With `products` (one output
//     per block) every thread first writes its share of p[i] = f16(w[i])·(x[i]·scale) (eight
//     elements per step, 16-byte loads), so a chain step is one load and one add: the same
//     operations, so the same bits, with the block's 256 threads doing the multiplies instead
//     of the chains' 64;
//  4. the ticket as in hc_fused_kernel; the row's last block runs the Sinkhorn or the sigmoid
//     weights, and the stream sum from its staged x (and the folded norm); for HC pre with
//     n_hc = 4 the Sinkhorn's iterations run on warp 0 beside the stream sum and the norm on
//     warps 1-7, which need its pre weights alone (the same operations: the same bits).
template <HcKind kKind>
__global__ void __launch_bounds__(kStagedThreads) hc_staged_kernel(const FusedArgs a, int outs, bool pdl,
                                                                   bool products) {
  extern __shared__ __align__(16) unsigned char dyn[];
  __shared__ double sq_s[64];
  __shared__ float dot_s[kMaxOuts][64];
  __shared__ float s_scale;
  __shared__ bool s_last;
  __shared__ float mix_s[kMaxMix];
  __shared__ float w_s[backend::rowmath::kMaxHc];
  __shared__ float post_s[backend::rowmath::kMaxHc];
  __shared__ float comb_s[backend::rowmath::kMaxHc * backend::rowmath::kMaxHc];
  const int tid = threadIdx.x;
  const int64_t row = blockIdx.x;
  const int n = a.n_hc * static_cast<int>(a.n_embd);
  const int n8 = round_up(n, 8);
  float* xs = reinterpret_cast<float*>(dyn);                             // [n4]
  uint16_t* ws = reinterpret_cast<uint16_t*>(dyn + 4 * round_up(n, 4));  // [outs][n8]
  const float* xr = a.x + row * n;
  const int o0 = static_cast<int>(blockIdx.y) * outs;

  // 1. Stage x (parts first: the statistic waits on them), then the weight rows; launched with
  // PDL (pdl), the weight rows first, before the wait for the kernel that writes x, so they
  // stream while it runs (the statistic's first wait then covers them too).
  auto stage_weights = [&] {
    for (int q = 0; q < outs; ++q) {
      const int o = o0 + q;
      if (o >= a.mix_dim) break;
      const uint8_t* wb = a.fn + static_cast<size_t>(o) * a.fn_row_bytes;
      const uint16_t* wrow = reinterpret_cast<const uint16_t*>(wb);
      uint16_t* dst = ws + q * n8;
      int s = 0;
      if (reinterpret_cast<uintptr_t>(wb) % 16 == 0) {
        const int c1 = n / 8;
        for (int c = tid; c < c1; c += kStagedThreads) cp_async16_cg(dst + 8 * c, wrow + 8 * c);
        s = c1 * 8;
      }
      for (int i = s + tid; i < n; i += kStagedThreads) dst[i] = __ldg(wrow + i);
    }
    cp_async_commit();
  };
  if (pdl) stage_weights();
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  if (kKind == HcKind::kPre && a.pf != nullptr) {
    // The folded HC post makes the row here; its parts are empty groups, so the statistic's
    // waits below count as before (its first barrier publishes xs).
    fold_post_row(a, row, xs, post_s, comb_s);
#pragma unroll
    for (int c = 0; c < detail::kStageParts; ++c) cp_async_commit();
  } else {
    const int part = detail::stage_part(n);
    const bool xvec = reinterpret_cast<uintptr_t>(xr) % 16 == 0;
#pragma unroll
    for (int c = 0; c < detail::kStageParts; ++c) {
      const int lo = c * part < n ? c * part : n;
      detail::stage_f32(xs, xr, lo, lo + part < n ? lo + part : n, xvec);
      cp_async_commit();
    }
  }
  if (!pdl) stage_weights();

  // 2. The statistic (x's parts: the first kStageParts groups, or the last when the weights
  // went first).
  const float scale =
      detail::staged_scale(xs, n, a.norm_eps, pdl ? detail::kStageParts : detail::kStageParts + 1, sq_s, &s_scale);
  cp_async_wait_all();  // the weight rows
  __syncthreads();

  // 3. One dot chain per thread.
  const int q = tid >> 6, l = tid & 63;
  if (products) {  // outs == 1 (the launcher): p[i] by every thread, then the 64 chains over p
    float* ps = reinterpret_cast<float*>(dyn + 4 * round_up(n, 4) + 2 * n8);  // [n4], 16-byte aligned
    if (o0 < a.mix_dim) {  // block-uniform
      const int n_vec = n / 8;
      for (int j = tid; j < n_vec; j += kStagedThreads) {
        const uint4 wv = reinterpret_cast<const uint4*>(ws)[j];
        const float4 x0 = reinterpret_cast<const float4*>(xs)[2 * j];
        const float4 x1 = reinterpret_cast<const float4*>(xs)[2 * j + 1];
        const uint32_t wr[4] = {wv.x, wv.y, wv.z, wv.w};
        const float xv[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        float pv[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          const uint16_t h = static_cast<uint16_t>(k % 2 == 0 ? wr[k / 2] & 0xffffu : wr[k / 2] >> 16);
          pv[k] = __fmul_rn(detail::f16_to_f32(h), __fmul_rn(xv[k], scale));
        }
        reinterpret_cast<float4*>(ps)[2 * j] = make_float4(pv[0], pv[1], pv[2], pv[3]);
        reinterpret_cast<float4*>(ps)[2 * j + 1] = make_float4(pv[4], pv[5], pv[6], pv[7]);
      }
      for (int i = 8 * n_vec + tid; i < n; i += kStagedThreads)
        ps[i] = __fmul_rn(detail::f16_to_f32(ws[i]), __fmul_rn(xs[i], scale));
    }
    __syncthreads();
    if (q == 0 && o0 < a.mix_dim) {
      dot_s[0][l] = detail::sum_lane_range(0.0f, ps, n, l);  // dot_step's adds, in i order
    }
  } else if (q < outs && o0 + q < a.mix_dim) {
    const uint16_t* wq = ws + q * n8;
    float acc = 0.0f;
#pragma unroll 8
    for (int i = l; i < n; i += 64) acc = detail::dot_step(acc, detail::f16_to_f32(wq[i]), __fmul_rn(xs[i], scale));
    dot_s[q][l] = acc;
  }
  __syncthreads();
  {
    const int wq = tid >> 5, lane = tid & 31;
    if (wq < outs && o0 + wq < a.mix_dim) {  // uniform over the warp
      const float m = detail::tree64(dot_s[wq][lane], dot_s[wq][lane + 32]);
      if (lane == 0) {
        a.mix[row * a.mix_dim + o0 + wq] = m;
        __threadfence();
      }
    }
  }

  // 4. The ticket (as hc_fused_kernel), then the last block finishes the row.
  __syncthreads();
  if (tid == 0) s_last = take_row_ticket(a.tickets, row);
  __syncthreads();
  if (!s_last) return;
  const int E = static_cast<int>(a.n_embd);
  const int nh = a.n_hc;
  // HC pre with n_hc = 4: warp 0 runs the Sinkhorn's split, then its iterations BESIDE the
  // stream sum and the folded norm of warps 1-7 (u = tid - 32): those read pre alone, and the
  // iterations touch comb alone. Otherwise every thread does each phase in turn (u = tid).
  const bool beside = kKind == HcKind::kPre && nh == 4;  // block-uniform
  const int t0 = beside ? 32 : 0, nt = kStagedThreads - t0, u = tid - t0;
  // The folded norm's weights into the weight rows' shared memory (the dots are done with it;
  // 2·outs·n8 bytes, enough from n_hc = 2), in flight while the Sinkhorn and the stream sum run.
  // Read from global memory in the last loop instead, each thread would wait out its loads one
  // by one (the stores to normed may alias them). Copied by the threads that read them.
  float* nw_s = nullptr;
  if (a.normed != nullptr && a.norm_w != nullptr && 2 * outs * n8 >= 4 * E) {
    nw_s = reinterpret_cast<float*>(ws);
    if (u >= 0) detail::stage_f32(nw_s, a.norm_w, 0, E, reinterpret_cast<uintptr_t>(a.norm_w) % 16 == 0, u, nt);
    cp_async_commit();
  }
  for (int i = tid; i < a.mix_dim; i += kStagedThreads) mix_s[i] = __ldcg(a.mix + row * a.mix_dim + i);
  __syncthreads();
  if constexpr (kKind == HcKind::kPre) {
    if (beside) {
      float v = 0.0f;
      if (tid < 32) v = sinkhorn4_split(mix_s, a.scale3, a.base, a.hc_eps, w_s, a.post + row * 4);
      __syncthreads();  // pre (w_s) for warps 1-7; warp 0 goes on alone and never syncs again
      if (tid < 32) {
        sinkhorn4_iterate(v, a.iters, a.hc_eps, a.comb + row * 16);
        return;
      }
    } else {
      const int nn = nh * nh;
      if (tid < 32) sinkhorn_row_warp(mix_s, a.scale3, a.base, nh, a.iters, a.hc_eps, w_s, post_s, comb_s);
      __syncthreads();
      for (int i = tid; i < nh; i += kStagedThreads) a.post[row * nh + i] = post_s[i];
      for (int i = tid; i < nn; i += kStagedThreads) a.comb[row * nn + i] = comb_s[i];
    }
  } else {
    if (tid < nh) w_s[tid] = detmath::sigmoid_f32(mix_s[tid] * a.scale1 + a.base[tid]) + a.hc_eps;
    __syncthreads();
  }
  // From here on threads t0.. alone (u = 0 .. nt - 1), synchronized by tail_sync.
  // y[d] = 0 + w[0]·x[0][d] + w[1]·x[1][d] + ... (x from shared memory). With normed, y[d] also
  // replaces x[0][d] in shared memory (read by this thread only, before).
  float* yr = a.y + row * a.n_embd;
  for (int d = u; d < E; d += nt) {
    float acc = 0.0f;
    for (int h = 0; h < nh; ++h) acc = acc + w_s[h] * xs[h * E + d];
    yr[d] = acc;
    if (a.normed != nullptr) xs[d] = acc;
  }
  if (a.normed == nullptr) return;
  // normed = rms_norm(y) · norm_w: the 64-lane double statistic over the staged y (the
  // statistic's threads and chains of step 2, counted from t0), the tree, then each element
  // scaled and weighted.
  cp_async_wait_all();  // the norm's weights
  tail_sync(t0);
  if (detail::stat_thread(u)) sq_s[detail::stat_lane(u)] = detail::sumsq_range(0.0, xs, 0, E, detail::stat_lane(u));
  tail_sync(t0);
  if (u < 32) {
    const double ss = detail::tree64(sq_s[u], sq_s[u + 32]);
    if (u == 0) s_scale = detail::rms_scale(ss, E, a.norm_out_eps);
  }
  tail_sync(t0);
  const float sc = s_scale;
  float* hr = a.normed + row * a.n_embd;
  for (int d = u; d < E; d += nt) {
    const float v = __fmul_rn(xs[d], sc);
    hr[d] = a.norm_w == nullptr ? v : __fmul_rn(v, nw_s != nullptr ? nw_s[d] : a.norm_w[d]);
  }
}

Status hc_shape_error(const char* op, int n_hc, int64_t n_embd, int n_rows, const char* why) {
  return invalid_argument("cuda: %s: unsupported shape (n_hc %d, n_embd %lld, rows %d): %s", op, n_hc,
                          static_cast<long long>(n_embd), n_rows, why);
}

// fn must be the F16 [n_hc·n_embd -> mix_dim] projection, 2-byte aligned rows.
Status check_fn(const char* op, const backend::Matrix& fn, int64_t hc_dim, int64_t mix_dim) {
  if (fn.type != GgmlType::kF16 || fn.n_in != hc_dim || fn.n_out != mix_dim || fn.data == nullptr ||
      reinterpret_cast<uintptr_t>(fn.data) % 2 != 0 || fn.row_bytes < static_cast<size_t>(2 * hc_dim) ||
      fn.row_bytes % 2 != 0)
    return invalid_argument("cuda: %s: fn must be F16 [%lld -> %lld] with aligned rows (got type %u, [%lld -> %lld], "
                            "row_bytes %zu)", op, static_cast<long long>(hc_dim), static_cast<long long>(mix_dim),
                            static_cast<unsigned>(fn.type), static_cast<long long>(fn.n_in),
                            static_cast<long long>(fn.n_out), fn.row_bytes);
  return Status();
}

// The three-launch path's flatten-norm + F16 mix matvec, shared by pre and collapse:
// flat = rms_norm(x) (unweighted), mix[i] = fn · flat[i] (rows mix_dim apart).
Status norm_and_mix(const char* op, const float* x, const backend::Matrix& fn, int n_hc, int64_t n_embd,
                    int n_rows, float eps, float* flat, float* mix, int64_t mix_dim, Stream stream) {
  const int64_t hc_dim = n_hc * n_embd;
  const Status c = check_fn(op, fn, hc_dim, mix_dim);
  if (!c.ok()) return c;
  const Status s = rms_norm(x, nullptr, flat, hc_dim, hc_dim, n_rows, eps, stream);
  if (!s.ok()) return s;
  const Weights w{fn.data, fn.row_bytes, fn.n_in, fn.n_out};
  return matvec_f16(w, flat, hc_dim, n_rows, mix, mix_dim, stream);
}

// Mix outputs per block: two for decode-sized calls (more blocks per row, shorter serial work
// each), four for batches (fewer recomputations of each row's statistic).
int fused_pairs(int n_rows, int mix_dim) {
  const int pairs = n_rows <= 32 ? 2 : kMaxPairs;
  return pairs < mix_dim ? pairs : mix_dim;
}

// The fused kernel over n_rows rows, in launches of at most kHcTicketRows rows (one counter
// each); a's pointers are those of row 0.
template <HcKind kKind>
Status launch_fused(const char* op, const FusedArgs& a, int n_rows, Stream stream) {
  const int64_t hc_dim = static_cast<int64_t>(a.n_hc) * a.n_embd;
  const int pairs = fused_pairs(n_rows, a.mix_dim);
  const unsigned groups = static_cast<unsigned>((a.mix_dim + pairs - 1) / pairs);
  for (int r0 = 0; r0 < n_rows; r0 += kHcTicketRows) {
    const int rr = n_rows - r0 < kHcTicketRows ? n_rows - r0 : kHcTicketRows;
    FusedArgs b = a;
    b.x += r0 * hc_dim;
    b.mix += static_cast<int64_t>(r0) * a.mix_dim;
    b.y += r0 * a.n_embd;
    if constexpr (kKind == HcKind::kPre) {
      b.post += static_cast<int64_t>(r0) * a.n_hc;
      b.comb += static_cast<int64_t>(r0) * a.n_hc * a.n_hc;
    }
    detail::launch_pdl(pdl_all(), hc_fused_kernel<kKind>, dim3(static_cast<unsigned>(rr), groups), pairs * kPair, 0,
                       stream, b);
    const Status s = launch_status(op, hc_dim, a.mix_dim, rr);
    if (!s.ok()) return s;
  }
  return Status();
}

// The staged kernel over n_rows rows (a's pointers those of row 0): one output per block in
// decode (rows <= 8: the most blocks, the shortest chains per block), four for batches (fewer
// copies of each row); fewer where the shared memory would not hold them. A row too long for
// one output per block runs the fused kernel instead.
template <HcKind kKind>
Status launch_staged(const char* op, const FusedArgs& a, int n_rows, Stream stream) {
  const int64_t hc_dim = static_cast<int64_t>(a.n_hc) * a.n_embd;
  static const bool attr_ok = [] {  // > 48 KB of dynamic shared memory: the opt-in, once
    const cudaError_t e =
        cudaFuncSetAttribute(hc_staged_kernel<kKind>, cudaFuncAttributeMaxDynamicSharedMemorySize, kStagedSmemMax);
    if (e != cudaSuccess) (void)cudaGetLastError();
    return e == cudaSuccess;
  }();
  int outs = n_rows <= 8 ? 1 : kMaxOuts;
  if (outs > a.mix_dim) outs = a.mix_dim;
  while (outs > 1 && staged_smem(hc_dim, outs, false) > static_cast<size_t>(kStagedSmemMax)) outs /= 2;
  // The products' 64 KB more per block leave one block per SM (at Flash width): taken while
  // the grid is one wave of that (decode and verify rows), else the chains as before.
  static const int sms = [] {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  const bool products = outs == 1 && g_hc_products.load(std::memory_order_relaxed) &&
                        static_cast<int64_t>(n_rows) * a.mix_dim <= sms &&
                        staged_smem(hc_dim, 1, true) <= static_cast<size_t>(kStagedSmemMax);
  if (!attr_ok || hc_dim > (int64_t{1} << 24) ||
      staged_smem(hc_dim, outs, products) > static_cast<size_t>(kStagedSmemMax)) {
    FusedArgs f = a;
    f.normed = nullptr;  // the fused kernel has no folded norm: an rms_norm launch after it
    if (a.pf != nullptr) {  // nor a folded HC post: its launch first
      const backend::HcPostParams pp{a.pf, a.px, a.ppost, a.pcomb, a.xout, a.n_hc, a.n_embd, n_rows};
      DS4_RETURN_IF_ERROR(hc_post(pp, stream));
      f.pf = nullptr;
    }
    DS4_RETURN_IF_ERROR(launch_fused<kKind>(op, f, n_rows, stream));
    return a.normed == nullptr ? Status()
                               : rms_norm(a.y, a.norm_w, a.normed, a.n_embd, a.n_embd, n_rows, a.norm_out_eps, stream);
  }
  const size_t smem = staged_smem(hc_dim, outs, products);
  const unsigned groups = static_cast<unsigned>((a.mix_dim + outs - 1) / outs);
  for (int r0 = 0; r0 < n_rows; r0 += kHcTicketRows) {
    const int rr = n_rows - r0 < kHcTicketRows ? n_rows - r0 : kHcTicketRows;
    FusedArgs b = a;
    b.x += r0 * hc_dim;
    b.mix += static_cast<int64_t>(r0) * a.mix_dim;
    b.y += r0 * a.n_embd;
    if (b.normed != nullptr) b.normed += r0 * a.n_embd;
    if constexpr (kKind == HcKind::kPre) {
      b.post += static_cast<int64_t>(r0) * a.n_hc;
      b.comb += static_cast<int64_t>(r0) * a.n_hc * a.n_hc;
      if (b.pf != nullptr) {
        b.pf += r0 * a.n_embd;
        b.px += r0 * hc_dim;
        b.ppost += static_cast<int64_t>(r0) * a.n_hc;
        b.pcomb += static_cast<int64_t>(r0) * a.n_hc * a.n_hc;
        b.xout += r0 * hc_dim;
      }
    }
    detail::launch_pdl(pdl_all(), hc_staged_kernel<kKind>, dim3(static_cast<unsigned>(rr), groups), kStagedThreads,
                       smem, stream, b, outs, pdl_all(), products);
    const Status s = launch_status(op, hc_dim, a.mix_dim, rr);
    if (!s.ok()) return s;
  }
  return Status();
}

// The op's folded norm as an rms_norm launch: normed = rms_norm(y) · norm_weight.
Status folded_norm(const backend::HcPreParams& p, Stream stream) {
  if (p.normed == nullptr) return Status();
  return rms_norm(p.y, p.norm_weight, p.normed, p.n_embd, p.n_embd, p.n_rows, p.norm_out_eps, stream);
}

}  // namespace

void set_hc_products(bool on) { g_hc_products.store(on, std::memory_order_relaxed); }
bool hc_products() { return g_hc_products.load(std::memory_order_relaxed); }
void set_fold_hc_post(bool on) { g_fold_hc_post.store(on, std::memory_order_relaxed); }
bool fold_hc_post() { return g_fold_hc_post.load(std::memory_order_relaxed); }

Status hc_pre(const backend::HcPreParams& p, Stream stream, uint32_t* tickets, HcKernel kernel) {
  if (p.n_hc < 1 || p.n_hc > backend::rowmath::kMaxHc || p.n_embd <= 0 || p.n_rows < 0)
    return hc_shape_error("hc_pre", p.n_hc, p.n_embd, p.n_rows, "need 1 <= n_hc <= 16, n_embd > 0");
  if (p.n_rows == 0) return Status();
  const int64_t mix_dim = 2 * p.n_hc + static_cast<int64_t>(p.n_hc) * p.n_hc;
  const backend::HcPostParams& pf = p.post_first;
  if (pf.out != nullptr && (pf.out != p.x || pf.n_hc != p.n_hc || pf.n_embd != p.n_embd || pf.n_rows != p.n_rows))
    return hc_shape_error("hc_pre", p.n_hc, p.n_embd, p.n_rows, "its post_first must make x (same shape)");
  // The HC post before it: folded into the staged kernel (fold_hc_post), else its own launch.
  const bool fold_post = pf.out != nullptr && tickets != nullptr && kernel == HcKernel::kStaged && fold_hc_post();
  if (pf.out != nullptr && !fold_post) DS4_RETURN_IF_ERROR(hc_post(pf, stream));
  if (tickets != nullptr) {
    Status s = check_fn("hc_pre", p.fn, p.n_hc * p.n_embd, mix_dim);
    if (!s.ok()) return s;
    FusedArgs a{p.x,      static_cast<const uint8_t*>(p.fn.data), p.fn.row_bytes, p.base, p.scale, 0.0f,
                p.n_hc,   p.n_embd, static_cast<int>(mix_dim), p.sinkhorn_iters, p.norm_eps, p.hc_eps,
                p.mix,    p.y,      p.post, p.comb, tickets};
    if (fold_post) {
      a.pf = pf.f;
      a.px = pf.x;
      a.ppost = pf.post;
      a.pcomb = pf.comb;
      a.xout = pf.out;
    }
    if (kernel == HcKernel::kStaged) {
      // The folded norm in the staged kernel's last block (fused_norms; launch_staged launches
      // rms_norm itself when it falls back to the fused kernel), else an rms_norm launch after.
      const bool fold = p.normed != nullptr && fused_norms();
      if (fold) {
        a.normed = p.normed;
        a.norm_w = p.norm_weight;
        a.norm_out_eps = p.norm_out_eps;
      }
      DS4_RETURN_IF_ERROR(launch_staged<HcKind::kPre>("hc_pre (staged)", a, p.n_rows, stream));
      return fold ? Status() : folded_norm(p, stream);
    }
    DS4_RETURN_IF_ERROR(launch_fused<HcKind::kPre>("hc_pre (fused)", a, p.n_rows, stream));
    return folded_norm(p, stream);
  }
  Status s = norm_and_mix("hc_pre", p.x, p.fn, p.n_hc, p.n_embd, p.n_rows, p.norm_eps, p.flat, p.mix, mix_dim,
                          stream);
  if (!s.ok()) return s;
  const dim3 grid(static_cast<unsigned>(p.n_rows), chunks(p.n_embd));
  detail::launch_pdl(pdl_all(), hc_pre_finish_kernel, grid, kThreads, 0, stream, p.x, p.mix, p.scale, p.base, p.n_hc,
                     p.n_embd, p.sinkhorn_iters, p.hc_eps, p.y, p.post, p.comb);
  DS4_RETURN_IF_ERROR(launch_status("hc_pre", p.n_hc * p.n_embd, p.n_embd, p.n_rows));
  return folded_norm(p, stream);
}

Status hc_post(const backend::HcPostParams& p, Stream stream) {
  if (p.n_hc < 1 || p.n_hc > backend::rowmath::kMaxHc || p.n_embd <= 0 || p.n_rows < 0)
    return hc_shape_error("hc_post", p.n_hc, p.n_embd, p.n_rows, "need 1 <= n_hc <= 16, n_embd > 0");
  if (p.n_rows == 0) return Status();
  const dim3 grid(static_cast<unsigned>(p.n_rows * p.n_hc), chunks(p.n_embd));
  detail::launch_pdl(pdl_all(), hc_post_kernel, grid, kThreads, 0, stream, p.f, p.x, p.post, p.comb, p.out, p.n_hc,
                     p.n_embd);
  return launch_status("hc_post", p.n_hc * p.n_embd, p.n_hc * p.n_embd, p.n_rows);
}

Status hc_collapse(const backend::HcCollapseParams& p, Stream stream, uint32_t* tickets, HcKernel kernel) {
  if (p.n_hc < 1 || p.n_hc > backend::rowmath::kMaxHc || p.n_embd <= 0 || p.n_rows < 0)
    return hc_shape_error("hc_collapse", p.n_hc, p.n_embd, p.n_rows, "need 1 <= n_hc <= 16, n_embd > 0");
  if (p.n_rows == 0) return Status();
  if (tickets != nullptr) {
    Status s = check_fn("hc_collapse", p.fn, p.n_hc * p.n_embd, p.n_hc);
    if (!s.ok()) return s;
    const FusedArgs a{p.x,    static_cast<const uint8_t*>(p.fn.data), p.fn.row_bytes, p.base, nullptr, p.scale,
                      p.n_hc, p.n_embd, p.n_hc, 0, p.norm_eps, p.hc_eps, p.mix, p.y, nullptr, nullptr, tickets};
    if (kernel == HcKernel::kStaged)
      return launch_staged<HcKind::kCollapse>("hc_collapse (staged)", a, p.n_rows, stream);
    return launch_fused<HcKind::kCollapse>("hc_collapse (fused)", a, p.n_rows, stream);
  }
  Status s = norm_and_mix("hc_collapse", p.x, p.fn, p.n_hc, p.n_embd, p.n_rows, p.norm_eps, p.flat, p.mix,
                          p.n_hc, stream);
  if (!s.ok()) return s;
  const dim3 grid(static_cast<unsigned>(p.n_rows), chunks(p.n_embd));
  detail::launch_pdl(pdl_all(), hc_collapse_kernel, grid, kThreads, 0, stream, p.x, p.mix, p.scale, p.base, p.hc_eps,
                     p.n_hc, p.n_embd, p.y);
  return launch_status("hc_collapse", p.n_hc * p.n_embd, p.n_embd, p.n_rows);
}

}  // namespace ds4::cuda
