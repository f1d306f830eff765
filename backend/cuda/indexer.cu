// backend/cuda/indexer.cu — indexer_select of backend/cuda/ops.h: indexer scores and the
// top-k mask of each query (ds4-architecture.md §4.5).
//
// Role: device twin of cpu_backend.cpp's indexer_select (scores) and top_k_mask, bit for bit.
// Invariants:
//  * Rows are FP4 stores (the State's indexer rows: codes + per-32 exponent bytes, kv_sim_hd.h),
//    decoded to exactly the values of the former f16 rows (kvsim::fp4_stored_value).
//  * Score of row c: sc = 0; for each head k in order: d = dot_f32(row, q_k) (the canonical
//    64-lane order on a half-warp, attention_common.cuh), sc = sc + (d > 0 ? d : 0)·w[k] on
//    lane 0 — the CPU's expression. No FMA (the folder builds with --fmad=false).
//  * Top-k: exactly top_k rows by (score desc, index asc) — the set std::nth_element picks with
//    the CPU's comparator — by a radix select on an order-preserving 32-bit key (−0 keyed as
//    +0: the CPU's comparator ties them), ties at the threshold resolved by index with an
//    ordered block scan. NaN scores have no defined order on the CPU; here they rank by key.
//  * Queries are independent (their own rows prefix, scratch and mask); the host array is
//    passed by value, kIndexerBatch queries per launch. `order` scratch is not used.
#include <cstdio>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/common.cuh"
#include "backend/cuda/kv_sim_hd.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/pdl.cuh"

namespace ds4::cuda {

namespace {

using attn::block_scan_counts;
using attn::launch_result;
using backend::IndexerSelectParams;
using detail::kFullMask;

constexpr int kIdxThreads = 256;   // scores: a half-warp per row
constexpr int kTopThreads = 1024;  // top-k: one block per query
constexpr int kFastDim = 128;      // indexer head_dim whose rows are kept in registers
static_assert(kFastDim % 64 == 0, "the register path has no 64-lane tail");

// Queries per launch: a prefill group's rows (up to 32 in one launch pair; ~3 KB of kernel
// parameters).
constexpr int kIndexerBatch = 32;
struct IndexerBatch {
  IndexerSelectParams q[kIndexerBatch];
};

using kvsim::fp4_row_bytes;

// Element e of an FP4 row store of n values (kv_sim_hd.h): the f16 row's value, exactly.
__device__ __forceinline__ float load_fp4(const uint8_t* row, int n, int e) {
  const uint32_t byte = __ldg(row + e / 2);
  const uint32_t code = (e & 1) != 0 ? byte >> 4 : byte & 15u;
  return kvsim::fp4_stored_value(code, __ldg(row + n / 2 + e / kvsim::kFp4Block));
}


// Scores: blockIdx.y picks the query; a half-warp per indexer row, the query's heads (in
// dynamic shared memory, then its weights) dotted in head order, the score summed on lane 0.
__global__ void __launch_bounds__(kIdxThreads) indexer_scores_kernel(const __grid_constant__ IndexerBatch b) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  extern __shared__ float smem[];
  const IndexerSelectParams& p = b.q[blockIdx.y];
  const int nq = p.n_head * p.head_dim;
  for (int i = threadIdx.x; i < nq; i += kIdxThreads) smem[i] = p.q[i];
  for (int i = threadIdx.x; i < p.n_head; i += kIdxThreads) smem[nq + i] = p.w[i];
  __syncthreads();
  const float* w = smem + nq;
  const int64_t row_bytes = fp4_row_bytes(p.head_dim);
  const int lane = threadIdx.x & 31, hl = lane & 15, half = lane >> 4;
  const int64_t halves = static_cast<int64_t>(gridDim.x) * (kIdxThreads / 16);
  const int64_t first = (static_cast<int64_t>(blockIdx.x) * kIdxThreads + (threadIdx.x & ~31)) / 16;
  // Warp-uniform loop: both halves run every iteration (the shuffles need the whole warp).
  for (int64_t base = first; base < p.n_rows; base += halves) {
    const int64_t c = base + half;
    const bool valid = c < p.n_rows;
    const uint8_t* row = p.rows + (valid ? c : 0) * row_bytes;  // FP4 store, decoded exactly
    float sc = 0.0f;
    if (p.head_dim == kFastDim) {
      // The row's lane elements stay in registers across the heads: the same products and
      // adds as half_dot64 (element g·16 + hl belongs to partial c = g % 4, g in order; then
      // the tree). kFastDim is a multiple of 64: no tail.
      float r[kFastDim / 16];
#pragma unroll
      for (int g = 0; g < kFastDim / 16; ++g) r[g] = load_fp4(row, kFastDim, g * 16 + hl);
      for (int k = 0; k < p.n_head; ++k) {
        const float* qk = smem + k * kFastDim;
        float d4[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int g = 0; g < kFastDim / 16; ++g) d4[g % 4] = __fadd_rn(d4[g % 4], __fmul_rn(r[g], qk[g * 16 + hl]));
        const float d = attn::tree64_half(d4);
        const float t = (d > 0.0f ? d : 0.0f) * w[k];
        sc = sc + t;
      }
    } else {
      for (int k = 0; k < p.n_head; ++k) {
        const float d = attn::half_dot64([&](int e) { return load_fp4(row, p.head_dim, e); },
                                          smem + static_cast<int64_t>(k) * p.head_dim, p.head_dim, hl);
        const float t = (d > 0.0f ? d : 0.0f) * w[k];
        sc = sc + t;
      }
    }
    if (valid && hl == 0) p.scores[c] = sc;
  }
}

// The order-preserving key of a score: larger score, larger key; −0 and +0 share a key.
__device__ __forceinline__ uint32_t score_key(float v) {
  const uint32_t u = kvsim::f32_bits(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
}

// Top-k mask of one query per block: four 8-bit radix passes find the key T of the top_k-th
// row and how many rows keyed T to take; the final pass selects rows keyed above T and the
// first `need` keyed T in index order (an ordered block scan per chunk).
__global__ void __launch_bounds__(kTopThreads) indexer_topk_kernel(const __grid_constant__ IndexerBatch b) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  __shared__ int hist[256];
  __shared__ int warp_sums[32];
  __shared__ uint32_t s_prefix;
  __shared__ int s_need;
  const IndexerSelectParams& p = b.q[blockIdx.x];
  const int64_t n = p.n_rows;
  const int tid = threadIdx.x;
  if (p.top_k >= n) {
    for (int64_t c = tid; c < n; c += kTopThreads) p.allowed[c] = 1;
    return;
  }
  if (tid == 0) {
    s_prefix = 0;
    s_need = p.top_k;
  }
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += kTopThreads) hist[i] = 0;
    __syncthreads();
    const uint32_t prefix = s_prefix;
    // Warp-uniform trip count; lanes that share a bin add once through their leader (scores
    // crowd into few bins, and same-address shared atomics serialize). Counts are exact.
    for (int64_t c0 = 0; c0 < n; c0 += kTopThreads * 4) {
      uint32_t k[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t c = c0 + u * kTopThreads + tid;
        k[u] = c < n ? score_key(p.scores[c]) : 0u;
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int64_t c = c0 + u * kTopThreads + tid;
        const bool in = c < n && (k[u] & mask) == prefix;
        const uint32_t bin = in ? (k[u] >> shift) & 0xffu : 256u;
        const unsigned same = __match_any_sync(kFullMask, bin);
        if (in && (threadIdx.x & 31) == __ffs(same) - 1) atomicAdd(&hist[bin], __popc(same));
      }
    }
    __syncthreads();
    if (tid == 0) {
      int need = s_need, above = 0;
      for (int bin = 255; bin >= 0; --bin) {
        if (above + hist[bin] >= need) {
          s_prefix = prefix | (static_cast<uint32_t>(bin) << shift);
          s_need = need - above;
          break;
        }
        above += hist[bin];
      }
    }
    mask |= 0xffu << shift;
    __syncthreads();
  }
  const uint32_t thr = s_prefix;
  const int need = s_need;
  int taken = 0;  // rows keyed thr before this chunk
  for (int64_t c0 = 0; c0 < n; c0 += kTopThreads) {
    const int64_t c = c0 + tid;
    const uint32_t k = c < n ? score_key(p.scores[c]) : 0u;
    const bool eq = c < n && k == thr;
    int total = 0;
    const int rank = block_scan_counts(eq ? 1 : 0, warp_sums, &total);
    if (c < n) p.allowed[c] = (k > thr || (eq && taken + rank < need)) ? 1 : 0;
    taken += total;
  }
}

}  // namespace

