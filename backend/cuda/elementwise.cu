// backend/cuda/elementwise.cu — the copy-like and elementwise ops on the device: embed, add,
// hc_mean, swiglu, get_rows, argmax, fill_f32, copy_many.
//
// Role: the ops.h launchers of these ops, bit-identical to backend/cpu/cpu_backend.cpp.
// Every output element is one fixed expression of its inputs (the CPU's, operation by
// operation: hc_mean's acc = x0, acc += x1, ... then · (1/n_hc); SwiGLU's std::min / max
// order and detmath's SiLU; quant/dequant.cpp's products per element for get_rows), so the
// thread layout cannot change a bit. argmax follows core/reduce.h's top_two: the first index
// of the maximum among non-NaN values other than the excluded id (an order-free definition,
// reduced as a tree), the first allowed index when every value is NaN.
// Invariants: no allocation, asynchronous on the stream, shapes validated on the host.
#include <cstring>

#include "backend/cuda/common.cuh"
#include "backend/row_math.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/pdl.cuh"
#include "quant/iq2_tables.h"

namespace ds4::cuda {

namespace {

using backend::GgmlType;
using detail::f16_to_f32;

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 64 ? b : 65535 * 64);
}

__global__ void fill_kernel(float* __restrict__ dst, int64_t n, float v) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = v;
}

struct CopyBatch {
  backend::CopyRegion r[kCopyBatch];
};

// Region blockIdx.y of the batch, its bytes strided over the blockIdx.x blocks: 16-byte words
// when both ends and the length allow, else 4-byte words, else bytes (a copy is exact at any width).
__global__ void copy_many_kernel(const __grid_constant__ CopyBatch b) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  const backend::CopyRegion& c = b.r[blockIdx.y];
  const auto d = reinterpret_cast<uintptr_t>(c.dst), s = reinterpret_cast<uintptr_t>(c.src);
  const size_t first = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const size_t step = static_cast<size_t>(gridDim.x) * blockDim.x;
  if (((d | s | c.bytes) & 15u) == 0) {
    const uint4* src = reinterpret_cast<const uint4*>(c.src);
    uint4* dst = reinterpret_cast<uint4*>(c.dst);
    for (size_t i = first; i < c.bytes / 16; i += step) dst[i] = src[i];
  } else if (((d | s | c.bytes) & 3u) == 0) {
    const uint32_t* src = reinterpret_cast<const uint32_t*>(c.src);
    uint32_t* dst = reinterpret_cast<uint32_t*>(c.dst);
    for (size_t i = first; i < c.bytes / 4; i += step) dst[i] = src[i];
  } else {
    const uint8_t* src = static_cast<const uint8_t*>(c.src);
    uint8_t* dst = static_cast<uint8_t*>(c.dst);
    for (size_t i = first; i < c.bytes; i += step) dst[i] = src[i];
  }
}

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = a[i] + b[i];
}

__global__ void swiglu_kernel(const float* gate, const float* up, float* out, int64_t n, float c) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = backend::rowmath::swiglu_value(gate[i], up[i], c);
}

// grid (n_rows, chunks of n_embd): every stream of row i = f16 table row tokens[i].
__global__ void embed_kernel(const uint8_t* __restrict__ table, size_t row_bytes, const int32_t* __restrict__ tokens,
                             int n_hc, int64_t n_embd, float* __restrict__ out) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  const int64_t i = blockIdx.x;
  const int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (d >= n_embd) return;
  const uint8_t* row = table + static_cast<size_t>(tokens[i]) * row_bytes;
  const float v = f16_to_f32(detail::load_u16(row + 2 * d));
  float* o = out + i * n_hc * n_embd;
  for (int h = 0; h < n_hc; ++h) o[h * n_embd + d] = v;
}

// grid (n_rows, chunks): out[i][d] = (x0 + x1 + ... in stream order) · inv.
__global__ void hc_mean_kernel(const float* __restrict__ x, int n_hc, int64_t n_embd, float inv,
                               float* __restrict__ out, int64_t out_stride) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  const int64_t i = blockIdx.x;
  const int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (d >= n_embd) return;
  const float* xr = x + i * n_hc * n_embd;
  float acc = xr[d];
  for (int h = 1; h < n_hc; ++h) acc += xr[h * n_embd + d];
  out[i * out_stride + d] = acc * inv;
}

// ---- get_rows: quant::dequantize_row, one element per thread --------------------------------

