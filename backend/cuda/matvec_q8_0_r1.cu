// backend/cuda/matvec_q8_0_r1.cu — the staged Q8_0 matvec of one activation row (decode):
// q8_0_r1_kernel and its grouped twin, and the Q8_0R1Kernel choice of which r = 1 kernel runs.
//
// Role: matvec_r1.h's r1_try_launch / r1_try_launch_grouped for matvec_quant.cu's dispatch, and
// cuda_kernels.h's set_q8_0_r1_kernel / q8_0_r1_kernel / matvec_q8_0_r1_f32 /
// matvec_q8_0_grouped_r1_f32 (the f32 row quantized inside the kernel: one launch per matmul).
// Under Q8_0R1Kernel::kAuto (the default) the staged kernel runs the output head only (n_out >=
// kR1StagedMinRows), where an H200 measured it faster, and the wide kernel (matvec_q8_0_wide.cu)
// the rows below it where it takes the shape (kR1WideInAuto); kStaged / kStagedPrequant the
// staged kernel everywhere it takes the shape; kWide the wide kernel; kWideFused the wide one,
// quantizing the f32 row of a one-row matmul itself; kWarp neither. Under kAuto a lone
// one-row matmul of <= kR1WideFusedMaxIn inputs below the head is the fused wide launch.
// Layout at q8_0_r1_rows.
// Bit-exactness: each block's isum is exact (dp4a), its float term is Q8_0Fmt::terms'
// expression, and one lane per row adds the row's terms in block order (quant::dot_q8_0's
// sequence), so every choice gives the warp kernels' bits. --fmad=false.
// Invariants: no allocation; the per-device opt-in of dynamic shared memory is done once.
#include <atomic>
#include <type_traits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cp_async.cuh"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/matvec_r1.h"
#include "backend/cuda/pdl.cuh"

