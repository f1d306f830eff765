// backend/cuda/quantize.cu — Q8_0 and Q8_K activation quantization on the device.
//
// Role: quantize_q8_0_act / quantize_q8_k_act of cuda_kernels.h, byte for byte equal to
// quant::quantize_q8_0_act / quantize_q8_k_act (and quantize_q8_0_act_grouped: several row
// sets in one launch, blockIdx.y = group, the same warp body). One warp per block (32 or 256
// elements).
// Q8_0's block: common.cuh's q8_0_act_* pieces (here their warp form, q8_0_act_block), which
// the staged r = 1 matvec of matvec_quant.cu also runs, a thread per block, on its f32 row.
// Why it is exact in parallel: the block maximum of |x| is order-free (NaN never wins, as the
// CPU's strict '>' from 0 skips it); Q8_K's signed maximum is the FIRST element whose |x|
// equals it (a ballot picks the lowest lane, each lane its lowest index); the scale divisions
// are IEEE; rounding is x86 lrintf's (detail::quant_round); bsums are exact integer sums.
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/pdl.cuh"

namespace ds4::cuda {

namespace {

using quant::BlockQ8_0Act;
using quant::BlockQ8K;
using detail::kFullMask;
using detail::warp_max;

// Warp w quantizes block (row w / nb, block w % nb).
__device__ __forceinline__ void q8_0_act_warp(const float* __restrict__ x, int64_t x_stride, int64_t total,
                                              int64_t nb, BlockQ8_0Act* __restrict__ out, int64_t out_stride) {
  const int64_t gw = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (gw >= total) return;  // whole warps exit together
  const int64_t row = gw / nb, b = gw % nb;
  float d;
  const int8_t q = detail::q8_0_act_block(x[row * x_stride + b * quant::kQK8_0 + lane], &d);
  BlockQ8_0Act* o = out + row * out_stride + b;
  o->qs[lane] = q;
  if (lane == 0) o->d = d;
}

__global__ void __launch_bounds__(256) q8_0_act_kernel(const float* __restrict__ x, int64_t x_stride,
                                                       int64_t total, int64_t nb,
                                                       BlockQ8_0Act* __restrict__ out, int64_t out_stride) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  q8_0_act_warp(x, x_stride, total, nb, out, out_stride);
}

// The x rows of each group, passed by value (one launch for all groups).
struct ActGroups {
  const float* x[kMaxMatvecGroups];
};

// blockIdx.y = group g: q8_0_act_kernel on group g's rows, out at out + g·group_stride.
__global__ void __launch_bounds__(256) q8_0_act_grouped_kernel(ActGroups groups, int64_t x_stride, int64_t total,
                                                               int64_t nb, BlockQ8_0Act* __restrict__ out,
                                                               int64_t out_stride, int64_t group_stride) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  q8_0_act_warp(groups.x[blockIdx.y], x_stride, total, nb, out + blockIdx.y * group_stride, out_stride);
}

// Warp w quantizes super-block (row w / nb, block w % nb); lane l owns elements 8l .. 8l+7.
__global__ void __launch_bounds__(256) q8_k_act_kernel(const float* __restrict__ x, int64_t x_stride,
                                                       int64_t total, int64_t nb,
                                                       BlockQ8K* __restrict__ out, int64_t out_stride) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  const int64_t gw = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const int lane = threadIdx.x & 31;
  if (gw >= total) return;
  const int64_t row = gw / nb, b = gw % nb;
  const float* xb = x + row * x_stride + b * quant::kQKK + 8 * lane;
  float v[8];
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    v[i] = xb[i];
    const float av = fabsf(v[i]);
    if (av > amax) amax = av;
  }
  amax = warp_max(amax);
  BlockQ8K* o = out + row * out_stride + b;
  uint32_t* qs_words = reinterpret_cast<uint32_t*>(o->qs) + 2 * lane;
  if (amax == 0.0f) {
    qs_words[0] = 0u;
    qs_words[1] = 0u;
    if ((lane & 1) == 0) o->bsums[lane >> 1] = 0;
    if (lane == 0) o->d = 0.0f;
    return;
  }
  int first = -1;
#pragma unroll
  for (int i = 7; i >= 0; --i)
    if (fabsf(v[i]) == amax) first = i;
  const unsigned has = __ballot_sync(kFullMask, first >= 0);
  const int src = __ffs(has) - 1;
  float mine = 0.0f;