struct Iq2Tables {
  uint64_t grid[256];
  uint8_t signs[128];
};

__device__ __forceinline__ uint32_t load_u32_bytes(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

template <int kType>
__device__ __forceinline__ float dequant_elem(const uint8_t* row, int64_t j, const Iq2Tables& t) {
  if constexpr (kType == static_cast<int>(GgmlType::kF32)) {
    return __uint_as_float(load_u32_bytes(row + 4 * j));
  } else if constexpr (kType == static_cast<int>(GgmlType::kF16)) {
    return f16_to_f32(detail::load_u16(row + 2 * j));
  } else if constexpr (kType == static_cast<int>(GgmlType::kBF16)) {
    return __uint_as_float(static_cast<uint32_t>(detail::load_u16(row + 2 * j)) << 16);
  } else if constexpr (kType == static_cast<int>(GgmlType::kQ8_0)) {
    const uint8_t* b = row + (j / 32) * 34;
    const float d = f16_to_f32(detail::load_u16(b));
    return static_cast<float>(static_cast<int8_t>(b[2 + j % 32])) * d;
  } else if constexpr (kType == static_cast<int>(GgmlType::kQ8_K)) {
    const uint8_t* b = row + (j / 256) * 292;
    const float d = __uint_as_float(load_u32_bytes(b));
    return d * static_cast<float>(static_cast<int8_t>(b[4 + j % 256]));
  } else if constexpr (kType == static_cast<int>(GgmlType::kQ2_K)) {
    const uint8_t* b = row + (j / 256) * 84;  // scales[16], qs[64], d, dmin
    const int e = static_cast<int>(j % 256);
    const int half = e / 128, jj = (e % 128) / 32, l = e % 32;
    const float d = f16_to_f32(detail::load_u16(b + 80));
    const float dmin = f16_to_f32(detail::load_u16(b + 82));
    const int sb = 8 * half + 2 * jj + (l >= 16 ? 1 : 0);
    const float dl = d * static_cast<float>(b[sb] & 15);
    const float ml = dmin * static_cast<float>(b[sb] >> 4);
    const int q = (b[16 + 32 * half + l] >> (2 * jj)) & 3;
    return dl * static_cast<float>(q) - ml;
  } else if constexpr (kType == static_cast<int>(GgmlType::kQ4_K)) {
    const uint8_t* b = row + (j / 256) * 144;  // d, dmin, scales[12], qs[128]
    const int e = static_cast<int>(j % 256);
    const int jj = e / 32, l = e % 32;
    const float d = f16_to_f32(detail::load_u16(b));
    const float dmin = f16_to_f32(detail::load_u16(b + 2));
    const uint8_t* scales = b + 4;
    int sc, m;  // quant::q4_k_scale_min
    if (jj < 4) {
      sc = scales[jj] & 63;
      m = scales[jj + 4] & 63;
    } else {
      sc = (scales[jj + 4] & 15) | ((scales[jj - 4] >> 6) << 4);
      m = (scales[jj + 4] >> 4) | ((scales[jj] >> 6) << 4);
    }
    const float dl = d * static_cast<float>(sc);
    const float ml = dmin * static_cast<float>(m);
    const int q = (b[16 + 32 * (jj >> 1) + l] >> (4 * (jj & 1))) & 15;
    return dl * static_cast<float>(q) - ml;
  } else {  // IQ2_XXS: d, then 8 groups of (aux0, aux1) u32 pairs
    const uint8_t* b = row + (j / 256) * 66;
    const int e = static_cast<int>(j % 256);
    const int g = e / 32, k = (e % 32) / 8, i = e % 8;
    const float d = f16_to_f32(detail::load_u16(b));
    const uint32_t aux0 = load_u32_bytes(b + 2 + 8 * g);
    const uint32_t aux1 = load_u32_bytes(b + 2 + 8 * g + 4);
    const float db = (d * (0.5f + static_cast<float>(aux1 >> 28))) * 0.25f;
    const uint64_t grid = t.grid[(aux0 >> (8 * k)) & 0xffu];
    const uint8_t signs = t.signs[(aux1 >> (7 * k)) & 127u];
    const float mag = static_cast<float>((grid >> (8 * i)) & 0xffu);
    const float sign = ((signs >> i) & 1u) ? -1.0f : 1.0f;
    return (db * mag) * sign;
  }
}

// grid (n_rows, chunks of n_in).
// An id outside [0, n_out) (a caller bug: the CPU would read out of bounds) gives a NaN row.
template <int kType>
__global__ void get_rows_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int64_t n_in, int64_t n_out,
                                const int32_t* __restrict__ ids, float* __restrict__ out, int64_t out_stride,
                                const __grid_constant__ Iq2Tables tables) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  const int64_t i = blockIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= n_in) return;
  const int32_t id = ids[i];
  if (id < 0 || id >= n_out) {
    out[i * out_stride + j] = __int_as_float(0x7fffffff);
    return;
  }
  const uint8_t* row = w + static_cast<size_t>(id) * row_bytes;
  out[i * out_stride + j] = dequant_elem<kType>(row, j, tables);
}

