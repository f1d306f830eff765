// tests/cuda/q8_0_tc_test.cpp — the Q8_0 tensor-core GEMM of many activation rows
// (backend/cuda/matmul_q8_0_tc.cu) against the CPU oracle, bit for bit.
//
// For each shape (the DS4 Flash Q8_0 shapes and odd ones: partial tiles of outputs and rows, a
// tail chunk of fewer than 8 blocks, rows not 16-byte aligned, padded rows, x rows not 16-byte
// aligned) and row counts 16, 17, 64, 100, 300 (and a few forced below 16), the GEMM under each
// tile (kTcLarge / kTcMedium / kTcSmall) and under matvec_q8_0's default dispatch must give
// quant::dot_q8_0's bits for every output it is compared on (all of them on small shapes, a
// sample of output columns on large ones: every row, the first and last 20 outputs and every
// step-th), the same bits as the r <= 8 kernels (kMatvec: every output; batch invariance across
// kernels), and leave y's padding columns untouched. Inputs carry the special values of
// cuda_kernels_test (NaN / ±inf / zero / -0 / subnormal activations, ties) and special weight
// blocks (d = 0, -0, a subnormal, 65504, inf; quants all -128 or 127). The matmul op (ops.h: the
// activation quantization included) and the grouped output LoRA (matmul_grouped) are checked at
// prefill row counts too. Without a usable GPU every test skips with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/ops.h"
#include "quant/quant.h"
#include "tests/cuda/device_buf.h"

namespace ds4::cuda {
namespace {

using gguf::GgmlType;
using test_util::bit_mismatches;
using test_util::DeviceBuf;
using test_util::to_device;

class Q8_0Tc : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status s = probe_device(0, &info_);
    if (!s.ok()) GTEST_SKIP() << "no usable CUDA device: " << s.message();
  }
  DeviceInfo info_;
};

// Restores the process-wide many-rows kernel choice when a scope ends.
struct RowsKernelScope {
  explicit RowsKernelScope(Q8_0RowsKernel k) : saved(q8_0_rows_kernel()) { set_q8_0_rows_kernel(k); }
  ~RowsKernelScope() { set_q8_0_rows_kernel(saved); }
  Q8_0RowsKernel saved;
};

// Block-wise activation patterns (as cuda_kernels_test's activation_rows): wide magnitudes,
// .5 ties, zero / -0 blocks, subnormals, a maximum of both signs and, unless finite, NaN / ±inf
// in every 5th row (such a row's dots are all NaN; the others stay finite).
std::vector<float> activation_rows(int rows, int64_t n, uint32_t seed, bool finite) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows) * n);
  const float qnan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < static_cast<int64_t>(x.size()) / 32; ++b) {
    float* xb = x.data() + b * 32;
    const float mag = std::ldexp(1.0f, static_cast<int>(b % 41) - 20);
    for (int i = 0; i < 32; ++i) xb[i] = g(rng) * mag;
    switch (b % 13) {
      case 1: for (int i = 0; i < 32; ++i) xb[i] = 0.0f; break;
      case 2: for (int i = 0; i < 32; ++i) xb[i] = (i % 2) ? -0.0f : 0.0f; break;
      case 3: for (int i = 0; i < 32; ++i) xb[i] = static_cast<float>(i - 16) * 0.5f; break;
      case 4: if (!finite && (b * 32 / n) % 5 == 2) xb[5] = qnan; break;  // NaN / inf rows: every 5th
      case 5: if (!finite && (b * 32 / n) % 5 == 3) xb[9] = inf; break;
      case 7: for (int i = 0; i < 32; ++i) xb[i] = g(rng) * 1e-41f; break;
      case 8: xb[2] = -4.0f * mag * 8; xb[30] = 4.0f * mag * 8; break;
      default: break;
    }
  }
  return x;
}