namespace ds4::cuda {

namespace {

using quant::BlockQ8_0Act;
using detail::f16_to_f32;

// ---- Q8_0 × one activation row, staged (q8_0_r1_kernel) -----------------------------------
// Why: the warp kernels above spend most of a row's time on its sequential float sum (one lane
// of 32 adds 128 terms from shared memory while the warp issues no loads) and load 4 bytes per
// lane per instruction (one block per lane in flight per step); the small matrices leave most
// SMs idle for a DRAM round trip. Here a warp tiles RW rows over its lanes: lane (r = lane %
// RW, q = lane / RW) owns 8 consecutive blocks of row r in each step of 8·(32 / RW) blocks.
// A CTA of nw warps covers RW rows; warp w takes steps w, w + nw, ... of the row (its stage
// ring of kStages steps is filled by 16-byte cp.async, all of a warp's steps in flight when
// they fit), the CTA's activation row is copied to shared memory once (or, given as f32, is
// quantized there by the CTA: the fused matmul, no quantize launch). A lane reads its 8
// blocks (272 bytes, 16-byte aligned: rows are 16-byte multiples, the kernel's precondition)
// as 17 16-byte words, computes each block's exact isum (8 dp4a) and the CPU's float term
// s = f16(w.d) · x.d, t = s · (float)isum into the CTA's term buffer; after the last step one
// lane per row adds the row's nb terms in block order: quant::dot_q8_0's sequence, the same
// bits as the warp kernels. Bank conflicts: a stage row is kR1RowPieces 16-byte pieces (odd
// for RW = 8, ≡ 2 mod 8 for RW = 4, ≡ 4 mod 8 for RW = 2), so each quarter-warp's 16-byte
// reads hit 8 distinct bank groups; activation quants sit at 8b + 4·(b / 8) words, so the
// lanes' different blocks fall on different banks.
constexpr int kR1StageBytes = 8832;  // RW rows × kR1RowPieces × 16 (the same for every RW)
template <int RW>
__host__ __device__ constexpr int r1_step() { return 8 * (32 / RW); }  // blocks per warp step
template <int RW>
__host__ __device__ constexpr int r1_row_pieces() { return 17 * (32 / RW) + (RW == 8 ? 1 : RW == 4 ? 2 : 4); }
static_assert(8 * r1_row_pieces<8>() * 16 == kR1StageBytes && 4 * r1_row_pieces<4>() * 16 == kR1StageBytes &&
              2 * r1_row_pieces<2>() * 16 == kR1StageBytes, "stage size");
__host__ __device__ constexpr int r1_act_q_words(int nb) { return 8 * nb + 4 * ((nb + 7) / 8); }
__host__ __device__ constexpr int r1_ts_stride(int nb) { return (nb + 31) / 32 * 32 + 1; }
size_t r1_smem_bytes(int nb, int rw, int nw, int stages) {
  return static_cast<size_t>(nw) * stages * kR1StageBytes +
         4 * (static_cast<size_t>(r1_act_q_words(nb)) + nb + static_cast<size_t>(rw) * r1_ts_stride(nb));
}

// X = BlockQ8_0Act: the quantized row, copied to shared memory (cp.async). X = float: the f32
// row (16-byte aligned), quantized by the CTA into the same shared-memory layout (a thread per
// block, common.cuh's q8_0_act_* pieces: quantize_q8_0_act's bits) while the first weight
// stages are in flight — the fused matmul of one row, one launch.
template <int RW, int kStages, class X>
__device__ __forceinline__ void q8_0_r1_rows(const uint8_t* __restrict__ w, size_t row_bytes, int nb, int64_t n_out,
                                             const X* __restrict__ x, float* __restrict__ y) {
  constexpr bool kQuantize = std::is_same_v<X, float>;
  static_assert(kQuantize || std::is_same_v<X, BlockQ8_0Act>, "activation row: f32 or Q8_0 blocks");
  constexpr int kStep = r1_step<RW>();
  constexpr int kRowBytes = r1_row_pieces<RW>() * 16;
  extern __shared__ __align__(16) uint8_t r1_smem[];
  const int nw = static_cast<int>(blockDim.x >> 5);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = lane % RW, q = lane / RW;
  uint8_t* stages = r1_smem + warp * kStages * kR1StageBytes;
  uint32_t* act_q = reinterpret_cast<uint32_t*>(r1_smem + nw * kStages * kR1StageBytes);
  float* act_d = reinterpret_cast<float*>(act_q + r1_act_q_words(nb));
  float* ts = act_d + nb;  // [RW][r1_ts_stride(nb)] the rows' terms
  const int ts_stride = r1_ts_stride(nb);
  const int64_t o0 = static_cast<int64_t>(blockIdx.x) * RW;
  // The activation row (block b: d → act_d[b], quant word k → act_q[8b + 4(b/8) + k]).
  if constexpr (!kQuantize) {
    const uint32_t* xw = reinterpret_cast<const uint32_t*>(x);
    for (int i = threadIdx.x; i < nb * 9; i += blockDim.x) {
      const int b = i / 9, k = i - 9 * b;
      cp_async4(k == 0 ? reinterpret_cast<uint32_t*>(act_d + b) : act_q + 8 * b + 4 * (b >> 3) + (k - 1), xw + i);
    }
    cp_async_commit();
  }
  const int n_steps = (nb + kStep - 1) / kStep;
  const int my_steps = warp < n_steps ? (n_steps - warp + nw - 1) / nw : 0;
  // The warp's k-th step (step warp + k·nw) into stage k % kStages: cnt / 8 · 17 pieces per row.
  auto issue = [&](int k) {
    const int c = (warp + k * nw) * kStep;
    const int cnt = nb - c < kStep ? nb - c : kStep;
    const int np = cnt / 8 * 17;
    uint8_t* st = stages + (k % kStages) * kR1StageBytes;
    const uint8_t* src = w + static_cast<size_t>(c) * 34;
    for (int idx = lane; idx < RW * np; idx += 32) {
      const int m = idx / np, i = idx - m * np;
      if (o0 + m < n_out) cp_async16_cg(st + m * kRowBytes + 16 * i, src + (o0 + m) * row_bytes + 16 * i);
    }
  };
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    if (s < my_steps) issue(s);
    cp_async_commit();
  }
  if constexpr (kQuantize) {
    // Thread t quantizes blocks t, t + blockDim.x, ... whole (common.cuh's thread form; x 16-byte
    // aligned, the launcher's precondition).
    for (int b = threadIdx.x; b < nb; b += blockDim.x) {
      uint32_t qw[8];
      const float d = detail::q8_0_act_block_words(x, b, qw);
      uint4* dst = reinterpret_cast<uint4*>(act_q + 8 * b + 4 * (b >> 3));  // 16-byte aligned
      dst[0] = make_uint4(qw[0], qw[1], qw[2], qw[3]);
      dst[1] = make_uint4(qw[4], qw[5], qw[6], qw[7]);
      act_d[b] = d;
    }
  } else {
    cp_async_wait_group<kStages>();  // the activation group (the oldest) has landed
  }
  __syncthreads();  // ... for every thread's copies (or codes)
  for (int k = 0; k < my_steps; ++k) {
    cp_async_wait_group<kStages - 1>();  // step k's group is complete
    __syncwarp();
    const int c = (warp + k * nw) * kStep;
    const int cnt = nb - c < kStep ? nb - c : kStep;
    if (8 * q < cnt) {
      const uint4* sp = reinterpret_cast<const uint4*>(stages + (k % kStages) * kR1StageBytes + r * kRowBytes) + 17 * q;
      uint32_t wv[68];
#pragma unroll
      for (int i = 0; i < 17; ++i) {
        const uint4 v = sp[i];
        wv[4 * i] = v.x, wv[4 * i + 1] = v.y, wv[4 * i + 2] = v.z, wv[4 * i + 3] = v.w;
      }
      const int b0 = c + 8 * q;  // a multiple of 8: its 8 blocks' quants are 64 contiguous words
      const uint4* aq = reinterpret_cast<const uint4*>(act_q + 8 * b0 + 4 * (b0 >> 3));
      const float4 d0 = reinterpret_cast<const float4*>(act_d + b0)[0];
      const float4 d1 = reinterpret_cast<const float4*>(act_d + b0)[1];
      const float ad[8] = {d0.x, d0.y, d0.z, d0.w, d1.x, d1.y, d1.z, d1.w};
      float* tr = ts + r * ts_stride + b0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int wi = 17 * (j >> 1);  // the word where the block pair (j & ~1, j | 1) starts
        uint32_t qv[8];
        uint16_t dh;
        if ((j & 1) == 0) {  // d at bytes 0-1 of word wi, quants from byte 2: realigned
          dh = static_cast<uint16_t>(wv[wi] & 0xffffu);
#pragma unroll
          for (int i = 0; i < 8; ++i) qv[i] = __funnelshift_r(wv[wi + i], wv[wi + i + 1], 16);
        } else {  // d at bytes 2-3 of word wi + 8, quants word-aligned from word wi + 9
          dh = static_cast<uint16_t>(wv[wi + 8] >> 16);
#pragma unroll
          for (int i = 0; i < 8; ++i) qv[i] = wv[wi + 9 + i];
        }
        const uint4 a0 = aq[2 * j], a1 = aq[2 * j + 1];
        int isum = 0;
        isum = __dp4a(static_cast<int>(qv[0]), static_cast<int>(a0.x), isum);
        isum = __dp4a(static_cast<int>(qv[1]), static_cast<int>(a0.y), isum);
        isum = __dp4a(static_cast<int>(qv[2]), static_cast<int>(a0.z), isum);
        isum = __dp4a(static_cast<int>(qv[3]), static_cast<int>(a0.w), isum);
        isum = __dp4a(static_cast<int>(qv[4]), static_cast<int>(a1.x), isum);
        isum = __dp4a(static_cast<int>(qv[5]), static_cast<int>(a1.y), isum);
        isum = __dp4a(static_cast<int>(qv[6]), static_cast<int>(a1.z), isum);
        isum = __dp4a(static_cast<int>(qv[7]), static_cast<int>(a1.w), isum);
        const float s = f16_to_f32(dh) * ad[j];  // matvec_quant.cu Q8_0Fmt::terms' float closing
        tr[j] = s * static_cast<float>(isum);
      }
    }
    __syncwarp();  // every lane is done with this stage before it is refilled
    if (k + kStages < my_steps) issue(k + kStages);
    cp_async_commit();
  }
  __syncthreads();
  if (warp == 0 && lane < RW && o0 + lane < n_out) {
    const float* tr = ts + lane * ts_stride;
    float acc = 0.0f;
    for (int b = 0; b < nb; ++b) acc = acc + tr[b];  // block order: quant::dot_q8_0's single accumulator
    y[o0 + lane] = acc;  // Q8_0Fmt::finish: the sum as it is
  }
}