// ---- argmax -----------------------------------------------------------------------------------

struct Best {
  float v;
  int64_t id;  // -1: no non-NaN value seen
};

// The better of two candidates: larger value, then smaller id (an order-free choice).
__device__ __forceinline__ Best better(const Best& a, const Best& b) {
  if (a.id < 0) return b;
  if (b.id < 0) return a;
  if (b.v > a.v || (!(a.v > b.v) && b.id < a.id)) return b;
  return a;
}

// One block of 1,024 threads per row. The row is read by 16-byte loads, four in flight per
// thread (a 129,280-logit head row in 8 rounds; one 4-byte load per thread and round took 63 µs
// on an H100): the loop's latency, not its bytes, bounded the one-block form. The choice is
// order-free (better() is a total order on (value, id)), so any split of the row gives the same id.
constexpr int kArgmaxThreads = 1024;
constexpr int kArgmaxVecs = 4;  // float4 loads in flight per thread

__device__ __forceinline__ void argmax_take(Best* b, float v, int64_t i, int64_t excluded) {
  if (i != excluded && !isnan(v) && (b->id < 0 || v > b->v || (!(b->v > v) && i < b->id))) *b = Best{v, i};
}

__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* __restrict__ x, int64_t n,
                                                                int64_t stride, int64_t excluded,
                                                                int32_t* __restrict__ out) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  __shared__ Best part[kArgmaxThreads / 32];
  const float* xr = x + static_cast<int64_t>(blockIdx.x) * stride;
  Best b{0.0f, -1};
  // The scalar head up to the first 16-byte boundary, the float4 body, the scalar tail.
  const int64_t mis = static_cast<int64_t>((reinterpret_cast<uintptr_t>(xr) / 4) % 4);
  const int64_t head = mis == 0 ? 0 : (4 - mis < n ? 4 - mis : n);
  const int64_t n4 = (n - head) / 4;
  if (threadIdx.x < head) argmax_take(&b, xr[threadIdx.x], threadIdx.x, excluded);
  const float4* x4 = reinterpret_cast<const float4*>(xr + head);
  constexpr int64_t kStep = static_cast<int64_t>(kArgmaxThreads) * kArgmaxVecs;
  for (int64_t q0 = threadIdx.x; q0 < n4; q0 += kStep) {
    float4 v[kArgmaxVecs];
#pragma unroll
    for (int u = 0; u < kArgmaxVecs; ++u) {
      const int64_t q = q0 + u * kArgmaxThreads;
      const float nan = __int_as_float(0x7fc00000);  // skipped by argmax_take
      v[u] = q < n4 ? __ldg(x4 + q) : make_float4(nan, nan, nan, nan);
    }
#pragma unroll
    for (int u = 0; u < kArgmaxVecs; ++u) {
      const int64_t i = head + 4 * (q0 + u * kArgmaxThreads);
      argmax_take(&b, v[u].x, i, excluded);
      argmax_take(&b, v[u].y, i + 1, excluded);
      argmax_take(&b, v[u].z, i + 2, excluded);
      argmax_take(&b, v[u].w, i + 3, excluded);
    }
  }
  for (int64_t i = head + 4 * n4 + threadIdx.x; i < n; i += kArgmaxThreads) argmax_take(&b, xr[i], i, excluded);
  for (int s = 16; s >= 1; s /= 2) {
    Best o;
    o.v = __shfl_down_sync(detail::kFullMask, b.v, s);
    o.id = __shfl_down_sync(detail::kFullMask, b.id, s);
    b = better(b, o);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) part[warp] = b;
  __syncthreads();
  if (threadIdx.x != 0) return;
  b = part[0];
  for (int k = 1; k < kArgmaxThreads / 32; ++k) b = better(b, part[k]);
  int64_t id = b.id;
  if (id < 0) {  // every allowed value NaN: the first allowed index (-1 when none)
    id = excluded == 0 ? 1 : 0;
    if (id >= n) id = -1;
  }
  out[blockIdx.x] = static_cast<int32_t>(id);
}

