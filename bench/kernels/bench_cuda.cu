// bench/kernels/bench_cuda.cu — GB/s of the CUDA kernels (backend/cuda) at DS4 Flash shapes.
//
// Role: the device's two ceilings first (a device-to-device copy, counting bytes read plus
// written, and a plain 16-byte-load read kernel), then every kernel of cuda_kernels.h: per
// matvec the weight bytes streamed per call over its median time, for r = 1, 2, 4, 8 rows
// (Q8_0 also with the tensor-core kernel forced, "mma", to place matvec_q8_0's thresholds, and
// at r = 1 with the warp kernels that preceded the staged r = 1 kernel, "old", and the whole
// one-row matmul with the activation quantization fused into the staged kernel, "mm fused",
// vs its quantize launch + staged kernel, "mm unfused", and the wide r = 1 kernel alone,
// "wide", after its quantize launch, "mm wide", and quantizing the row itself, "mm wide
// fused"; the
// grouped output LoRA 8 x Q8_0 4096x1024 through ops.h matmul_grouped, and as 8 matmul calls,
// "loop", both including the activation quantization, and at r = 1 "unfused", the quantize
// launch before the staged kernel instead of the default single launch);
// the prefill Q8_0 GEMM of 64 / 256 / 1024 rows at the Flash shapes (tensor-core tiles vs the
// r <= 8 kernels, "q8_0_gemm_*": µs, TOPS, weight GB/s); the prefill F16 matmuls of 32 / 128
// rows, the many-row kernel vs 8-row tiles ("f16_rows_*": µs, TFLOPS, weight GB/s);
// per small op its time in microseconds (the read-outs top_k and argmax+margin included; HC pre
// and collapse at Flash shape fused vs the three-launch path, fn from DRAM); the
// routed-expert op (ops.h moe) at Flash widths for 1..256 rows (256: a prefill chunk), as µs per
// call and GB/s of the DISTINCT expert bytes the call reads (at >= 2 rows also under each
// MoeRowsKernel: "grouped", each touched expert read once per call, its dots by dp4a or on the
// tensor cores, and "pairs", once per (row, slot) pair). Weights are random valid blocks
// (quant::fill_random_blocks), rotated over enough copies (>= 4x the L2) that every call reads
// from DRAM. Timing: CUDA events around batches of calls, median of the batches.
// Run only when FILTER starts with "l2_": the L2 prefetch experiment (bench_l2_prefetch: a one-row
// matmul after a latency-bound kernel, with and without its weights prefetched into the L2).
// Usage: bench_cuda [--quick] [--once] [--roofline] [--csv FILE] [--rows=N] [FILTER]
//   --quick: fewer batches; --once: each op twice, a warm-up and one timed call (under ncu); --roofline: the two ceilings only (the roofline probe of
//   scripts/bench_cuda_sweep.sh); --csv FILE: also write the ceilings as one CSV row
//   (device,read_gbps,copy_gbps,buffer_bytes,l2_bytes); --rows=N: only N activation rows
//   (matvecs) / N token rows (moe); FILTER: only the matvecs, moe cases and small ops whose
//   name contains it (the ceilings always run). One benchmark alone, e.g. for Nsight Compute:
//   bench_cuda --rows=8 q8_0_head   or   bench_cuda --rows=1 moe_iq2_xxs
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/ops.h"
#include "quant/quant.h"

namespace {

using ds4::gguf::GgmlType;
namespace cuda = ds4::cuda;
namespace quant = ds4::quant;

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "bench_cuda: %s: %s\n", #x, cudaGetErrorString(e_));       \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

void ok(const ds4::Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "bench_cuda: %s\n", s.to_string().c_str());
    std::exit(1);
  }
}

int g_batches = 15;
bool g_once = false;         // --once: one warm-up and one timed call per op (for ncu)
int g_rows = 0;              // --rows=N: only this row count (0: all)
const char* g_filter = "";   // only names containing it

bool selected(const char* name) { return std::strstr(name, g_filter) != nullptr; }
bool rows_selected(int r) { return g_rows == 0 || g_rows == r; }

// Median over batches of (time of `calls` invocations of fn(i)) / calls, in seconds; the events
// on `stream` (the legacy default stream unless given).
double time_per_call(const std::function<void(int)>& fn, int calls, cudaStream_t stream = nullptr) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  if (g_once) calls = 1;
  for (int i = 0; i < calls; ++i) fn(i);  // warm-up
  CK(cudaDeviceSynchronize());
  std::vector<double> t;
  for (int rep = 0; rep < g_batches; ++rep) {
    CK(cudaEventRecord(a, stream));
    for (int i = 0; i < calls; ++i) fn(i);
    CK(cudaEventRecord(b, stream));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms * 1e-3 / calls);
  }
  CK(cudaGetLastError());
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

__global__ void read_kernel(const uint4* __restrict__ p, size_t n, unsigned* out) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint4 v = __ldg(p + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x12345678u) out[0] = acc;  // keeps the loads; practically never taken
}

struct Matvec {
  const char* name;
  GgmlType type;
  int64_t n_in, n_out;
};