template <int RW, int kStages, class X>
__global__ void __launch_bounds__(256) q8_0_r1_kernel(const uint8_t* __restrict__ w, size_t row_bytes, int nb,
                                                      int64_t n_out, const X* __restrict__ x,
                                                      float* __restrict__ y) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  q8_0_r1_rows<RW, kStages>(w, row_bytes, nb, n_out, x, y);
}

// The groups of matvec_q8_0_grouped_r1_f32, by value.
struct Q8_0GroupF32Args {
  Q8_0GroupF32 g[kMaxMatvecGroups];
};

// matvec_q8_0_grouped at r = 1: blockIdx.y = group, as q8_0_split_grouped_kernel. Args:
// Q8_0GroupArgs (quantized rows) or Q8_0GroupF32Args (f32 rows, quantized in the kernel).
template <int RW, int kStages, class Args>
__global__ void __launch_bounds__(256) q8_0_r1_grouped_kernel(Args groups, size_t row_bytes, int nb,
                                                              int64_t n_out) {
  detail::pdl_enter();  // wait for the kernel before, then let the next one launch (pdl.cuh)
  const auto& gr = groups.g[blockIdx.y];
  q8_0_r1_rows<RW, kStages>(static_cast<const uint8_t*>(gr.w), row_bytes, nb, n_out, gr.x, gr.y);
}