bool row_type_supported(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ8_K:
    case GgmlType::kQ2_K:
    case GgmlType::kQ4_K:
    case GgmlType::kIQ2_XXS:
      return true;
    default:
      return false;
  }
}

int64_t block_elems(GgmlType t) {
  switch (t) {
    case GgmlType::kQ8_0:
      return 32;
    case GgmlType::kQ8_K:
    case GgmlType::kQ2_K:
    case GgmlType::kQ4_K:
    case GgmlType::kIQ2_XXS:
      return 256;
    default:
      return 1;
  }
}

}  // namespace

Status fill_f32(float* dst, size_t n, float value, Stream stream) {
  if (n == 0) return Status();
  detail::launch_pdl(pdl_all(), fill_kernel, blocks_for(static_cast<int64_t>(n)), kThreads, 0, stream, dst,
                     static_cast<int64_t>(n), value);
  return launch_status("fill_f32", static_cast<int64_t>(n), static_cast<int64_t>(n), 1);
}

Status copy_many(const backend::CopyRegion* regions, int n, Stream stream) {
  for (int b0 = 0; b0 < n; b0 += kCopyBatch) {
    const int nb = n - b0 < kCopyBatch ? n - b0 : kCopyBatch;
    CopyBatch batch{};
    size_t most = 0;
    for (int i = 0; i < nb; ++i) {
      batch.r[i] = regions[b0 + i];
      most = batch.r[i].bytes > most ? batch.r[i].bytes : most;
    }
    if (most == 0) continue;
    // Enough blocks that the largest region moves 16 bytes per thread per block pass, at most 64.
    const size_t per_block = static_cast<size_t>(kThreads) * 16;
    const unsigned bx = static_cast<unsigned>(most / per_block + 1 < 64 ? most / per_block + 1 : 64);
    detail::launch_pdl(pdl_all(), copy_many_kernel, dim3(bx, static_cast<unsigned>(nb)), kThreads, 0, stream, batch);
    const Status s = launch_status("copy_many", static_cast<int64_t>(most), static_cast<int64_t>(most), nb);
    if (!s.ok()) return s;
  }
  return Status();
}

Status add(const backend::AddParams& p, Stream stream) {
  if (p.n < 0) return invalid_argument("cuda: add: bad length %lld", static_cast<long long>(p.n));
  if (p.n == 0) return Status();
  detail::launch_pdl(pdl_all(), add_kernel, blocks_for(p.n), kThreads, 0, stream, p.a, p.b, p.out, p.n);
  return launch_status("add", p.n, p.n, 1);
}

Status swiglu(const backend::SwigluParams& p, Stream stream) {
  if (p.n < 0) return invalid_argument("cuda: swiglu: bad length %lld", static_cast<long long>(p.n));
  if (p.n == 0) return Status();
  detail::launch_pdl(pdl_all(), swiglu_kernel, blocks_for(p.n), kThreads, 0, stream, p.gate, p.up, p.out, p.n, p.clamp);
  return launch_status("swiglu", p.n, p.n, 1);
}

Status embed(const backend::EmbedParams& p, Stream stream) {
  if (p.n_hc < 1 || p.n_embd <= 0 || p.n_rows < 0 || p.row_bytes < static_cast<size_t>(2 * p.n_embd) ||
      p.row_bytes % 2 != 0 || reinterpret_cast<uintptr_t>(p.table) % 2 != 0)
    return invalid_argument("cuda: embed: bad shape (n_hc %d, n_embd %lld, rows %d, row_bytes %zu: need an "
                            "even row_bytes >= 2·n_embd)", p.n_hc, static_cast<long long>(p.n_embd), p.n_rows,
                            p.row_bytes);
  if (p.n_rows == 0) return Status();
  const dim3 grid(static_cast<unsigned>(p.n_rows), static_cast<unsigned>((p.n_embd + kThreads - 1) / kThreads));
  detail::launch_pdl(pdl_all(), embed_kernel, grid, kThreads, 0, stream, p.table, p.row_bytes, p.tokens, p.n_hc,
                     p.n_embd, p.out);
  return launch_status("embed", p.n_embd, p.n_hc * p.n_embd, p.n_rows);
}