Status indexer_select(const IndexerSelectParams* p, int n, Stream stream) {
  for (int b0 = 0; b0 < n; b0 += kIndexerBatch) {
    const int nb = n - b0 < kIndexerBatch ? n - b0 : kIndexerBatch;
    IndexerBatch batch{};
    int64_t max_rows = 0;
    size_t smem = 0;
    for (int i = 0; i < nb; ++i) {
      const IndexerSelectParams& q = p[b0 + i];
      if (q.n_rows <= 0 || q.n_head <= 0 || q.head_dim <= 0 || q.head_dim % kvsim::kFp4Block != 0 || q.top_k <= 0 ||
          q.n_rows > INT32_MAX ||
          q.q == nullptr || q.w == nullptr || q.rows == nullptr || q.scores == nullptr || q.allowed == nullptr)
        return invalid_argument("cuda: indexer_select: unsupported arguments (query %d: rows %lld, heads %d x %d, "
                                "top_k %d; head_dim a multiple of 32)",
                                b0 + i, static_cast<long long>(q.n_rows), q.n_head, q.head_dim, q.top_k);
      batch.q[i] = q;
      max_rows = q.n_rows > max_rows ? q.n_rows : max_rows;
      const size_t bytes = (static_cast<size_t>(q.n_head) * q.head_dim + q.n_head) * sizeof(float);
      smem = bytes > smem ? bytes : smem;
    }
    char shapes[160];
    std::snprintf(shapes, sizeof shapes, "%d queries, up to %lld rows, heads %d x %d, top_k %d", nb,
                  static_cast<long long>(max_rows), batch.q[0].n_head, batch.q[0].head_dim, batch.q[0].top_k);
    if (smem > 48 * 1024) {
      if (cudaFuncSetAttribute(indexer_scores_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(smem)) != cudaSuccess) {
        (void)cudaGetLastError();
        return invalid_argument("cuda: indexer_select: the query (%zu bytes) does not fit shared memory (%s)", smem,
                                shapes);
      }
    }
    const int64_t rows_per_block = kIdxThreads / 16;
    int64_t gx = (max_rows + rows_per_block - 1) / rows_per_block;
    gx = gx > 8192 ? 8192 : gx;
    detail::launch_pdl(pdl_all(), indexer_scores_kernel, dim3(static_cast<unsigned>(gx), static_cast<unsigned>(nb)),
                       kIdxThreads, smem, stream, batch);
    const Status scored = launch_result("indexer_select scores", shapes);
    if (!scored.ok()) return scored;
    detail::launch_pdl(pdl_all(), indexer_topk_kernel, nb, kTopThreads, 0, stream, batch);
    const Status selected = launch_result("indexer_select top-k", shapes);
    if (!selected.ok()) return selected;
  }
  return Status();
}

}  // namespace ds4::cuda