// Shape of a q8_0_r1_kernel launch: rows per warp, warps per CTA, stages, shared memory.
struct R1Launch {
  int rw = 8, nw = 1, stages = 1;
  size_t smem = 0;
  unsigned grid = 0;
};

// Device limits for q8_0_r1_kernel (once per device; the opt-in of every instantiation).
struct R1Dev {
  bool done = false, ok = false;
  int sms = 0, smem_optin = 0;
};

template <int RW, int S>
cudaError_t r1_optin(int bytes) {
  const cudaFuncAttribute a = cudaFuncAttributeMaxDynamicSharedMemorySize;
  cudaError_t e = cudaFuncSetAttribute(q8_0_r1_kernel<RW, S, BlockQ8_0Act>, a, bytes);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(q8_0_r1_kernel<RW, S, float>, a, bytes);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(q8_0_r1_grouped_kernel<RW, S, Q8_0GroupArgs>, a, bytes);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(q8_0_r1_grouped_kernel<RW, S, Q8_0GroupF32Args>, a, bytes);
  return e;
}

// False when the staged kernel cannot take the shape (weights or rows not 16-byte aligned, n_in
// not a multiple of 256, shared memory): the warp kernels run it. n_groups: matrices of this
// shape in the launch (matvec_q8_0_grouped), counted for the CTAs-per-SM choice of rows per warp.
bool r1_launch_shape(const Weights& w, int nb, R1Launch* l, int n_groups = 1) {
  static R1Dev devs[64];
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return false;
  R1Dev& d = devs[dev];
  if (!d.done) {
    d.done = true;
    if (cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&d.smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess ||
        r1_optin<8, 1>(d.smem_optin) != cudaSuccess || r1_optin<8, 2>(d.smem_optin) != cudaSuccess ||
        r1_optin<4, 1>(d.smem_optin) != cudaSuccess || r1_optin<4, 2>(d.smem_optin) != cudaSuccess ||
        r1_optin<2, 1>(d.smem_optin) != cudaSuccess || r1_optin<2, 2>(d.smem_optin) != cudaSuccess) {
      kernel_off("staged one-row Q8_0 kernel", "the warp kernels", dev);
      return false;
    }
    d.ok = true;
  }
  if (!d.ok) return false;
  if (nb <= 0 || nb % 8 != 0 || reinterpret_cast<uintptr_t>(w.data) % 16 != 0 || w.row_bytes % 16 != 0) return false;
  // Rows per warp: 8 when that still gives a CTA per SM, else 4, else 2 (more CTAs for the
  // small matrices: 4096 -> 512 is 64 CTAs of 8 rows, 256 of 2).
  int rw = 2;
  for (int cand : {8, 4}) {
    if ((w.n_out + cand - 1) / cand * n_groups >= d.sms) {
      rw = cand;
      break;
    }
  }
  const int step = 8 * (32 / rw);
  const int n_steps = (nb + step - 1) / step;
  const int nw = n_steps < 8 ? n_steps : 8;
  const int per_warp = (n_steps + nw - 1) / nw;
  const int stages = per_warp >= 2 ? 2 : 1;
  const size_t smem = r1_smem_bytes(nb, rw, nw, stages);
  if (smem > static_cast<size_t>(d.smem_optin)) return false;
  const int64_t grid = (w.n_out + rw - 1) / rw;
  if (grid > 0x7fffffff) return false;
  *l = R1Launch{rw, nw, stages, smem, static_cast<unsigned>(grid)};
  return true;
}