Status hc_mean(const backend::HcMeanParams& p, Stream stream) {
  if (p.n_hc < 1 || p.n_embd <= 0 || p.n_rows < 0 || p.out_stride < p.n_embd)
    return invalid_argument("cuda: hc_mean: bad shape (n_hc %d, n_embd %lld, rows %d, out_stride %lld >= n_embd)",
                            p.n_hc, static_cast<long long>(p.n_embd), p.n_rows,
                            static_cast<long long>(p.out_stride));
  if (p.n_rows == 0) return Status();
  const float inv = 1.0f / static_cast<float>(p.n_hc);
  const dim3 grid(static_cast<unsigned>(p.n_rows), static_cast<unsigned>((p.n_embd + kThreads - 1) / kThreads));
  detail::launch_pdl(pdl_all(), hc_mean_kernel, grid, kThreads, 0, stream, p.x, p.n_hc, p.n_embd, inv, p.out,
                     p.out_stride);
  return launch_status("hc_mean", p.n_hc * p.n_embd, p.n_embd, p.n_rows);
}

Status argmax(const backend::ArgmaxParams& p, Stream stream) {
  // Row i at x + i·stride, as the CPU reads it.
  const int64_t stride = p.stride;
  if (p.n < 0 || p.n > INT32_MAX || stride < 0 || p.n_rows < 0)
    return invalid_argument("cuda: argmax: bad shape (n %lld, stride %lld, rows %d)",
                            static_cast<long long>(p.n), static_cast<long long>(p.stride), p.n_rows);
  if (p.n_rows == 0) return Status();
  if (p.margin != nullptr) {
    return top_two_rows(p.x, p.n, stride, p.n_rows, p.excluded, p.out, p.margin, stream);
  }
  detail::launch_pdl(pdl_all(), argmax_kernel, static_cast<unsigned>(p.n_rows), kArgmaxThreads, 0, stream, p.x, p.n,
                     stride, p.excluded, p.out);
  return launch_status("argmax", p.n, 1, p.n_rows);
}

Status get_rows(const backend::GetRowsParams& p, Stream stream) {
  const GgmlType t = p.w.type;
  if (!row_type_supported(t))
    return unsupported("cuda: get_rows: weight type %u is not supported (f32 f16 bf16 q8_0 q8_K q2_K q4_K "
                       "iq2_xxs)", static_cast<unsigned>(t));
  if (p.w.n_in <= 0 || p.w.n_in % block_elems(t) != 0 || p.n_rows < 0 || p.out_stride < p.w.n_in)
    return invalid_argument("cuda: get_rows: bad shape (type %u, n_in %lld a multiple of %lld, rows %d, "
                            "out_stride %lld >= n_in)", static_cast<unsigned>(t),
                            static_cast<long long>(p.w.n_in), static_cast<long long>(block_elems(t)), p.n_rows,
                            static_cast<long long>(p.out_stride));
  if (p.n_rows == 0) return Status();
  Iq2Tables tables;
  if (t == GgmlType::kIQ2_XXS) {
    std::memcpy(tables.grid, quant::kIq2XxsGrid, sizeof tables.grid);
    std::memcpy(tables.signs, quant::kIq2Signs, sizeof tables.signs);
  } else {
    std::memset(&tables, 0, sizeof tables);
  }
  const dim3 grid(static_cast<unsigned>(p.n_rows), static_cast<unsigned>((p.w.n_in + kThreads - 1) / kThreads));
  switch (t) {
#define DS4_CASE(T)                                                                                                    \
  case GgmlType::T:                                                                                                    \
    detail::launch_pdl(pdl_all(), get_rows_kernel<static_cast<int>(GgmlType::T)>, grid, kThreads, 0, stream, p.w.data, \
                       p.w.row_bytes, p.w.n_in, p.w.n_out, p.ids, p.out, p.out_stride, tables);                        \
    break;
    DS4_CASE(kF32) DS4_CASE(kF16) DS4_CASE(kBF16) DS4_CASE(kQ8_0) DS4_CASE(kQ8_K) DS4_CASE(kQ2_K)
    DS4_CASE(kQ4_K) DS4_CASE(kIQ2_XXS)
#undef DS4_CASE
    default:
      break;
  }
  return launch_status("get_rows", p.w.n_in, p.w.n_in, p.n_rows);
}

}  // namespace ds4::cuda