// n_out random Q8_0 rows of n_in, rb bytes apart (>= 34·n_in/32; padding bytes random too), with
// special blocks: d = 0, -0, the smallest subnormal, 65504 (and inf unless finite); quants all
// -128 or all 127.
std::vector<uint8_t> weight_rows(int64_t n_in, int64_t n_out, size_t rb, uint64_t seed, bool finite) {
  const int64_t nb = n_in / 32;
  const size_t dense = static_cast<size_t>(nb) * 34;
  std::vector<uint8_t> packed(dense * n_out);
  quant::fill_random_blocks(GgmlType::kQ8_0, packed.data(), n_in * n_out, 0.05f, seed);
  std::vector<uint8_t> w(rb * n_out, 0x5a);
  for (int64_t o = 0; o < n_out; ++o) {
    uint8_t* row = w.data() + o * rb;
    std::memcpy(row, packed.data() + o * dense, dense);
    for (int64_t b = 0; b < nb; ++b) {
      uint8_t* blk = row + b * 34;
      auto set_d = [&](uint16_t d) { std::memcpy(blk, &d, 2); };
      switch ((o * nb + b) % 29) {
        case 3: set_d(0x0000); break;
        case 7: set_d(0x8000); break;
        case 11: set_d(0x0001); break;
        case 13: set_d(0x7bff); break;
        case 17: std::memset(blk + 2, 0x80, 32); break;
        case 19: std::memset(blk + 2, 0x7f, 32); break;
        case 23: if (!finite && o % 5 == 0) set_d(0x7c00); break;
        default: break;
      }
    }
  }
  return w;
}

// The output columns compared with the CPU: all when `step` is 1, else the first and last 20
// and every step-th.
std::vector<int64_t> sample_outputs(int64_t n_out, int64_t step) {
  std::vector<int64_t> o;
  for (int64_t i = 0; i < n_out; ++i)
    if (step <= 1 || i < 20 || i >= n_out - 20 || i % step == 0) o.push_back(i);
  return o;
}

struct Case {
  int64_t n_in, n_out;
  int64_t step = 1;     // output sampling for the CPU comparison
  bool pad_rows = false;  // rows padded to a multiple of 16 bytes
  int64_t x_extra = 0;    // x_stride = nb + x_extra blocks
};

// One shape at row counts rs: the forced GEMM under every tile, matvec_q8_0 as dispatched,
// and the r <= 8 kernels (kMatvec), against the CPU and each other.
void tc_case(const Case& c, std::initializer_list<int> rs, bool finite, uint32_t seed) {
  const int64_t nb = c.n_in / 32;
  const size_t dense = static_cast<size_t>(nb) * 34;
  const size_t rb = c.pad_rows ? (dense + 15) / 16 * 16 : dense;
  const int r_max = *std::max_element(rs.begin(), rs.end());
  const int64_t xs = nb + c.x_extra, ys = c.n_out + 3;
  const auto w = weight_rows(c.n_in, c.n_out, rb, seed, finite);
  const auto xf = activation_rows(r_max, c.n_in, seed + 1, finite);
  std::vector<quant::BlockQ8_0Act> xq(static_cast<size_t>(r_max) * xs);
  for (int k = 0; k < r_max; ++k) quant::quantize_q8_0_act(xf.data() + k * c.n_in, xq.data() + k * xs, c.n_in);
  auto dw = to_device(w);
  auto dx = to_device(xq);
  const Weights wv{dw->as<uint8_t>(), rb, c.n_in, c.n_out};
  const auto outs = sample_outputs(c.n_out, c.step);
  for (int r : rs) {
    // The CPU oracle on the sampled outputs of every row.
    std::vector<float> want(static_cast<size_t>(r) * outs.size());
    for (int k = 0; k < r; ++k)
      for (size_t i = 0; i < outs.size(); ++i)
        want[k * outs.size() + i] = quant::dot_q8_0(
            reinterpret_cast<const quant::BlockQ8_0*>(w.data() + outs[i] * rb), xq.data() + k * xs, nb);
    const std::string shape = std::to_string(c.n_in) + "x" + std::to_string(c.n_out) + (c.pad_rows ? " padded" : "") +
                              " xs+" + std::to_string(c.x_extra) + " r=" + std::to_string(r) +
                              (finite ? "" : " special");
    DeviceBuf dy(sizeof(float) * ys * r);
    std::vector<float> old_path;
    struct Variant {
      Q8_0RowsKernel k;
      bool forced;
      const char* name;
    };
    const Variant variants[] = {{Q8_0RowsKernel::kMatvec, false, "matvec (r<=8 kernels)"},
                                {Q8_0RowsKernel::kAuto, false, "matvec_q8_0 auto"},
                                {Q8_0RowsKernel::kTcLarge, true, "tc large"},
                                {Q8_0RowsKernel::kTcMedium, true, "tc medium"},
                                {Q8_0RowsKernel::kTcSmall, true, "tc small"}};
    for (const Variant& v : variants) {
      const std::string what = std::string(v.name) + " " + shape;
      RowsKernelScope scope(v.k);
      dy.poison();
      const quant::BlockQ8_0Act* xd = dx->as<quant::BlockQ8_0Act>();
      const Status st = v.forced ? matmul_q8_0_tc(wv, xd, xs, r, dy.as<float>(), ys)
                                 : matvec_q8_0(wv, xd, xs, r, dy.as<float>(), ys);
      ASSERT_TRUE(st.ok()) << what << ": " << st.to_string();
      ASSERT_TRUE(synchronize().ok()) << what;
      const auto got = dy.get_vec<float>(static_cast<size_t>(ys) * r);
      std::vector<float> gs(want.size());
      size_t pad_touched = 0;
      for (int k = 0; k < r; ++k) {
        for (size_t i = 0; i < outs.size(); ++i) gs[k * outs.size() + i] = got[k * ys + outs[i]];
        for (int64_t o = c.n_out; o < ys; ++o) {
          uint32_t b;
          std::memcpy(&b, &got[k * ys + o], 4);
          pad_touched += b != 0xffffffffu ? 1 : 0;
        }
      }
      EXPECT_EQ(0u, bit_mismatches(gs.data(), want.data(), want.size(), what + " vs cpu")) << what;
      EXPECT_EQ(0u, pad_touched) << what << ": wrote outside [0, n_out) of a row";
      if (v.k == Q8_0RowsKernel::kMatvec) {
        old_path = got;
      } else {
        size_t bad = 0;  // every output: the same bits as the r <= 8 kernels
        for (int k = 0; k < r && bad == 0; ++k)
          bad += bit_mismatches(got.data() + k * ys, old_path.data() + k * ys, c.n_out,
                                what + " vs r<=8 kernels, row " + std::to_string(k));
        EXPECT_EQ(0u, bad) << what;
      }
      if (::testing::Test::HasFailure()) return;
    }
  }
}