// Calls f(RW, S) with the launch's rows per warp and stage count as integral constants: the
// kernels' template arguments, one switch for the plain and the grouped launch.
template <class F>
void with_r1_shape(const R1Launch& l, F&& f) {
  using std::integral_constant;
  const auto stages = [&](auto rw) {
    if (l.stages == 2) f(rw, integral_constant<int, 2>{});
    else f(rw, integral_constant<int, 1>{});
  };
  if (l.rw == 8) stages(integral_constant<int, 8>{});
  else if (l.rw == 4) stages(integral_constant<int, 4>{});
  else stages(integral_constant<int, 2>{});
}

template <class X>
void launch_r1(const R1Launch& l, const uint8_t* w, size_t row_bytes, int nb, int64_t n_out, const X* x, float* y,
               Stream stream) {
  with_r1_shape(l, [&](auto rw, auto st) {
    detail::launch_pdl(pdl_all(), q8_0_r1_kernel<decltype(rw)::value, decltype(st)::value, X>, l.grid, dim3(32 * l.nw),
                       l.smem, stream, w, row_bytes, nb, n_out, x, y);
  });
}

template <class Args>
void launch_r1_grouped(const R1Launch& l, const Args& args, int n_groups, size_t row_bytes, int nb, int64_t n_out,
                       Stream stream) {
  const dim3 grid(l.grid, static_cast<unsigned>(n_groups));
  with_r1_shape(l, [&](auto rw, auto st) {
    detail::launch_pdl(pdl_all(), q8_0_r1_grouped_kernel<decltype(rw)::value, decltype(st)::value, Args>, grid,
                       dim3(32 * l.nw), l.smem, stream, args, row_bytes, nb, n_out);
  });
}

std::atomic<int> g_q8_0_r1{static_cast<int>(Q8_0R1Kernel::kAuto)};
Q8_0R1Kernel r1_mode() { return static_cast<Q8_0R1Kernel>(g_q8_0_r1.load(std::memory_order_relaxed)); }
// Whether a one-row matvec of n_out outputs takes the staged kernel (when it takes the shape).
bool r1_staged(int64_t n_out) {
  const Q8_0R1Kernel m = r1_mode();
  return m == Q8_0R1Kernel::kStaged || m == Q8_0R1Kernel::kStagedPrequant ||
         (m == Q8_0R1Kernel::kAuto && n_out >= kR1StagedMinRows);
}

// The fused launchers' shape check: the shapes matvec_q8_0 accepts (launch's checks) that the
// staged kernel takes; anything else is left to the two-launch path (which reports bad shapes).
// x: the f32 rows, which the kernel reads as 16-byte words.
bool r1_fusable(const Weights& w, int64_t nb, R1Launch* l, bool x_aligned16, int n_groups = 1) {
  if (r1_mode() != Q8_0R1Kernel::kStaged || !x_aligned16) return false;
  if (w.n_in <= 0 || w.n_in % quant::kQK8_0 != 0 || w.n_out <= 0 || nb > (1 << 30) ||
      w.row_bytes < static_cast<size_t>(nb) * sizeof(quant::BlockQ8_0))
    return false;
  return r1_launch_shape(w, static_cast<int>(nb), l, n_groups);
}

// Whether a one-row matvec of n_out outputs tries the wide kernel (matvec_q8_0_wide.cu) first.
bool r1_wide(int64_t n_out) {
  const Q8_0R1Kernel m = r1_mode();
  return m == Q8_0R1Kernel::kWide || m == Q8_0R1Kernel::kWideFused ||
         (m == Q8_0R1Kernel::kAuto && kR1WideInAuto && n_out < kR1StagedMinRows);
}
// Whether a one-row matmul (f32 row) fuses its quantization into the wide kernel.
// n_groups: 1 for a lone matmul.
bool r1_wide_fused(int64_t n_in, int64_t n_out, int n_groups) {
  const Q8_0R1Kernel m = r1_mode();
  const bool short_rows = n_groups <= kR1WideFusedMaxGroups && n_in <= kR1WideFusedMaxIn;
  const bool persistent = wide_persistent_takes(n_in, n_groups) && n_in <= kR1WidePersistentFusedMaxIn;
  return m == Q8_0R1Kernel::kWideFused ||
         (m == Q8_0R1Kernel::kAuto && kR1WideInAuto && (short_rows || persistent) && n_out < kR1StagedMinRows);
}

}  // namespace

bool r1_try_launch(const Weights& w, int nb, const BlockQ8_0Act* x, float* y, Stream stream) {
  if (r1_wide(w.n_out) && wide_try_launch(w, nb, x, y, stream)) return true;
  R1Launch l;
  if (!r1_staged(w.n_out) || !r1_launch_shape(w, nb, &l)) return false;
  launch_r1(l, static_cast<const uint8_t*>(w.data), w.row_bytes, nb, w.n_out, x, y, stream);
  return true;
}