#pragma unroll
  for (int i = 0; i < 8; ++i)
    if (i == first) mine = v[i];
  const float max = __shfl_sync(kFullMask, mine, src);
  const float iscale = -127.0f / max;
  uint32_t packed[2] = {0u, 0u};
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int q = detail::quant_round(iscale * v[i]);
    sum += q;
    packed[i >> 2] |= (static_cast<uint32_t>(q) & 0xffu) << (8 * (i & 3));
  }
  qs_words[0] = packed[0];
  qs_words[1] = packed[1];
  const int pair = sum + __shfl_xor_sync(kFullMask, sum, 1);
  if ((lane & 1) == 0) o->bsums[lane >> 1] = static_cast<int16_t>(pair);
  if (lane == 0) o->d = 1.0f / iscale;
}

Status check_rows(const char* op, int64_t n, int block, int n_rows, int64_t x_stride,
                  int64_t out_stride, int64_t nb) {
  if (n < 0 || n % block != 0 || n_rows < 0 || x_stride < n || out_stride < nb)
    return invalid_argument("cuda: %s: n %lld must be a multiple of %d, rows %d >= 0, x_stride %lld >= n, "
                            "out_stride %lld >= %lld blocks", op, static_cast<long long>(n), block, n_rows,
                            static_cast<long long>(x_stride), static_cast<long long>(out_stride),
                            static_cast<long long>(nb));
  return Status();
}

}  // namespace

Status quantize_q8_0_act(const float* x, int64_t x_stride, int n_rows, int64_t n, BlockQ8_0Act* out,
                         int64_t out_stride, Stream stream) {
  const int64_t nb = n / quant::kQK8_0;
  if (x_stride == 0) x_stride = n;
  if (out_stride == 0) out_stride = nb;
  Status s = check_rows("quantize_q8_0_act", n, quant::kQK8_0, n_rows, x_stride, out_stride, nb);
  if (!s.ok()) return s;
  const int64_t total = nb * n_rows;
  if (total == 0) return Status();
  const int64_t blocks = (total + 7) / 8;
  detail::launch_pdl(pdl_all(), q8_0_act_kernel, static_cast<unsigned>(blocks), 256, 0, stream, x, x_stride, total, nb,
                     out, out_stride);
  return launch_status("quantize_q8_0_act", n, nb, n_rows);
}

Status quantize_q8_0_act_grouped(const float* const* x, int n_groups, int64_t x_stride, int n_rows, int64_t n,
                                 BlockQ8_0Act* out, int64_t out_stride, int64_t group_stride, Stream stream) {
  const int64_t nb = n / quant::kQK8_0;
  if (x_stride == 0) x_stride = n;
  if (out_stride == 0) out_stride = nb;
  Status s = check_rows("quantize_q8_0_act_grouped", n, quant::kQK8_0, n_rows, x_stride, out_stride, nb);
  if (!s.ok()) return s;
  if (n_groups < 0 || n_groups > kMaxMatvecGroups || (n_groups > 1 && group_stride < out_stride * n_rows))
    return invalid_argument("cuda: quantize_q8_0_act_grouped: %d groups (at most %d), group_stride %lld >= "
                            "%lld blocks", n_groups, kMaxMatvecGroups, static_cast<long long>(group_stride),
                            static_cast<long long>(out_stride * n_rows));
  const int64_t total = nb * n_rows;
  if (total == 0 || n_groups == 0) return Status();
  ActGroups groups{};
  for (int g = 0; g < n_groups; ++g) groups.x[g] = x[g];
  const int64_t blocks = (total + 7) / 8;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(n_groups));
  detail::launch_pdl(pdl_all(), q8_0_act_grouped_kernel, grid, 256, 0, stream, groups, x_stride, total, nb, out,
                     out_stride, group_stride);
  return launch_status("quantize_q8_0_act_grouped", n, nb, n_rows);
}

Status quantize_q8_k_act(const float* x, int64_t x_stride, int n_rows, int64_t n, BlockQ8K* out,
                         int64_t out_stride, Stream stream) {
  const int64_t nb = n / quant::kQKK;
  if (x_stride == 0) x_stride = n;
  if (out_stride == 0) out_stride = nb;
  Status s = check_rows("quantize_q8_k_act", n, quant::kQKK, n_rows, x_stride, out_stride, nb);
  if (!s.ok()) return s;
  const int64_t total = nb * n_rows;
  if (total == 0) return Status();
  const int64_t blocks = (total + 7) / 8;
  detail::launch_pdl(pdl_all(), q8_k_act_kernel, static_cast<unsigned>(blocks), 256, 0, stream, x, x_stride, total, nb,
                     out, out_stride);
  return launch_status("quantize_q8_k_act", n, nb, n_rows);
}

}  // namespace ds4::cuda