TEST_F(Q8_0Tc, GemmBitsEqualCpuOnFlashShapes) {
  // attn_q_a / attn_kv / output-LoRA half / shared expert (4096 -> 1024, 512, 2048), and, with
  // sampled outputs, attn_q_b 1024 -> 32768, the output projections 8192 / 32768 -> 4096 and the
  // vocabulary head 4096 -> 129280.
  tc_case({4096, 1024, 3}, {16, 17, 64, 100, 300}, true, 11);
  tc_case({4096, 1024, 3}, {17, 100}, false, 12);
  tc_case({4096, 512}, {16, 64, 300}, true, 13);
  tc_case({4096, 2048, 5}, {100}, true, 14);
  tc_case({1024, 32768, 11}, {17, 100}, true, 15);
  tc_case({8192, 4096, 13}, {64}, true, 16);
  tc_case({32768, 4096, 41}, {16, 17}, true, 17);
  tc_case({4096, 129280, 257}, {16, 300}, true, 18);
}

TEST_F(Q8_0Tc, GemmBitsEqualCpuOnOddShapes) {
  // One block per row; 3 blocks (102-byte rows: 2-byte copies); 33 and 257 blocks (a tail chunk
  // of 1); 130 blocks (tail of 2); 72 blocks (16-byte rows, whole chunks); padded 16-byte rows
  // with a tail chunk; x rows 1 or 4 blocks longer (4-byte / 16-byte activation copies); output
  // counts that leave partial tiles; row counts below the dispatch threshold, forced.
  for (bool finite : {true, false}) {
    const uint32_t s = finite ? 100 : 200;
    tc_case({32, 1}, {1, 16, 17, 64}, finite, s + 1);
    tc_case({96, 13}, {5, 16, 17, 100}, finite, s + 2);
    tc_case({1056, 37}, {16, 17, 64, 100, 300}, finite, s + 3);
    tc_case({8224, 4099, 7}, {16, 100}, finite, s + 4);
    tc_case({4160, 3}, {17, 130}, finite, s + 5);
    tc_case({2304, 1030}, {1, 16, 65, 129}, finite, s + 6);
    tc_case({1056, 200, 1, true}, {16, 100}, finite, s + 7);
    tc_case({2048, 300, 1, false, 1}, {17, 64}, finite, s + 8);
    tc_case({2048, 300, 1, true, 4}, {17, 64}, finite, s + 9);
    if (HasFatalFailure()) return;
  }
}