// One layer of Flash routed experts: 256 experts of gate / up [4096 -> 2048] and down [2048 ->
// 4096] (1.8 GB at IQ2_XXS / Q2_K, 3.6 GB at Q4_K: far beyond the L2, so random routes read
// DRAM). Every expert holds the same random blocks (copies of expert 0: the bytes read, not
// their values, set the time). Per row count, 64 route sets of 6 distinct experts per row drawn
// uniformly (rows may share experts, as real batches do); call i uses set i % 64. Then the op's
// two weight-reading launches (expert_gate_up, expert_down_sum) alone.
void bench_moe(const char* name, GgmlType gate_up, GgmlType down) {
  constexpr int64_t kEmbd = 4096, kFf = 2048;
  constexpr int kExperts = 256, kUsed = 6, kSets = 64, kMaxRows = 256;
  const size_t gu_rb = quant::row_bytes(gate_up, kEmbd), d_rb = quant::row_bytes(down, kFf);
  const size_t gu_eb = gu_rb * kFf, d_eb = d_rb * kEmbd;
  uint8_t *gw = nullptr, *uw = nullptr, *dw = nullptr;
  CK(cudaMalloc(&gw, gu_eb * kExperts));
  CK(cudaMalloc(&uw, gu_eb * kExperts));
  CK(cudaMalloc(&dw, d_eb * kExperts));
  for (auto [ptr, t, n_in, n_out, eb] : {std::tuple{gw, gate_up, kEmbd, kFf, gu_eb},
                                         std::tuple{uw, gate_up, kEmbd, kFf, gu_eb},
                                         std::tuple{dw, down, kFf, kEmbd, d_eb}}) {
    std::vector<uint8_t> host(eb);
    quant::fill_random_blocks(t, host.data(), n_in * n_out, 0.05f, 11);
    CK(cudaMemcpy(ptr, host.data(), eb, cudaMemcpyHostToDevice));
    for (int e = 1; e < kExperts; ++e) CK(cudaMemcpy(ptr + eb * e, ptr, eb, cudaMemcpyDeviceToDevice));
  }
  std::mt19937 rng(5);
  std::vector<float> xf(static_cast<size_t>(kMaxRows * kEmbd));
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& f : xf) f = g(rng);
  std::vector<float> wv(static_cast<size_t>(kMaxRows * kUsed));
  std::uniform_real_distribution<float> uni(0.05f, 0.6f);
  for (auto& f : wv) f = uni(rng);
  float *dx = nullptr, *dwt = nullptr, *dout = nullptr;
  int32_t* dsel = nullptr;
  void* scratch = nullptr;
  CK(cudaMalloc(&dx, xf.size() * sizeof(float)));
  CK(cudaMemcpy(dx, xf.data(), xf.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMalloc(&dwt, wv.size() * sizeof(float)));
  CK(cudaMemcpy(dwt, wv.data(), wv.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMalloc(&dout, sizeof(float) * kMaxRows * kEmbd));
  CK(cudaMalloc(&dsel, sizeof(int32_t) * kSets * kMaxRows * kUsed));
  CK(cudaMalloc(&scratch, cuda::moe_device_scratch_bytes(kEmbd, kFf, kUsed, kMaxRows)));
  ds4::backend::MoeParams p;
  p.x = dx, p.wt = dwt, p.out = dout, p.scratch = scratch, p.n_used = kUsed, p.clamp = 10.0f;
  p.gate = ds4::backend::ExpertMatrix{gw, gate_up, kEmbd, kFf, kExperts, gu_rb};
  p.up = ds4::backend::ExpertMatrix{uw, gate_up, kEmbd, kFf, kExperts, gu_rb};
  p.down = ds4::backend::ExpertMatrix{dw, down, kFf, kEmbd, kExperts, d_rb};
  auto fmt = [](GgmlType t) {
    return t == GgmlType::kIQ2_XXS ? cuda::ExpertFormat::kIQ2_XXS
                                   : t == GgmlType::kQ2_K ? cuda::ExpertFormat::kQ2_K : cuda::ExpertFormat::kQ4_K;
  };
  const cuda::ExpertFormat f_gu = fmt(gate_up), f_down = fmt(down);
  const cuda::ExpertWeights gate_w{gw, gu_rb, gu_eb, kEmbd, kFf, kExperts}, up_w{uw, gu_rb, gu_eb, kEmbd, kFf, kExperts};
  const cuda::ExpertWeights down_w{dw, d_rb, d_eb, kFf, kEmbd, kExperts};
  quant::BlockQ8K *xq = nullptr, *midq = nullptr;
  float* mid = nullptr;
  CK(cudaMalloc(&xq, sizeof(quant::BlockQ8K) * kMaxRows * (kEmbd / 256)));
  CK(cudaMalloc(&mid, sizeof(float) * kMaxRows * kUsed * kFf));
  CK(cudaMalloc(&midq, sizeof(quant::BlockQ8K) * kMaxRows * kUsed * (kFf / 256)));
  for (int r : {1, 2, 4, 6, 8, 32, 256}) {
    if (!rows_selected(r)) continue;
    std::vector<int32_t> sel(static_cast<size_t>(kSets * r * kUsed));
    double distinct = 0;
    for (int s = 0; s < kSets; ++s) {
      std::vector<bool> used(kExperts, false);
      for (int i = 0; i < r; ++i) {
        std::vector<int32_t> ids(kExperts);
        for (int e = 0; e < kExperts; ++e) ids[e] = e;
        std::shuffle(ids.begin(), ids.end(), rng);
        for (int j = 0; j < kUsed; ++j) {
          sel[(static_cast<size_t>(s) * r + i) * kUsed + j] = ids[j];
          used[ids[j]] = true;
        }
      }
      distinct += static_cast<double>(std::count(used.begin(), used.end(), true)) / kSets;
    }
    CK(cudaMemcpy(dsel, sel.data(), sel.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
    p.n_rows = r;
    // One row (decode): the kernels before (old: the warp kernels) and the one-row kernels of
    // moe_r1.cu (new), side by side; 2 or more rows: the default, then each MoeRowsKernel.
    const cuda::MoeR1Kernel saved_r1 = cuda::moe_r1_kernel();
    for (const cuda::MoeR1Kernel kern : {cuda::MoeR1Kernel::kOld, cuda::MoeR1Kernel::kNew}) {
    if (r != 1 && kern == cuda::MoeR1Kernel::kOld) continue;
    cuda::set_moe_r1_kernel(kern);
    const std::string label = std::string(name) + (r != 1 ? "" : kern == cuda::MoeR1Kernel::kOld ? " old" : " new");
    auto time_moe = [&]() {
      return time_per_call(
          [&](int i) {
            ds4::backend::MoeParams q = p;
            q.sel = dsel + static_cast<size_t>(i % kSets) * r * kUsed;
            ok(cuda::moe(q, nullptr));
          },
          kSets);
    };
    const double t = time_moe();
    const double bytes = distinct * static_cast<double>(2 * gu_eb + d_eb);
    std::printf("%-28s %6d %10.2f %10.0f %10.1f\n", label.c_str(), r, t * 1e6, bytes / t / 1e9, distinct);
    if (r >= 2) {  // the op under each MoeRowsKernel
      const cuda::MoeRowsKernel saved = cuda::moe_rows_kernel();
      for (auto [k, rows_label] : {std::pair{cuda::MoeRowsKernel::kGrouped, "  grouped (by expert)"},
                                   std::pair{cuda::MoeRowsKernel::kTensor, "  grouped, tensor cores"},
                                   std::pair{cuda::MoeRowsKernel::kPairs, "  pairs (old)"}}) {
        cuda::set_moe_rows_kernel(k);
        const double tk = time_moe();
        std::printf("%-28s %6d %10.2f %10.0f %10.1f\n", rows_label, r, tk * 1e6, bytes / tk / 1e9, distinct);
      }
      cuda::set_moe_rows_kernel(saved);
    }
    // Its two weight-reading launches alone (GB/s of their distinct expert bytes).
    const int pairs = r * kUsed;
    ok(cuda::quantize_q8_k_act(dx, kEmbd, r, kEmbd, xq, kEmbd / 256));
    ok(cuda::expert_gate_up(f_gu, gate_w, up_w, dsel, dwt, r, kUsed, xq, 10.0f, mid));
    ok(cuda::quantize_q8_k_act(mid, kFf, pairs, kFf, midq, kFf / 256));
    const double t_gu = time_per_call(
        [&](int i) {
          ok(cuda::expert_gate_up(f_gu, gate_w, up_w, dsel + static_cast<size_t>(i % kSets) * r * kUsed, dwt, r,
                                  kUsed, xq, 10.0f, mid));
        },
        kSets);
    const double t_down = time_per_call(
        [&](int i) {
          ok(cuda::expert_down_sum(f_down, down_w, dsel + static_cast<size_t>(i % kSets) * r * kUsed, r, kUsed,
                                   midq, nullptr, dout));
        },
        kSets);
    std::printf("%-28s %6d %10.2f %10.0f\n", "  expert_gate_up", r, t_gu * 1e6, distinct * 2 * gu_eb / t_gu / 1e9);
    std::printf("%-28s %6d %10.2f %10.0f\n", "  expert_down_sum", r, t_down * 1e6, distinct * d_eb / t_down / 1e9);
    }
    cuda::set_moe_r1_kernel(saved_r1);
  }
  CK(cudaFree(xq));
  CK(cudaFree(mid));
  CK(cudaFree(midq));
  CK(cudaFree(gw));
  CK(cudaFree(uw));
  CK(cudaFree(dw));
  CK(cudaFree(dx));
  CK(cudaFree(dwt));
  CK(cudaFree(dout));
  CK(cudaFree(dsel));
  CK(cudaFree(scratch));
}

}  // namespace

// The grouped attention output LoRA as session/block.cpp calls it (ops.h matmul_grouped, the
// whole op: activation quantization + matvec): 8 groups of Q8_0 4096 -> 1024, group g reading
// columns [4096g, +4096) of x rows 32768 floats apart and writing columns [1024g, +1024) of y
// rows 8192 apart. "loop": the same groups as 8 matmul calls (the path before one launch).
// At r = 1 the default (Q8_0R1Kernel::kAuto) is the quantize launch then the wide kernel;
// " unfused": the quantize launch then the staged kernel (kStagedPrequant); " old": then the
// warp kernels (kWarp); " wide": then the wide kernel (kWide, the same as the default unless
// kR1WideInAuto is off); " wide fused": the wide kernel quantizing each group's row (kWideFused,
// one launch); " wide persist" / " wide fused persist": those two on the persistent grid.
void bench_grouped(const char* name, const cuda::DeviceInfo& info, double read_gbs) {
  constexpr int kGroups = 8, kMaxR = 8;
  constexpr int64_t kIn = 4096, kOut = 1024;
  const size_t rb = quant::row_bytes(GgmlType::kQ8_0, kIn);
  const size_t bytes = rb * kOut * kGroups;
  const int copies = static_cast<int>(std::max<size_t>(1, (4 * info.l2_bytes + bytes - 1) / bytes));
  std::vector<uint8_t> host(bytes);
  quant::fill_random_blocks(GgmlType::kQ8_0, host.data(), kIn * kOut * kGroups, 0.05f, 11);
  std::vector<void*> w(copies);
  for (auto& p : w) {
    CK(cudaMalloc(&p, bytes));
    CK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
  }
  const int64_t xs = kGroups * kIn, ys = kGroups * kOut;
  std::vector<float> xf(static_cast<size_t>(kMaxR * xs));
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (auto& f : xf) f = g(rng);
  float *dx = nullptr, *dy = nullptr;
  CK(cudaMalloc(&dx, xf.size() * sizeof(float)));
  CK(cudaMemcpy(dx, xf.data(), xf.size() * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMalloc(&dy, sizeof(float) * kMaxR * ys));
  std::vector<ds4::backend::MatmulParams> p(kGroups);
  const size_t sbytes = static_cast<size_t>(kGroups) * cuda::matmul_scratch_bytes(kIn, kMaxR);
  void* scratch = nullptr;
  CK(cudaMalloc(&scratch, sbytes));
  const cuda::OpScratch sc{scratch, sbytes};
  for (int v = 0; v < 8; ++v)
  for (int r : {1, 2, 4, 8}) {
    if (!rows_selected(r) || (v >= 2 && r != 1)) continue;
    const cuda::Q8_0R1Kernel r1_saved = cuda::q8_0_r1_kernel();
    const bool persistent_saved = cuda::wide_persistent();
    if (v == 2) cuda::set_q8_0_r1_kernel(cuda::Q8_0R1Kernel::kStagedPrequant);
    if (v == 3) cuda::set_q8_0_r1_kernel(cuda::Q8_0R1Kernel::kWarp);
    if (v == 4 || v == 6) cuda::set_q8_0_r1_kernel(cuda::Q8_0R1Kernel::kWide);
    if (v == 5 || v == 7) cuda::set_q8_0_r1_kernel(cuda::Q8_0R1Kernel::kWideFused);
    cuda::set_wide_persistent(v >= 6);
    auto fn = [&](int i) {
      const auto* base = static_cast<const uint8_t*>(w[i % copies]);
      for (int k = 0; k < kGroups; ++k) {
        p[k].w = ds4::backend::Matrix{base, GgmlType::kQ8_0, kIn, kOut * kGroups, rb}.rows(k * kOut, kOut);
        p[k].x = dx + k * kIn;
        p[k].x_stride = xs;
        p[k].y = dy + k * kOut;
        p[k].y_stride = ys;
        p[k].n_rows = r;
      }
      if (v != 1) {
        ok(cuda::matmul_grouped(p.data(), kGroups, sc, nullptr));
      } else {
        for (int k = 0; k < kGroups; ++k) ok(cuda::matmul(p[k], sc, nullptr));
      }
    };
    const double t = time_per_call(fn, std::max(copies, 8));
    cuda::set_q8_0_r1_kernel(r1_saved);
    cuda::set_wide_persistent(persistent_saved);
    const double gbs = bytes / t / 1e9;
    const char* const kVariant[] = {"",       " loop",       " unfused",      " old",
                                    " wide", " wide fused", " wide persist", " wide fused persist"};
    const std::string label = std::string(name) + kVariant[v];
    std::printf("%-28s %6d %10.2f %10.0f %7.0f%%\n", label.c_str(), r, t * 1e6, gbs, 100.0 * gbs / read_gbs);
  }
  for (void* q : w) CK(cudaFree(q));
  CK(cudaFree(dx));
  CK(cudaFree(dy));
  CK(cudaFree(scratch));
}

// Prefill: Q8_0 matmuls of many rows (r = 64, 256, 1024) at the Flash shapes, the tensor-core
// GEMM (matmul_q8_0_tc.cu) against the r <= 8 kernels it replaced (" old": Q8_0RowsKernel::
// kMatvec, r / 8 launches). Variants: " tc" matvec_q8_0 as dispatched (kAuto: the tile that
// fills the GPU), " tcL" / " tcM" / " tcS" each tile forced. Columns: us per call, TOPS =
// 2·n_in·n_out·r / time (the int8 MACs as operations; each also costs dot_q8_0's float steps
// per block), GB/s = weight bytes / time. Weights rotate over >= 4x L2 of copies; the Q8_0
// activation rows are quantized once.
void bench_gemm(const cuda::DeviceInfo& info) {
  struct Shape {
    const char* name;
    int64_t n_in, n_out;
  };
  const Shape shapes[] = {{"q8_0_gemm_4096x1024", 4096, 1024},   {"q8_0_gemm_4096x512", 4096, 512},
                          {"q8_0_gemm_1024x32768", 1024, 32768}, {"q8_0_gemm_8192x4096", 8192, 4096},
                          {"q8_0_gemm_32768x4096", 32768, 4096}, {"q8_0_gemm_4096x2048", 4096, 2048},
                          {"q8_0_gemm_4096x129280", 4096, 129280}};
  std::printf("\n%-32s %6s %10s %8s %10s\n", "q8_0 gemm (prefill)", "rows", "us/call", "TOPS", "GB/s");
  constexpr int kMaxR = 1024;
  for (const Shape& c : shapes) {
    if (!selected(c.name)) continue;
    const size_t rb = quant::row_bytes(GgmlType::kQ8_0, c.n_in);
    const size_t bytes = rb * c.n_out;
    const int copies = static_cast<int>(std::max<size_t>(1, (4 * info.l2_bytes + bytes - 1) / bytes));
    std::vector<uint8_t> host(bytes);
    quant::fill_random_blocks(GgmlType::kQ8_0, host.data(), c.n_in * c.n_out, 0.05f, 17);
    std::vector<void*> w(copies);
    for (auto& p : w) {
      CK(cudaMalloc(&p, bytes));
      CK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
    }
    const int64_t nb = c.n_in / 32;
    std::vector<float> xf(static_cast<size_t>(kMaxR) * c.n_in);
    std::mt19937 rng(9);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (auto& f : xf) f = g(rng);
    float *dx = nullptr, *dy = nullptr;
    void* dq = nullptr;
    CK(cudaMalloc(&dx, xf.size() * sizeof(float)));
    CK(cudaMemcpy(dx, xf.data(), xf.size() * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dy, sizeof(float) * kMaxR * c.n_out));
    CK(cudaMalloc(&dq, sizeof(quant::BlockQ8_0Act) * kMaxR * nb));
    ok(cuda::quantize_q8_0_act(dx, c.n_in, kMaxR, c.n_in, static_cast<quant::BlockQ8_0Act*>(dq), nb));
    const cuda::Q8_0RowsKernel kinds[] = {cuda::Q8_0RowsKernel::kAuto, cuda::Q8_0RowsKernel::kTcLarge,
                                          cuda::Q8_0RowsKernel::kTcMedium, cuda::Q8_0RowsKernel::kTcSmall,
                                          cuda::Q8_0RowsKernel::kMatvec};
    const char* const kLabel[] = {" tc", " tcL", " tcM", " tcS", " old"};
    for (int r : {64, 256, 1024}) {
      if (!rows_selected(r)) continue;
      for (int v = 0; v < 5; ++v) {
        const cuda::Q8_0RowsKernel saved = cuda::q8_0_rows_kernel();
        cuda::set_q8_0_rows_kernel(kinds[v]);
        auto fn = [&](int i) {
          const cuda::Weights wv{w[i % copies], rb, c.n_in, c.n_out};
          ok(cuda::matvec_q8_0(wv, static_cast<const quant::BlockQ8_0Act*>(dq), nb, r, dy, c.n_out, nullptr));
        };
        // The old path re-reads the weights r / 8 times: fewer calls keep it to seconds.
        const double t = time_per_call(fn, v == 4 ? std::max(copies, 2) : std::max(copies, 8));
        cuda::set_q8_0_rows_kernel(saved);
        const double tops = 2.0 * c.n_in * c.n_out * r / t / 1e12;
        const std::string label = std::string(c.name) + kLabel[v];
        std::printf("%-32s %6d %10.1f %8.1f %10.0f\n", label.c_str(), r, t * 1e6, tops, bytes / t / 1e9);
      }
    }
    for (void* p : w) CK(cudaFree(p));
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    CK(cudaFree(dq));
  }
}

// Prefill F16 matmuls (issue #30: the compressor / indexer projections 4096 -> 1024 / 512 / 256)
// of 32 and 128 rows through ops.h matmul: " wide" the many-row kernel (DenseRowsKernel::kWide,
// one launch), " tiles8" the r <= 8 kernels per 8 rows (kTiles8, the path before). µs per call,
// the weight bytes over that time, and TFLOPS (2·n_in·n_out·rows; no FMA, so each product and
// sum is one instruction).
void bench_dense_rows(const cuda::DeviceInfo& info) {
  struct Shape {
    const char* name;
    int64_t n_in, n_out;
  };
  const Shape shapes[] = {{"f16_rows_4096x1024", 4096, 1024}, {"f16_rows_4096x512", 4096, 512},
                          {"f16_rows_4096x256", 4096, 256}};
  std::printf("\n%-32s %6s %10s %8s %10s\n", "f16 matmul (prefill)", "rows", "us/call", "TFLOPS", "GB/s");
  constexpr int kMaxR = 128;
  for (const Shape& c : shapes) {
    if (!selected(c.name)) continue;
    const size_t rb = quant::row_bytes(GgmlType::kF16, c.n_in);
    const size_t bytes = rb * c.n_out;
    const int copies = static_cast<int>(std::max<size_t>(1, (4 * info.l2_bytes + bytes - 1) / bytes));
    std::vector<uint8_t> host(bytes);
    {
      std::vector<float> v(static_cast<size_t>(c.n_in * c.n_out));
      std::mt19937 rng(1);
      std::normal_distribution<float> g(0.0f, 0.05f);
      for (auto& f : v) f = g(rng);
      quant::quantize_row(GgmlType::kF16, v.data(), host.data(), c.n_in * c.n_out);
    }
    std::vector<void*> w(copies);
    for (auto& p : w) {
      CK(cudaMalloc(&p, bytes));
      CK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
    }
    std::vector<float> xf(static_cast<size_t>(kMaxR) * c.n_in);
    std::mt19937 rng(9);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (auto& f : xf) f = g(rng);
    float *dx = nullptr, *dy = nullptr;
    CK(cudaMalloc(&dx, xf.size() * sizeof(float)));
    CK(cudaMemcpy(dx, xf.data(), xf.size() * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dy, sizeof(float) * kMaxR * c.n_out));
    for (int r : {32, 128}) {
      if (!rows_selected(r)) continue;
      for (int v = 0; v < 2; ++v) {
        const cuda::DenseRowsKernel saved = cuda::dense_rows_kernel();
        cuda::set_dense_rows_kernel(v == 0 ? cuda::DenseRowsKernel::kWide : cuda::DenseRowsKernel::kTiles8);
        auto fn = [&](int i) {
          ds4::backend::MatmulParams mp;
          mp.w = ds4::backend::Matrix{static_cast<const uint8_t*>(w[i % copies]), GgmlType::kF16, c.n_in, c.n_out, rb};
          mp.x = dx, mp.x_stride = c.n_in, mp.y = dy, mp.y_stride = c.n_out, mp.n_rows = r;
          ok(cuda::matmul(mp, cuda::OpScratch{}, nullptr));
        };
        const double t = time_per_call(fn, std::max(copies, 8));
        cuda::set_dense_rows_kernel(saved);
        const double tflops = 2.0 * c.n_in * c.n_out * r / t / 1e12;
        const std::string label = std::string(c.name) + (v == 0 ? " wide" : " tiles8");
        std::printf("%-32s %6d %10.1f %8.2f %10.0f\n", label.c_str(), r, t * 1e6, tflops, bytes / t / 1e9);
      }
    }
    for (void* p : w) CK(cudaFree(p));
    CK(cudaFree(dx));
    CK(cudaFree(dy));
  }
}

// ---- L2 prefetch (issue #30's experiment) -----------------------------------------------------
// Does a weight matrix prefetched into the L2 while a latency-bound kernel runs make the one-row
// matmul after it faster? Per iteration (copy i of the weights: >= 4x the L2 apart, so cold):
// "spin+mm": a one-CTA kernel spinning kSpinUs (a stand-in for hc_pre / route / attention on a
// few SMs) then the matmul; "spin+mm pf": the same with cp.async.bulk.prefetch.L2 of the weights
// issued on a second stream as the spin starts; "mm": the matmul alone; "mm warm": the matmul
// right after a prefetch of its weights that has completed (a synchronized pass: the L2 bound).
__global__ void spin_kernel(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

__global__ void l2_prefetch_kernel(const uint8_t* p, size_t bytes) {
  constexpr size_t kChunk = 64 * 1024;
  for (size_t off = threadIdx.x * kChunk; off < bytes; off += blockDim.x * kChunk) {
    const size_t n = bytes - off < kChunk ? bytes - off : kChunk;
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(static_cast<unsigned>(n & ~size_t{15}))
                 : "memory");
  }
}

void bench_l2_prefetch(const cuda::DeviceInfo& info) {
  const Matvec cases[] = {{"l2_qa_4096x1024", GgmlType::kQ8_0, 4096, 1024},
                          {"l2_shexp_4096x2048", GgmlType::kQ8_0, 4096, 2048},
                          {"l2_out_8192x4096", GgmlType::kQ8_0, 8192, 4096},
                          {"l2_qb_1024x32768", GgmlType::kQ8_0, 1024, 32768}};
  int clock_khz = 0;
  CK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, 0));
  cudaStream_t s0, s1;
  CK(cudaStreamCreateWithFlags(&s0, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  std::printf("\n%-28s %8s %10s %10s %10s %10s %10s\n", "l2 prefetch", "spin us", "spin+mm", "spin+mm pf", "mm",
              "mm warm", "spin");
  for (const Matvec& c : cases) {
    if (!selected(c.name)) continue;
    const size_t rb = quant::row_bytes(c.type, c.n_in);
    const size_t bytes = rb * c.n_out;
    const int copies = static_cast<int>(std::max<size_t>(2, (4 * info.l2_bytes + bytes - 1) / bytes));
    std::vector<uint8_t> host(bytes);
    quant::fill_random_blocks(c.type, host.data(), c.n_in * c.n_out, 0.05f, 7);
    std::vector<void*> w(copies);
    for (auto& p : w) {
      CK(cudaMalloc(&p, bytes));
      CK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
    }
    std::vector<float> xf(static_cast<size_t>(c.n_in));
    std::mt19937 rng(3);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (auto& f : xf) f = g(rng);
    float *dx = nullptr, *dy = nullptr;
    void* dq = nullptr;
    const size_t sb = cuda::matmul_scratch_bytes(c.n_in, 1);
    CK(cudaMalloc(&dx, xf.size() * sizeof(float)));
    CK(cudaMemcpy(dx, xf.data(), xf.size() * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dy, sizeof(float) * c.n_out));
    CK(cudaMalloc(&dq, sb));
    auto mm = [&](int i) {
      ds4::backend::MatmulParams mp;
      mp.w = ds4::backend::Matrix{static_cast<const uint8_t*>(w[i % copies]), GgmlType::kQ8_0, c.n_in, c.n_out, rb};
      mp.x = dx, mp.x_stride = c.n_in, mp.y = dy, mp.y_stride = c.n_out, mp.n_rows = 1;
      ok(cuda::matmul(mp, cuda::OpScratch{dq, sb}, s0));
    };
    auto pf = [&](int i, cudaStream_t s) {
      l2_prefetch_kernel<<<1, 256, 0, s>>>(static_cast<const uint8_t*>(w[i % copies]), bytes);
    };
    // Per-iteration time in µs (events on s0), median of batches.
    auto timed = [&](const std::function<void(int)>& it) { return time_per_call(it, std::max(copies, 8), s0) * 1e6; };
    for (int spin_us : {10, 25}) {
      const long long cyc = static_cast<long long>(clock_khz) * spin_us / 1000;
      const double t_spin = timed([&](int) { spin_kernel<<<1, 32, 0, s0>>>(cyc); });
      const double t_a = timed([&](int i) {
        spin_kernel<<<1, 32, 0, s0>>>(cyc);
        mm(i);
      });
      const double t_b = timed([&](int i) {
        CK(cudaEventRecord(ev, s0));
        CK(cudaStreamWaitEvent(s1, ev, 0));
        pf(i, s1);
        spin_kernel<<<1, 32, 0, s0>>>(cyc);
        mm(i);
      });
      const double t_mm = timed([&](int i) { mm(i); });
      // The L2 bound: prefetch, wait for it on the host (and a little: the prefetch's
      // completion is not signalled), then time the matmul alone.
      std::vector<double> warm;
      cudaEvent_t a, b;
      CK(cudaEventCreate(&a));
      CK(cudaEventCreate(&b));
      for (int rep = 0; rep < g_batches; ++rep) {
        const int i = rep % copies;
        pf(i, s0);
        spin_kernel<<<1, 32, 0, s0>>>(static_cast<long long>(clock_khz) * 100 / 1000);  // 100 us for the copies
        CK(cudaEventRecord(a, s0));
        mm(i);
        CK(cudaEventRecord(b, s0));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        warm.push_back(ms * 1e3);
      }
      cudaEventDestroy(a);
      cudaEventDestroy(b);
      std::sort(warm.begin(), warm.end());
      std::printf("%-28s %8d %10.2f %10.2f %10.2f %10.2f %10.2f\n", c.name, spin_us, t_a, t_b, t_mm,
                  warm[warm.size() / 2], t_spin);
    }
    for (void* p : w) CK(cudaFree(p));
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    CK(cudaFree(dq));
  }
  CK(cudaEventDestroy(ev));
  CK(cudaStreamDestroy(s0));
  CK(cudaStreamDestroy(s1));
}

int main(int argc, char** argv) {
  bool roofline_only = false;
  const char* csv_path = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      g_batches = 5;
    } else if (std::strcmp(argv[i], "--once") == 0) {
      g_batches = 1;
      g_once = true;
    } else if (std::strcmp(argv[i], "--roofline") == 0) {
      roofline_only = true;
    } else if (std::strcmp(argv[i], "--csv") == 0 && i + 1 < argc) {
      csv_path = argv[++i];
    } else if (std::strncmp(argv[i], "--rows=", 7) == 0) {
      g_rows = std::atoi(argv[i] + 7);
    } else if (argv[i][0] != '-') {
      g_filter = argv[i];
    } else {
      std::fprintf(stderr,
                   "bench_cuda: unknown argument %s (usage: bench_cuda [--quick] [--once] [--roofline] [--csv FILE] "
                   "[--rows=N] [FILTER])\n",
                   argv[i]);
      return 2;
    }
  }
  cuda::DeviceInfo info;
  const ds4::Status ps = cuda::probe_device(0, &info);
  if (!ps.ok()) {
    std::printf("bench_cuda: skipped: %s\n", ps.message().c_str());
    return 0;
  }
  std::printf("device: %s (cc %d.%d, %d SMs, %.1f GiB, L2 %.0f MiB)\n", info.name.c_str(), info.cc_major,
              info.cc_minor, info.sm_count, info.total_mem / 1073741824.0, info.l2_bytes / 1048576.0);

  // ---- Ceilings -------------------------------------------------------------------------------
  // At least 1 GiB and 4x the L2, so both kernels stream DRAM.
  const size_t big = std::max(size_t{1} << 30, (4 * info.l2_bytes + 15) / 16 * 16);
  void *src = nullptr, *dst = nullptr;
  unsigned* sink = nullptr;
  CK(cudaMalloc(&src, big));
  CK(cudaMalloc(&dst, big));
  CK(cudaMalloc(&sink, 64));
  CK(cudaMemset(src, 1, big));
  const double t_copy = time_per_call([&](int) { CK(cudaMemcpyAsync(dst, src, big, cudaMemcpyDeviceToDevice)); }, 4);
  const double copy_gbs = 2.0 * big / t_copy / 1e9;
  const double t_read = time_per_call(
      [&](int) { read_kernel<<<info.sm_count * 8, 512>>>(static_cast<const uint4*>(src), big / 16, sink); }, 4);
  const double read_gbs = big / t_read / 1e9;
  std::printf("copy D2D %.2f GiB: %.0f GB/s (read + write)   plain read kernel (16-byte loads): %.0f GB/s\n",
              big / 1073741824.0, copy_gbs, read_gbs);
  CK(cudaFree(dst));
  if (csv_path != nullptr) {
    FILE* f = std::fopen(csv_path, "w");
    if (f == nullptr) {
      std::fprintf(stderr, "bench_cuda: cannot write %s\n", csv_path);
      return 1;
    }
    std::fprintf(f, "device,read_gbps,copy_gbps,buffer_bytes,l2_bytes\n\"%s\",%.1f,%.1f,%zu,%zu\n", info.name.c_str(),
                 read_gbs, copy_gbs, big, info.l2_bytes);
    std::fclose(f);
  }
  if (roofline_only) {
    CK(cudaFree(src));
    CK(cudaFree(sink));
    return 0;
  }

  // ---- Matvecs --------------------------------------------------------------------------------
  const Matvec cases[] = {
      {"q8_0_attn_4096x1024", GgmlType::kQ8_0, 4096, 1024},
      {"q8_0_4096x8192", GgmlType::kQ8_0, 4096, 8192},
      {"q8_0_head_4096x129280", GgmlType::kQ8_0, 4096, 129280},
      // The other Flash Q8_0 shapes decode runs at r = 1: attn_kv, attn_q_b, the output
      // projections (grouped LoRA's second half, ungrouped), the shared expert.
      {"q8_0_kv_4096x512", GgmlType::kQ8_0, 4096, 512},
      {"q8_0_qb_1024x32768", GgmlType::kQ8_0, 1024, 32768},
      {"q8_0_out_8192x4096", GgmlType::kQ8_0, 8192, 4096},
      {"q8_0_out_32768x4096", GgmlType::kQ8_0, 32768, 4096},
      {"q8_0_shexp_4096x2048", GgmlType::kQ8_0, 4096, 2048},
      {"q8_0_shexp_2048x4096", GgmlType::kQ8_0, 2048, 4096},
      {"f16_hc_16384x24", GgmlType::kF16, 16384, 24},
      {"f16_4096x4096", GgmlType::kF16, 4096, 4096},
      {"f32_4096x4096", GgmlType::kF32, 4096, 4096},
      {"iq2_xxs_expert_4096to2048", GgmlType::kIQ2_XXS, 4096, 2048},
      {"q2_k_expert_2048to4096", GgmlType::kQ2_K, 2048, 4096},
      {"q4_k_expert_4096to2048", GgmlType::kQ4_K, 4096, 2048},
  };
  std::printf("\n%-28s %6s %10s %10s %8s\n", "matvec", "rows", "us/call", "GB/s", "%read");
  const int kMaxR = 8;
  for (const Matvec& c : cases) {
    if (!selected(c.name)) continue;
    const size_t rb = quant::row_bytes(c.type, c.n_in);
    const size_t bytes = rb * c.n_out;
    const int copies = static_cast<int>(std::max<size_t>(1, (4 * info.l2_bytes + bytes - 1) / bytes));
    std::vector<uint8_t> host(bytes);
    if (c.type == GgmlType::kF16 || c.type == GgmlType::kF32) {
      std::vector<float> v(static_cast<size_t>(c.n_in * c.n_out));
      std::mt19937 rng(1);
      std::normal_distribution<float> g(0.0f, 0.05f);
      for (auto& f : v) f = g(rng);
      quant::quantize_row(c.type, v.data(), host.data(), c.n_in * c.n_out);
    } else {
      quant::fill_random_blocks(c.type, host.data(), c.n_in * c.n_out, 0.05f, 7);
    }
    std::vector<void*> w(copies);
    for (auto& p : w) {
      CK(cudaMalloc(&p, bytes));
      CK(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
    }
    // Activations: f32 rows and their Q8_0 / Q8_K forms.
    std::vector<float> xf(static_cast<size_t>(kMaxR * c.n_in));
    std::mt19937 rng(3);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (auto& f : xf) f = g(rng);
    float *dx = nullptr, *dy = nullptr;
    void* dq = nullptr;
    CK(cudaMalloc(&dx, xf.size() * sizeof(float)));
    CK(cudaMemcpy(dx, xf.data(), xf.size() * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dy, sizeof(float) * kMaxR * c.n_out));
    CK(cudaMalloc(&dq, sizeof(quant::BlockQ8K) * kMaxR * (c.n_in / 32 + 1)));
    const int64_t nb32 = c.n_in / 32, nb256 = c.n_in / 256;
    if (c.type == GgmlType::kQ8_0) {
      ok(cuda::quantize_q8_0_act(dx, c.n_in, kMaxR, c.n_in, static_cast<quant::BlockQ8_0Act*>(dq), nb32));
    } else if (c.type != GgmlType::kF16 && c.type != GgmlType::kF32) {
      ok(cuda::quantize_q8_k_act(dx, c.n_in, kMaxR, c.n_in, static_cast<quant::BlockQ8K*>(dq), nb256));
    }
    // Q8_0 nine times: matvec_q8_0 as dispatched (the default, Q8_0R1Kernel::kAuto at r = 1:
    // the wide kernel below the head, the staged kernel on it), the tensor-core kernel forced
    // (" mma"), at r = 1 the warp kernels (" old": kWarp), the whole matmul of one f32 row
    // (ops.h matmul: activation quantization included): " mm fused" the staged kernel quantizing
    // the row itself (kStaged: one launch), " mm unfused" quantize_q8_0_act then the staged
    // kernel (kStagedPrequant: two), the staged kernel alone on quantized rows (" staged":
    // kStaged), the wide kernel alone (" wide": kWide; issue #30's A/B against " old"),
    // quantize_q8_0_act then the wide kernel (" mm wide": kWide, two launches) and the wide
    // kernel quantizing the row itself (" mm wide fused": kWideFused, one launch; kAuto's
    // matmul for n_in <= 4096); the last two again on the persistent grid (" wide persist",
    // " mm wide fused persist": set_wide_persistent).
    // F16 / F32 twice: as dispatched (narrow matrices: the staged kernel) and " tiled"
    // (DenseNarrowKernel::kTiled, the kernel before; the same for >= 4096 rows).
    const bool dense = c.type == GgmlType::kF16 || c.type == GgmlType::kF32;
    const int variants = c.type == GgmlType::kQ8_0 ? 11 : dense ? 2 : 1;
    for (int v = 0; v < variants; ++v)
    for (int r : {1, 2, 4, 8}) {
      if (!rows_selected(r) || (v >= 2 && r != 1)) continue;
      const cuda::Q8_0R1Kernel r1_saved = cuda::q8_0_r1_kernel();
      if (v == 2) cuda::set_q8_0_r1_kernel(cuda::Q8_0R1Kernel::kWarp);
      if (v == 3 || v == 5) cuda::set_q8_0_r1_kernel(cuda::Q8_0R1Kernel::kStaged);
      if (v == 4) cuda::set_q8_0_r1_kernel(cuda::Q8_0R1Kernel::kStagedPrequant);
      const cuda::DenseNarrowKernel narrow_saved = cuda::dense_narrow_kernel();
      if (dense && v == 1) cuda::set_dense_narrow_kernel(cuda::DenseNarrowKernel::kTiled);
      if (v == 6 || v == 7 || v == 9) cuda::set_q8_0_r1_kernel(cuda::Q8_0R1Kernel::kWide);
      if (v == 8 || v == 10) cuda::set_q8_0_r1_kernel(cuda::Q8_0R1Kernel::kWideFused);
      const bool persistent_saved = cuda::wide_persistent();
      cuda::set_wide_persistent(v >= 9);
      auto fn = [&](int i) {
        const cuda::Weights wv{w[i % copies], rb, c.n_in, c.n_out};
        if (v == 3 || v == 4 || v == 7 || v == 8 || v == 10) {
          ds4::backend::MatmulParams mp;
          mp.w = ds4::backend::Matrix{static_cast<const uint8_t*>(w[i % copies]), GgmlType::kQ8_0, c.n_in, c.n_out, rb};
          mp.x = dx, mp.x_stride = c.n_in, mp.y = dy, mp.y_stride = c.n_out, mp.n_rows = 1;
          ok(cuda::matmul(mp, cuda::OpScratch{dq, cuda::matmul_scratch_bytes(c.n_in, 1)}, nullptr));
          return;
        }
        switch (c.type) {
          case GgmlType::kQ8_0:
            ok((v == 1 ? cuda::matvec_q8_0_mma : cuda::matvec_q8_0)(
                wv, static_cast<const quant::BlockQ8_0Act*>(dq), nb32, r, dy, c.n_out, nullptr));
            break;
          case GgmlType::kF16: ok(cuda::matvec_f16(wv, dx, c.n_in, r, dy, c.n_out)); break;
          case GgmlType::kF32: ok(cuda::matvec_f32(wv, dx, c.n_in, r, dy, c.n_out)); break;
          case GgmlType::kIQ2_XXS:
            ok(cuda::matvec_iq2_xxs(wv, static_cast<const quant::BlockQ8K*>(dq), nb256, r, dy, c.n_out));
            break;
          case GgmlType::kQ2_K:
            ok(cuda::matvec_q2_k(wv, static_cast<const quant::BlockQ8K*>(dq), nb256, r, dy, c.n_out));
            break;
          case GgmlType::kQ4_K:
            ok(cuda::matvec_q4_k(wv, static_cast<const quant::BlockQ8K*>(dq), nb256, r, dy, c.n_out));
            break;
          default: break;
        }
      };
      const double t = time_per_call(fn, std::max(copies, 8));
      cuda::set_q8_0_r1_kernel(r1_saved);
      cuda::set_dense_narrow_kernel(narrow_saved);
      cuda::set_wide_persistent(persistent_saved);
      const double gbs = bytes / t / 1e9;
      const char* const kVariant[] = {"",       " mma",  " old",     " mm fused",      " mm unfused",
                                      " staged", " wide", " mm wide", " mm wide fused", " wide persist",
                                      " mm wide fused persist"};
      const std::string label = std::string(c.name) + (dense && v == 1 ? " tiled" : kVariant[v]);
      std::printf("%-28s %6d %10.2f %10.0f %7.0f%%\n", label.c_str(), r, t * 1e6, gbs, 100.0 * gbs / read_gbs);
    }
    for (void* p : w) CK(cudaFree(p));
    CK(cudaFree(dx));
    CK(cudaFree(dy));
    CK(cudaFree(dq));
  }

  if (std::strncmp(g_filter, "l2_", 3) == 0) {  // the L2 prefetch experiment: only when named
    bench_l2_prefetch(info);
    return 0;
  }
  if (selected("q8_0_attn_8x4096x1024")) bench_grouped("q8_0_attn_8x4096x1024", info, read_gbs);
  bench_gemm(info);
  bench_dense_rows(info);

  // ---- Routed experts (the whole moe op: quantize, gate/up, SwiGLU, down, slot sum) ----------
  std::printf("\n%-28s %6s %10s %10s %10s\n", "moe (Flash, 6 of 256)", "rows", "us/call", "GB/s", "experts");
  if (selected("moe_iq2_xxs_q2_k")) bench_moe("moe_iq2_xxs_q2_k", GgmlType::kIQ2_XXS, GgmlType::kQ2_K);
  if (selected("moe_q4_k")) bench_moe("moe_q4_k", GgmlType::kQ4_K, GgmlType::kQ4_K);

  // ---- Small ops ------------------------------------------------------------------------------
  std::printf("\n%-40s %10s\n", "op", "us/call");
  float* x = static_cast<float*>(src);  // 1 GiB of scratch (bytes 0x01: finite floats)
  void* q = nullptr;
  CK(cudaMalloc(&q, sizeof(quant::BlockQ8K) * 8 * 64));
  auto small = [&](const char* name, const std::function<void(int)>& fn) {
    if (!selected(name)) return;
    std::printf("%-40s %10.2f\n", name, time_per_call(fn, 50) * 1e6);
  };
  small("quantize_q8_0_act 4096 x1", [&](int) {
    ok(cuda::quantize_q8_0_act(x, 4096, 1, 4096, static_cast<quant::BlockQ8_0Act*>(q), 128));
  });
  small("quantize_q8_0_act 4096 x8", [&](int) {
    ok(cuda::quantize_q8_0_act(x, 4096, 8, 4096, static_cast<quant::BlockQ8_0Act*>(q), 128));
  });
  small("quantize_q8_k_act 4096 x1", [&](int) {
    ok(cuda::quantize_q8_k_act(x, 4096, 1, 4096, static_cast<quant::BlockQ8K*>(q), 16));
  });
  small("quantize_q8_k_act 4096 x8", [&](int) {
    ok(cuda::quantize_q8_k_act(x, 4096, 8, 4096, static_cast<quant::BlockQ8K*>(q), 16));
  });
  // copy_many against one cudaMemcpyAsync per region: a verify row's prefix-slot save of a
  // ratio-128 layer (14 regions of one compressor phase row, 4 KB each; session/state.cpp).
  {
    ds4::backend::CopyRegion regions[14];
    for (int i = 0; i < 14; ++i) regions[i] = ds4::backend::CopyRegion{x + (size_t{96} << 20) + i * 1024, x + i * 2048, 4096};
    small("copy_many 14 x 4 KB (one launch)", [&](int) { ok(cuda::copy_many(regions, 14, nullptr)); });
    small("copy_many 14 x 4 KB as 14 copies", [&](int) {
      for (const ds4::backend::CopyRegion& r : regions) ok(cuda::copy_async(r.dst, r.src, r.bytes, nullptr));
    });
  }
  // A prefill group's compressor chain of 256 rows (Flash widths: ratio 4 over 2 x 512 columns,
  // FP8 rows; ratio 128 over 512): one launch per step, 16 steps per launch (compressor_steps),
  // and compressor_rows (the windows pooled in parallel, then the state). Scratch values (tiny
  // equal floats): only the times mean anything.
  for (const int R : {4, 128}) {
    const int D = 512, W = (R == 4 ? 2 : 1) * D, n = 256;
    float* base = x + (size_t{128} << 20);  // floats past the other ops' regions
    ds4::backend::CompressorRowsParams rp;
    ds4::backend::CompressorStepParams& c = rp.step;
    c.state_kv = base;
    c.state_score = base + (size_t{2} * R) * W;
    c.kv_cur = base + (size_t{4} * R) * W;
    c.sc_cur = c.kv_cur + static_cast<size_t>(n) * W;
    c.ape = reinterpret_cast<const uint16_t*>(c.sc_cur + static_cast<size_t>(n) * W);
    c.norm = c.sc_cur + static_cast<size_t>(n + R) * W;
    c.pooled = const_cast<float*>(c.norm) + D;
    c.out_fp8 = reinterpret_cast<uint8_t*>(c.pooled + D);
    c.ratio = R;
    c.head_dim = D;
    c.n_rot = 64;
    c.pos = 4096;
    c.rope.n_ctx_orig = 65536;
    rp.n = n;
    const int row_bytes = quant::fp8_row_bytes(D, 64);
    std::vector<ds4::backend::CompressorStepParams> steps(n, c);
    int emitted = 0;
    for (int i = 0; i < n; ++i) {
      steps[i].pos = c.pos + i;
      steps[i].kv_cur = c.kv_cur + static_cast<size_t>(i) * W;
      steps[i].sc_cur = c.sc_cur + static_cast<size_t>(i) * W;
      steps[i].out_fp8 = c.out_fp8 + static_cast<size_t>(emitted) * row_bytes;
      if ((steps[i].pos + 1) % R == 0) ++emitted;
    }
    char name[96];
    std::snprintf(name, sizeof name, "compressor 256 rows ratio %d, a launch per step", R);
    small(name, [&](int) {
      for (const auto& st : steps) ok(cuda::compressor_step(st, nullptr));
    });
    std::snprintf(name, sizeof name, "compressor 256 rows ratio %d, compressor_steps", R);
    small(name, [&](int) { ok(cuda::compressor_steps(steps.data(), n, nullptr)); });
    std::snprintf(name, sizeof name, "compressor 256 rows ratio %d, compressor_rows", R);
    small(name, [&](int) {
      bool done = false;
      ok(cuda::compressor_rows(rp, nullptr, &done));
      if (!done) std::fprintf(stderr, "bench_cuda: compressor_rows declined the chain\n");
    });
  }
  float* out = x + (size_t{64} << 20);
  // rms_norm: the staged kernel (the default) and the chunked one before it, side by side.
  {
    const cuda::RmsNormKernel saved = cuda::rms_norm_kernel_choice();
    for (const cuda::RmsNormKernel k : {cuda::RmsNormKernel::kStaged, cuda::RmsNormKernel::kChunked}) {
      cuda::set_rms_norm_kernel(k);
      const bool st = k == cuda::RmsNormKernel::kStaged;
      small(st ? "rms_norm 4096 x1 staged" : "rms_norm 4096 x1 chunked",
            [&](int) { ok(cuda::rms_norm(x, x + 8192, out, 4096, 0, 1, 1e-6f)); });
      small(st ? "rms_norm 4096 x8 staged" : "rms_norm 4096 x8 chunked",
            [&](int) { ok(cuda::rms_norm(x, x + 8192, out, 4096, 0, 8, 1e-6f)); });
      small(st ? "rms_norm 16384 x1 (hc flatten) staged" : "rms_norm 16384 x1 (hc flatten) chunked",
            [&](int) { ok(cuda::rms_norm(x, nullptr, out, 16384, 0, 1, 1e-6f)); });
    }
    cuda::set_rms_norm_kernel(saved);
  }
  // HC pre / collapse at the Flash shape (n_hc 4, n_embd 4096: fn F16 [16384 -> 24] / [-> 4]):
  // the one-launch kernels (ops.h, counters given: fused, staged) against the three launches
  // (rms_norm — the default staged kernel —, matvec_f16, finish). fn rotates over copies (>= 4x the L2, so every call reads it from DRAM, as decode
  // does per layer); x is one buffer (L2-resident, as after hc_post).
  {
    const int nhc = 4;
    const int64_t E = 4096, HC = nhc * E, kMix = 2 * nhc + nhc * nhc;
    const int kR = 8;
    const size_t rb = quant::row_bytes(GgmlType::kF16, HC);
    std::vector<float> hx(static_cast<size_t>(kR * HC)), hb(kMix);
    std::mt19937 rng(13);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (auto& f : hx) f = g(rng);
    for (auto& f : hb) f = 0.1f * g(rng);
    const float hs[3] = {0.05f, 0.05f, 0.05f};
    float *dx = nullptr, *dflat = nullptr, *dmix = nullptr, *dy = nullptr, *dpost = nullptr, *dcomb = nullptr;
    float *dscale = nullptr, *dbase = nullptr;
    uint32_t* tickets = nullptr;
    CK(cudaMalloc(&dx, hx.size() * sizeof(float)));
    CK(cudaMemcpy(dx, hx.data(), hx.size() * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dflat, sizeof(float) * kR * HC));
    CK(cudaMalloc(&dmix, sizeof(float) * kR * kMix));
    CK(cudaMalloc(&dy, sizeof(float) * kR * E));
    CK(cudaMalloc(&dpost, sizeof(float) * kR * nhc));
    CK(cudaMalloc(&dcomb, sizeof(float) * kR * nhc * nhc));
    CK(cudaMalloc(&dscale, sizeof hs));
    CK(cudaMemcpy(dscale, hs, sizeof hs, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dbase, sizeof(float) * kMix));
    CK(cudaMemcpy(dbase, hb.data(), sizeof(float) * kMix, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&tickets, sizeof(uint32_t) * cuda::kHcTicketRows));
    CK(cudaMemset(tickets, 0, sizeof(uint32_t) * cuda::kHcTicketRows));
    for (const int64_t n_out : {kMix, static_cast<int64_t>(nhc)}) {
      const bool pre = n_out == kMix;
      const size_t bytes = rb * n_out;
      const int copies = static_cast<int>(std::max<size_t>(1, (4 * info.l2_bytes + bytes - 1) / bytes));
      std::vector<float> hw(static_cast<size_t>(HC * n_out));
      for (auto& f : hw) f = 0.05f * g(rng);
      std::vector<uint8_t> host(bytes);
      quant::quantize_row(GgmlType::kF16, hw.data(), host.data(), HC * n_out);
      std::vector<void*> w(copies);
      for (auto& wp : w) {
        CK(cudaMalloc(&wp, bytes));
        CK(cudaMemcpy(wp, host.data(), bytes, cudaMemcpyHostToDevice));
      }
      for (int r : pre ? std::vector<int>{1, 8} : std::vector<int>{1}) {
        if (!rows_selected(r)) continue;
        // fused, staged, three launches (staged rms_norm and matvec_f16), three launches with the
        // kernels before (chunked rms_norm, tiled matvec_f16: the path as it was)
        // (path 4, hc_pre only: staged with one Sinkhorn iteration instead of DS4's 20, so the
        // difference to "staged" is the cost of the other 19 on the row's last block)
        // (path 5: staged with the decode dot's chains over its products: set_hc_products(true),
        // --cuda-hc-products; "staged" runs the chains over the weights and x)
        for (int path = 0; path < 6; ++path) {
          if (!pre && path == 4) continue;
          const bool fused = path < 2 || path >= 4;
          const std::string name = std::string(pre ? "hc_pre" : "hc_collapse") + " 4x4096 x" + std::to_string(r) +
                                   (path == 0   ? " fused"
                                    : path == 1 ? " staged"
                                    : path == 2 ? " 3-launch"
                                    : path == 3 ? " 3-launch old"
                                    : path == 4 ? " staged 1 iter"
                                                : " staged products");
          if (!selected(name.c_str())) continue;
          uint32_t* tk = fused ? tickets : nullptr;
          const cuda::HcKernel hk = path == 1 || path >= 4 ? cuda::HcKernel::kStaged : cuda::HcKernel::kFused;
          const ds4::backend::Matrix m{nullptr, GgmlType::kF16, HC, n_out, rb};
          auto fn = [&](int i) {
            if (pre) {
              ds4::backend::HcPreParams p;
              p.x = dx, p.fn = m, p.fn.data = static_cast<const uint8_t*>(w[i % copies]);
              p.scale = dscale, p.base = dbase;
              p.n_hc = nhc, p.n_embd = E, p.n_rows = r;
              if (path == 4) p.sinkhorn_iters = 1;
              p.flat = dflat, p.mix = dmix, p.y = dy, p.post = dpost, p.comb = dcomb;
              ok(cuda::hc_pre(p, nullptr, tk, hk));
            } else {
              ds4::backend::HcCollapseParams p;
              p.x = dx, p.fn = m, p.fn.data = static_cast<const uint8_t*>(w[i % copies]);
              p.scale = 0.05f, p.base = dbase;
              p.n_hc = nhc, p.n_embd = E, p.n_rows = r;
              p.flat = dflat, p.mix = dmix, p.y = dy;
              ok(cuda::hc_collapse(p, nullptr, tk, hk));
            }
          };
          const cuda::RmsNormKernel saved = cuda::rms_norm_kernel_choice();
          const cuda::DenseNarrowKernel narrow_saved = cuda::dense_narrow_kernel();
          if (path == 3) {
            cuda::set_rms_norm_kernel(cuda::RmsNormKernel::kChunked);
            cuda::set_dense_narrow_kernel(cuda::DenseNarrowKernel::kTiled);
          }
          cuda::set_hc_products(path == 5);
          std::printf("%-40s %10.2f\n", name.c_str(), time_per_call(fn, std::max(copies, 50)) * 1e6);
          cuda::set_hc_products(false);
          cuda::set_rms_norm_kernel(saved);
          cuda::set_dense_narrow_kernel(narrow_saved);
        }
      }
      for (void* wp : w) CK(cudaFree(wp));
    }
    for (void* ptr : {static_cast<void*>(dx), static_cast<void*>(dflat), static_cast<void*>(dmix),
                    static_cast<void*>(dy), static_cast<void*>(dpost), static_cast<void*>(dcomb),
                    static_cast<void*>(dscale), static_cast<void*>(dbase), static_cast<void*>(tickets)})
      CK(cudaFree(ptr));
  }
  small("top_two 129280 (Flash vocab)", [&](int) {
    ok(cuda::top_two(x, 129280, -1, reinterpret_cast<cuda::TopTwoResult*>(sink)));
  });
  small("top_two 8192 (tiny vocab)", [&](int) {
    ok(cuda::top_two(x, 8192, -1, reinterpret_cast<cuda::TopTwoResult*>(sink)));
  });
  // The read-outs: sampling (top_k) and DSpark's verify rows (argmax with a margin) on
  // Gaussian logits rows; top_k also on the all-equal scratch (every value ties: its worst case).
  {
    const int64_t V = 129280;
    std::vector<float> lg(static_cast<size_t>(8 * V));
    std::mt19937 rng(5);
    std::normal_distribution<float> g(0.0f, 3.0f);
    for (auto& f : lg) f = g(rng);
    float* dl = nullptr;
    int32_t* di = nullptr;
    float* dv = nullptr;
    CK(cudaMalloc(&dl, lg.size() * sizeof(float)));
    CK(cudaMemcpy(dl, lg.data(), lg.size() * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&di, sizeof(int32_t) * 8 * ds4::backend::kTopKMax));
    CK(cudaMalloc(&dv, sizeof(float) * 8 * ds4::backend::kTopKMax));
    auto topk = [&](const float* rows, int64_t n, int r, int k) {
      ok(cuda::top_k(ds4::backend::TopKParams{rows, n, n, r, k, -1, di, dv}, nullptr));
    };
    small("top_k 129280 k=256 x1 (sampling)", [&](int) { topk(dl, V, 1, 256); });
    small("top_k 129280 k=40 x1", [&](int) { topk(dl, V, 1, 40); });
    small("top_k 8192 k=256 x1 (tiny vocab)", [&](int) { topk(dl, 8192, 1, 256); });
    small("top_k 129280 k=256 x1 (all values equal)", [&](int) { topk(x, V, 1, 256); });
    small("argmax 129280 x8", [&](int) {
      ok(cuda::argmax(ds4::backend::ArgmaxParams{dl, V, V, 8, di, -1, nullptr}, nullptr));
    });
    small("argmax+margin 129280 x8 (verify rows)", [&](int) {
      ok(cuda::argmax(ds4::backend::ArgmaxParams{dl, V, V, 8, di, -1, dv}, nullptr));
    });
    CK(cudaFree(dl));
    CK(cudaFree(di));
    CK(cudaFree(dv));
  }
  // Sink attention (ops.h sink_attention) at Flash widths, 64 heads x 512, one query: a full
  // raw window of 128 rows plus 256 compressed rows (ratio 4 at the 1K frontier), and at 8K
  // (2048 compressed rows) all allowed or the indexer's 512 allowed. Gaussian keys and queries.
  // Keys as the target stores them (f16 raw rows, FP8 compressed rows), and the 8K case once
  // more as f32 keys (the drafter's kind, and the layout before the compact stores).
  {
    const int nh = 64, D = 512, n_raw = 128;
    const int64_t max_comp = 2048;
    std::vector<float> hv(static_cast<size_t>((n_raw + max_comp + nh) * D));
    std::mt19937 rng(9);
    std::normal_distribution<float> g(0.0f, 1.0f);
    for (auto& f : hv) f = g(rng);
    std::vector<uint8_t> allow(max_comp, 0);
    for (int i = 0; i < 512; ++i) allow[(i * 389) % max_comp] = 1;  // 512 distinct rows (389 odd)
    float *dv = nullptr, *dsc = nullptr, *dout = nullptr, *dsink = nullptr;
    uint8_t* dallow = nullptr;
    CK(cudaMalloc(&dv, hv.size() * sizeof(float)));
    CK(cudaMemcpy(dv, hv.data(), hv.size() * sizeof(float), cudaMemcpyHostToDevice));
    std::vector<uint16_t> hk(static_cast<size_t>((n_raw + max_comp) * D));  // the keys as f16
    for (size_t i = 0; i < hk.size(); ++i) hk[i] = ds4::quant::f32_to_f16(hv[i]);
    uint16_t* dk = nullptr;
    CK(cudaMalloc(&dk, hk.size() * sizeof(uint16_t)));
    CK(cudaMemcpy(dk, hk.data(), hk.size() * sizeof(uint16_t), cudaMemcpyHostToDevice));
    const int fp8_row = ds4::quant::fp8_row_bytes(D, 64);  // the compressed rows as FP8 stores
    std::vector<uint8_t> h8(static_cast<size_t>(max_comp * fp8_row));
    for (int64_t r = 0; r < max_comp; ++r) {
      std::vector<float> row(hv.begin() + (n_raw + r) * D, hv.begin() + (n_raw + r + 1) * D);
      ds4::quant::fp8_kv_row_store(row.data(), D, 64, h8.data() + r * fp8_row);
    }
    uint8_t* d8 = nullptr;
    CK(cudaMalloc(&d8, h8.size()));
    CK(cudaMemcpy(d8, h8.data(), h8.size(), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dallow, max_comp));
    CK(cudaMemcpy(dallow, allow.data(), max_comp, cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dsc, sizeof(float) * nh * (n_raw + max_comp)));
    CK(cudaMalloc(&dout, sizeof(float) * nh * D));
    CK(cudaMalloc(&dsink, sizeof(float) * nh));
    CK(cudaMemcpy(dsink, hv.data(), sizeof(float) * nh, cudaMemcpyHostToDevice));
    auto sink_params = [&](int64_t n_comp, bool masked, bool f32_keys) {
      ds4::backend::SinkAttentionParams p;
      p.q = dv + (n_raw + max_comp) * D;
      if (f32_keys) {
        p.raw = dv;
        p.comp = dv + n_raw * D;
      } else {
        p.raw_f16 = dk;
        p.comp_fp8 = d8;
      }
      p.raw_cap = n_raw;
      p.raw_first = 1000;
      p.n_raw = n_raw;
      p.n_comp = n_comp;
      p.comp_allowed = masked ? dallow : nullptr;
      p.sinks = dsink;
      p.n_head = nh;
      p.head_dim = D;
      p.scores = dsc;
      p.out = dout;
      p.n_rot = 64;
      p.pos = 1000 + n_raw;
      p.rope.n_ctx_orig = 65536;
      return p;
    };
    auto sink_case = [&](const char* name, int64_t n_comp, bool masked, bool f32_keys = false) {
      const ds4::backend::SinkAttentionParams p = sink_params(n_comp, masked, f32_keys);
      small(name, [&](int) { ok(cuda::sink_attention(&p, 1, nullptr)); });
    };
    sink_case("sink_attention 64x512 raw 128 + comp 256 (1K)", 256, false);
    sink_case("sink_attention 64x512 raw 128 + comp 2048 (8K)", 2048, false);
    sink_case("sink_attention 64x512 raw 128 + 512 of 2048 (8K)", 2048, true);
    sink_case("sink_attention 64x512 raw 128 only", 0, false);
    sink_case("sink_attention 64x512 raw 128 + comp 2048 (8K), f32 keys", 2048, false, true);
    // The fused kernel on a decode's one query (one block per 8 heads: 8 blocks).
    for (const int64_t n_comp : {int64_t{256}, int64_t{2048}}) {
      const ds4::backend::SinkAttentionParams p = sink_params(n_comp, false, false);
      small(n_comp == 256 ? "sink_attention 64x512 raw 128 + comp 256 (1K), fused"
                          : "sink_attention 64x512 raw 128 + comp 2048 (8K), fused",
            [&](int) {
              bool done = false;
              ok(cuda::sink_attention_fused(&p, 1, nullptr, &done));
            });
    }
    // A prefill group of 32 rows at the 2K frontier (each 128 raw rows, sliding, + 512 compressed
    // rows, all allowed; its own scores and output): the split kernels (launches of 8 queries,
    // --cuda-attn split) against the fused kernel (one launch, --cuda-attn fused).
    {
      const int nq = 32;
      const int64_t n_comp = 512;
      float *gs = nullptr, *go = nullptr;
      CK(cudaMalloc(&gs, sizeof(float) * nq * nh * (n_raw + n_comp)));
      CK(cudaMalloc(&go, sizeof(float) * nq * nh * D));
      std::vector<ds4::backend::SinkAttentionParams> ps(nq, sink_params(n_comp, false, false));
      for (int i = 0; i < nq; ++i) {
        ps[i].raw_first = 1000 + i;
        ps[i].pos = 1000 + n_raw + i;
        ps[i].scores = gs + static_cast<int64_t>(i) * nh * (n_raw + n_comp);
        ps[i].out = go + static_cast<int64_t>(i) * nh * D;
      }
      const cuda::SinkKernel saved = cuda::sink_kernel();
      cuda::set_sink_kernel(cuda::SinkKernel::kSplit);
      small("sink_attention 32 queries x 64x512, raw 128 + comp 512 (2K prefill group), split",
            [&](int) { ok(cuda::sink_attention(ps.data(), nq, nullptr)); });
      small("sink_attention 32 queries x 64x512, raw 128 + comp 512 (2K prefill group), fused", [&](int) {
        bool done = false;
        ok(cuda::sink_attention_fused(ps.data(), nq, nullptr, &done));
        if (!done) std::fprintf(stderr, "bench_cuda: the fused sink kernel declined the prefill group\n");
      });
      cuda::set_sink_kernel(saved);
      CK(cudaFree(gs));
      CK(cudaFree(go));
    }
    CK(cudaFree(dv));
    CK(cudaFree(dk));
    CK(cudaFree(d8));
    CK(cudaFree(dallow));
    CK(cudaFree(dsc));
    CK(cudaFree(dout));
    CK(cudaFree(dsink));
  }
  CK(cudaDeviceSynchronize());
  CK(cudaFree(q));
  CK(cudaFree(src));
  CK(cudaFree(sink));
  return 0;
}