bool r1_try_launch_grouped(const Q8_0GroupArgs& args, int n_groups, size_t row_bytes, int64_t n_in, int64_t n_out,
                           Stream stream) {
  if (r1_wide(n_out) && wide_try_launch_grouped(args, n_groups, row_bytes, n_in, n_out, stream)) return true;
  const int nb = static_cast<int>(n_in / quant::kQK8_0);
  R1Launch l;
  if (!r1_staged(n_out) || !r1_launch_shape(Weights{args.g[0].w, row_bytes, n_in, n_out}, nb, &l, n_groups))
    return false;
  launch_r1_grouped(l, args, n_groups, row_bytes, nb, n_out, stream);
  return true;
}

void set_q8_0_r1_kernel(Q8_0R1Kernel k) { g_q8_0_r1.store(static_cast<int>(k), std::memory_order_relaxed); }
Q8_0R1Kernel q8_0_r1_kernel() { return static_cast<Q8_0R1Kernel>(g_q8_0_r1.load(std::memory_order_relaxed)); }

namespace {
std::atomic<bool> g_fold_input_norm{false};
}  // namespace

void set_fold_input_norm(bool on) { g_fold_input_norm.store(on, std::memory_order_relaxed); }
bool fold_input_norm() { return g_fold_input_norm.load(std::memory_order_relaxed); }

Status matvec_q8_0_r1_f32(const Weights& w, const float* x, float* y, bool* fused, Stream stream,
                          const RowNorm* norm) {
  *fused = false;
  if (norm != nullptr && !fold_input_norm()) return Status();
  if (r1_wide_fused(w.n_in, w.n_out, 1)) {
    if (!wide_try_launch_f32(w, x, y, stream, norm)) return Status();
    *fused = true;
    return launch_status("matvec_q8_0_r1_f32", w.n_in, w.n_out, 1);
  }
  if (norm != nullptr) return Status();  // only the wide kernel folds the norm
  const int64_t nb = w.n_in / quant::kQK8_0;
  R1Launch l;
  if (!r1_fusable(w, nb, &l, reinterpret_cast<uintptr_t>(x) % 16 == 0)) return Status();
  launch_r1(l, static_cast<const uint8_t*>(w.data), w.row_bytes, static_cast<int>(nb), w.n_out, x, y, stream);
  *fused = true;
  return launch_status("matvec_q8_0_r1_f32", w.n_in, w.n_out, 1);
}
Status matvec_q8_0_grouped_r1_f32(const Q8_0GroupF32* groups, int n_groups, size_t row_bytes, int64_t n_in,
                                  int64_t n_out, bool* fused, Stream stream) {
  *fused = false;
  if (n_groups < 1 || n_groups > kMaxMatvecGroups) return Status();
  bool mixed = false;  // groups narrower than n_out: the wide kernel only
  for (int g = 0; g < n_groups; ++g) {
    if (groups[g].n_out < 0 || groups[g].n_out > n_out) return Status();
    mixed = mixed || (groups[g].n_out != 0 && groups[g].n_out != n_out);
  }
  if (r1_wide_fused(n_in, n_out, n_groups)) {
    if (!wide_try_launch_grouped_f32(groups, n_groups, row_bytes, n_in, n_out, stream)) return Status();
    *fused = true;
    return launch_status("matvec_q8_0_grouped_r1_f32", n_in, n_out, 1);
  }
  if (mixed) return Status();
  Q8_0GroupF32Args args{};
  bool x_aligned16 = true;
  for (int g = 0; g < n_groups; ++g) {
    if (reinterpret_cast<uintptr_t>(groups[g].w) % 16 != 0) return Status();
    x_aligned16 = x_aligned16 && reinterpret_cast<uintptr_t>(groups[g].x) % 16 == 0;
    args.g[g] = groups[g];
  }
  const int64_t nb = n_in / quant::kQK8_0;
  R1Launch l;
  if (!r1_fusable(Weights{groups[0].w, row_bytes, n_in, n_out}, nb, &l, x_aligned16, n_groups)) return Status();
  launch_r1_grouped(l, args, n_groups, row_bytes, static_cast<int>(nb), n_out, stream);
  *fused = true;
  return launch_status("matvec_q8_0_grouped_r1_f32", n_in, n_out, 1);
}
}  // namespace ds4::cuda