// The matmul op (ops.h: quantize_q8_0_act into the scratch, then one GEMM) at prefill row
// counts, x and y rows padded, against quant's quantizer and dot.
TEST_F(Q8_0Tc, MatmulOpBitsEqualCpu) {
  for (int rows : {16, 64, 100}) {
    const int64_t n_in = 4096, n_out = 1024, xs = n_in + 4, ys = n_out + 5, nb = n_in / 32;
    const size_t rb = static_cast<size_t>(nb) * 34;
    const auto w = weight_rows(n_in, n_out, rb, 300 + rows, true);
    const auto x = activation_rows(rows, xs, 400 + rows, true);
    std::vector<float> want(static_cast<size_t>(rows) * n_out);
    std::vector<quant::BlockQ8_0Act> xq(nb);
    for (int k = 0; k < rows; ++k) {
      quant::quantize_q8_0_act(x.data() + k * xs, xq.data(), n_in);
      for (int64_t o = 0; o < n_out; ++o)
        want[k * n_out + o] = quant::dot_q8_0(reinterpret_cast<const quant::BlockQ8_0*>(w.data() + o * rb), xq.data(), nb);
    }
    auto dw = to_device(w);
    auto dx = to_device(x);
    DeviceBuf dy(sizeof(float) * ys * rows), scratch(matmul_scratch_bytes(n_in, rows));
    dy.poison();
    backend::MatmulParams p;
    p.w = backend::Matrix{dw->as<uint8_t>(), GgmlType::kQ8_0, n_in, n_out, rb};
    p.x = dx->as<float>(), p.x_stride = xs, p.y = dy.as<float>(), p.y_stride = ys, p.n_rows = rows;
    const Status st = matmul(p, OpScratch{scratch.data(), scratch.bytes()}, nullptr);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(synchronize().ok());
    const auto got = dy.get_vec<float>(static_cast<size_t>(ys) * rows);
    std::vector<float> g(want.size());
    for (int k = 0; k < rows; ++k)
      for (int64_t o = 0; o < n_out; ++o) g[k * n_out + o] = got[k * ys + o];
    EXPECT_EQ(0u, bit_mismatches(g.data(), want.data(), want.size(), "matmul op rows=" + std::to_string(rows)));
  }
}

// The grouped output LoRA at prefill row counts (ops.h matmul_grouped: 8 groups of 4096 ->
// 1024 reading columns [4096g, +4096) of x and writing columns [1024g, +1024) of y), the GEMM
// with blockIdx.z = group, against the CPU on a sample of outputs.
TEST_F(Q8_0Tc, MatmulGroupedBitsEqualCpu) {
  constexpr int kGroups = 8;
  const int64_t n_in = 4096, n_out = 1024, nb = n_in / 32, xs = kGroups * n_in, ys = kGroups * n_out;
  const size_t rb = static_cast<size_t>(nb) * 34;
  const auto w = weight_rows(n_in, kGroups * n_out, rb, 500, true);
  auto dw = to_device(w);
  for (int rows : {16, 100}) {
    const auto x = activation_rows(rows, xs, 600 + rows, true);
    auto dx = to_device(x);
    DeviceBuf dy(sizeof(float) * ys * rows);
    dy.poison();
    std::vector<backend::MatmulParams> p(kGroups);
    for (int g = 0; g < kGroups; ++g) {
      p[g].w = backend::Matrix{dw->as<uint8_t>(), GgmlType::kQ8_0, n_in, kGroups * n_out, rb}.rows(g * n_out, n_out);
      p[g].x = dx->as<float>() + g * n_in, p[g].x_stride = xs;
      p[g].y = dy.as<float>() + g * n_out, p[g].y_stride = ys;
      p[g].n_rows = rows;
    }
    ASSERT_TRUE(grouped_q8_0(p.data(), kGroups));
    DeviceBuf scratch(matmul_grouped_scratch_bytes(p.data(), kGroups));
    const Status st = matmul_grouped(p.data(), kGroups, OpScratch{scratch.data(), scratch.bytes()}, nullptr);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(synchronize().ok());
    const auto got = dy.get_vec<float>(static_cast<size_t>(ys) * rows);
    const auto outs = sample_outputs(ys, 7);
    std::vector<float> want, g;
    std::vector<quant::BlockQ8_0Act> xq(nb);
    for (int k = 0; k < rows; ++k) {
      for (int grp = 0; grp < kGroups; ++grp) {
        quant::quantize_q8_0_act(x.data() + k * xs + grp * n_in, xq.data(), n_in);
        for (int64_t oc : outs) {
          if (oc / n_out != grp) continue;
          want.push_back(quant::dot_q8_0(reinterpret_cast<const quant::BlockQ8_0*>(w.data() + oc * rb), xq.data(), nb));
          g.push_back(got[k * ys + oc]);
        }
      }
    }
    EXPECT_EQ(0u, bit_mismatches(g.data(), want.data(), want.size(), "matmul_grouped rows=" + std::to_string(rows)));
  }
}

}  // namespace
}  // namespace ds4::cuda
