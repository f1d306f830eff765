// tests/cuda/cuda_kernels_test.cpp — backend/cuda kernels against the CPU oracle, bit for bit.
//
// Each test draws fresh random inputs (tiny and DS4 Flash widths, odd block counts that put
// block fields at 2 mod 4, output counts that leave partial warps/blocks, r = 1..8 and a
// tiled r = 11), runs the kernel on device 0 into an output poisoned with a NaN pattern, and
// compares every element's BITS with the CPU definition: quant's activation quantizers and
// reference dots (quant/dot.h; backend/cpu's SIMD kernels are tested equal to them in
// tests/kernels), backend/cpu's rms_norm_row and core/reduce.h's top_two_scalar.
// The fused r = 1 Q8_0 matvec (matvec_q8_0_r1_f32: f32 row in, quantized inside the staged
// kernel) is checked against the CPU and against the two launches it replaces. The many-row
// F16 / F32 kernel (matvec_f16_rows / matvec_f32_rows) runs r = 1..100.
// Without a usable GPU every test skips with the reason probe_device gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/ops.h"
#include "tests/cuda/device_buf.h"
#include "tests/cuda/kernel_scopes.h"
#include "core/reduce.h"
#include "quant/quant.h"

namespace ds4::cuda {
namespace {

using gguf::GgmlType;

using test_util::bit_mismatches;
using test_util::PersistentScope;
using test_util::R1KernelScope;
using test_util::DeviceBuf;
using test_util::to_device;

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status s = probe_device(0, &info_);
    if (!s.ok()) GTEST_SKIP() << "no usable CUDA device: " << s.message();
  }
  void sync() {
    const Status s = synchronize();
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  DeviceInfo info_;
};

std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng) * scale;
  return x;
}

// Rows of block-wise patterns: wide magnitudes, exact .5 ties, zero / -0 blocks, subnormals,
// NaN and ±inf (unless `finite`: a NaN or inf activation makes every dot of its row NaN), and
// a largest |x| that occurs twice with both signs.
std::vector<float> activation_rows(int rows, int64_t n, uint32_t seed, bool finite = false) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows) * n);
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < static_cast<int64_t>(x.size()) / 32; ++b) {
    float* xb = x.data() + b * 32;
    const float mag = std::ldexp(1.0f, static_cast<int>(b % 41) - 20);
    for (int i = 0; i < 32; ++i) xb[i] = g(rng) * mag;
    switch (b % 13) {
      case 1: for (int i = 0; i < 32; ++i) xb[i] = 0.0f; break;
      case 2: for (int i = 0; i < 32; ++i) xb[i] = (i % 2) ? -0.0f : 0.0f; break;
      case 3: for (int i = 0; i < 32; ++i) xb[i] = static_cast<float>(i - 16) * 0.5f; break;
      case 4: if (!finite) xb[5] = qnan; break;
      case 5: if (!finite) xb[9] = inf; break;
      case 6: if (!finite) { xb[3] = -inf; xb[20] = qnan; } break;
      case 7: for (int i = 0; i < 32; ++i) xb[i] = g(rng) * 1e-41f; break;
      case 8: xb[2] = -4.0f * mag * 8; xb[30] = 4.0f * mag * 8; break;
      case 9: xb[7] = 3.0f * mag * 8; xb[8] = -3.0f * mag * 8; break;
      default: break;
    }
  }
  return x;
}

TEST_F(CudaKernels, QuantizeQ8_0ActBytesEqualCpu) {
  for (int64_t n : {32, 96, 4096, 16384}) {
    const int rows = 5;
    const int64_t nb = n / 32;
    const auto x = activation_rows(rows, n, static_cast<uint32_t>(n));
    std::vector<quant::BlockQ8_0Act> want(rows * nb), got(rows * nb);
    for (int k = 0; k < rows; ++k) quant::quantize_q8_0_act(x.data() + k * n, want.data() + k * nb, n);
    auto dx = to_device(x);
    DeviceBuf dq(got.size() * sizeof(got[0]));
    dq.poison();
    ASSERT_TRUE(quantize_q8_0_act(dx->as<float>(), n, rows, n, dq.as<quant::BlockQ8_0Act>(), nb).ok());
    sync();
    dq.get(got.data(), got.size() * sizeof(got[0]));
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(got[0]))) << "n=" << n;
  }
}

TEST_F(CudaKernels, QuantizeQ8_KActBytesEqualCpu) {
  for (int64_t n : {256, 2048, 4096}) {
    const int rows = 5;
    const int64_t nb = n / 256;
    const auto x = activation_rows(rows, n, static_cast<uint32_t>(n) + 7);
    std::vector<quant::BlockQ8K> want(rows * nb), got(rows * nb);
    for (int k = 0; k < rows; ++k) quant::quantize_q8_k_act(x.data() + k * n, want.data() + k * nb, n);
    auto dx = to_device(x);
    DeviceBuf dq(got.size() * sizeof(got[0]));
    dq.poison();
    ASSERT_TRUE(quantize_q8_k_act(dx->as<float>(), n, rows, n, dq.as<quant::BlockQ8K>(), nb).ok());
    sync();
    dq.get(got.data(), got.size() * sizeof(got[0]));
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(got[0]))) << "n=" << n;
  }
}

struct Shape {
  int64_t n_in, n_out;
};

// Random valid weight rows of type t (F32 / F16 drawn directly).
std::vector<uint8_t> random_weights(GgmlType t, const Shape& s, uint64_t seed) {
  const size_t rb = quant::row_bytes(t, s.n_in);
  std::vector<uint8_t> w(rb * s.n_out);
  if (t == GgmlType::kF32 || t == GgmlType::kF16) {
    const auto v = gaussian(static_cast<size_t>(s.n_in * s.n_out), static_cast<uint32_t>(seed), 0.05f);
    quant::quantize_row(t, v.data(), w.data(), s.n_in * s.n_out);
  } else {
    quant::fill_random_blocks(t, w.data(), s.n_in * s.n_out, 0.05f, seed);
  }
  return w;
}

// Runs launcher `run` for each r of `rs` (default 1..8 and 11) and compares with `ref(o, k)`
// for every output.
template <typename Act, typename Run, typename Ref>
void check_matvec(GgmlType t, const Shape& s, const std::vector<Act>& x_host, int64_t x_stride, Run run,
                  Ref ref, const std::string& name,
                  std::initializer_list<int> rs = {1, 2, 3, 4, 5, 6, 7, 8, 11}) {
  const auto w = random_weights(t, s, static_cast<uint64_t>(s.n_in * 131 + s.n_out));
  auto dw = to_device(w);
  auto dx = to_device(x_host);
  const Weights wv{dw->as<uint8_t>(), quant::row_bytes(t, s.n_in), s.n_in, s.n_out};
  for (int r : rs) {
    const int64_t y_stride = s.n_out + 3;
    DeviceBuf dy(sizeof(float) * y_stride * r);
    dy.poison();
    const Status st = run(wv, dx->template as<Act>(), x_stride, r, dy.as<float>(), y_stride);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(synchronize().ok());
    std::vector<float> got(static_cast<size_t>(y_stride) * r);
    dy.get(got.data(), got.size() * sizeof(float));
    std::vector<float> want(got.size()), gk(got.size());
    size_t m = 0;
    for (int k = 0; k < r; ++k)
      for (int64_t o = 0; o < s.n_out; ++o) {
        want[m] = ref(w.data() + o * wv.row_bytes, x_host.data() + k * x_stride, s.n_in);
        gk[m++] = got[k * y_stride + o];
      }
    size_t nan_refs = 0;
    for (size_t i = 0; i < m; ++i) nan_refs += std::isnan(want[i]) ? 1 : 0;
    EXPECT_EQ(0u, nan_refs) << name << ": finite inputs must give finite reference dots";
    EXPECT_EQ(0u, bit_mismatches(gk.data(), want.data(), m,
                                 name + " " + std::to_string(s.n_in) + "x" + std::to_string(s.n_out) +
                                     " r=" + std::to_string(r)));
  }
}

constexpr int kMaxTestRows = 11;

// mma: matvec_q8_0_mma (the tensor-core kernel whatever the shape) instead of matvec_q8_0.
void q8_0_case(const Shape& s, std::initializer_list<int> rs = {1, 2, 3, 4, 5, 6, 7, 8, 11}, bool mma = false) {
  const int64_t nb = s.n_in / 32;
  const auto x = gaussian(static_cast<size_t>(kMaxTestRows * s.n_in), 3);
  std::vector<quant::BlockQ8_0Act> xq(kMaxTestRows * nb);
  for (int k = 0; k < kMaxTestRows; ++k) quant::quantize_q8_0_act(x.data() + k * s.n_in, xq.data() + k * nb, s.n_in);
  check_matvec<quant::BlockQ8_0Act>(
      GgmlType::kQ8_0, s, xq, nb,
      [mma](const Weights& w, const quant::BlockQ8_0Act* xd, int64_t xs, int r, float* y, int64_t ys) {
        return mma ? matvec_q8_0_mma(w, xd, xs, r, y, ys) : matvec_q8_0(w, xd, xs, r, y, ys);
      },
      [](const uint8_t* row, const quant::BlockQ8_0Act* xr, int64_t n) {
        return quant::dot_q8_0(reinterpret_cast<const quant::BlockQ8_0*>(row), xr, n / 32);
      },
      mma ? "q8_0 mma" : "q8_0", rs);
}


TEST_F(CudaKernels, MatvecQ8_0BitsEqualCpuForR1To8) {
  // Below 4096 rows the split kernel (4 warps per row); from 4096 rows r = 1 takes the
  // one-warp-per-row kernel and r = 2..8 the tensor-core kernel (tiles of 16 rows, chunks of 8
  // blocks; r = 11 is a tile of 8 rows then one of 3). 8224 inputs are 257 blocks: three
  // chunks of the warp kernel, the last of one block; for the mma kernel a one-block tail chunk
  // and rows that are not 16-byte multiples (its 2-byte copy path). Run with r = 1 on the warp
  // kernels (Q8_0R1Kernel::kWarp); MatvecQ8_0R1StagedBitsEqualCpu covers the staged kernel.
  R1KernelScope scope(Q8_0R1Kernel::kWarp);
  for (Shape s : {Shape{96, 13}, Shape{256, 256}, Shape{4096, 1024}, Shape{1056, 37}, Shape{8224, 11},
                  Shape{512, 4100}}) {
    q8_0_case(s);
  }
}

TEST_F(CudaKernels, MatvecQ8_0R1StagedBitsEqualCpu) {
  // The staged r = 1 kernel (q8_0_r1_kernel; the default) on the shapes it takes (n_in a
  // multiple of 256, so rows are 16-byte multiples): 8, 4 or 2 rows per warp by n_out against
  // the SM count, one step per warp (1024 inputs), partial steps (256 = 8 blocks; 2304 = 72
  // blocks), several steps per warp through the 2-stage ring (16384 x 2200, 32768 x 1100), a
  // partial last CTA, and the Flash r = 1 shapes. r = 1..8 also runs the other kernels as
  // before; shapes the staged kernel cannot take (96, 1056 inputs) fall back to them.
  R1KernelScope scope(Q8_0R1Kernel::kStaged);
  for (Shape s : {Shape{256, 256}, Shape{96, 13}, Shape{1056, 37}, Shape{1024, 4099}, Shape{2304, 13},
                  Shape{2304, 1030}, Shape{4096, 1024}, Shape{4096, 512}, Shape{4096, 2048}, Shape{2048, 4096},
                  Shape{8192, 4096}, Shape{32768, 261}, Shape{16384, 2200}, Shape{32768, 1100},
                  Shape{4096, 20001}}) {
    q8_0_case(s, {1, 2});
  }
  q8_0_case(Shape{1024, 32768}, {1});
  q8_0_case(Shape{4096, 129280}, {1});
}

TEST_F(CudaKernels, MatvecQ8_0R1WideBitsEqualCpu) {
  // The wide r = 1 kernel (matvec_q8_0_wide.cu; Q8_0R1Kernel::kWide, and kAuto below the head)
  // on the Flash r = 1 shapes: one chunk per row up to 128 blocks (1024 inputs: 16 rows per
  // CTA; 2048: 8; 4096: 4, or 2 / 1 while the grid is under one CTA per SM), chunks of 64
  // blocks, 8 rows per CTA, through the 3-stage ring above it (8192, 32768 inputs: 4 and 16
  // chunks). Odd ones: n_out not a multiple of the rows per CTA (4099, 1023, 1030, 13, 37, 261,
  // 2200, 1: a partial last CTA, a lone row), 8 blocks (256 inputs: 64 rows per CTA), 72 blocks
  // (one chunk of 36 pairs per row, 7 rows per CTA), 264 blocks (8448: five chunks, the last
  // of 8 blocks) and 1040 blocks (33280: a partial last chunk after sixteen whole ones). 96 /
  // 1056 inputs (3 / 33 blocks, not a multiple of 8) fall back to the warp kernels; r = 2 runs
  // the other kernels as before. Both grids: a CTA per row group, and the persistent one
  // (set_wide_persistent, for rows past 4096 inputs: each CTA walks several row groups through
  // the ring; 8192 -> 4100: the last group, walked second by its CTA, half full).
  R1KernelScope scope(Q8_0R1Kernel::kWide);
  for (const bool persistent : {false, true}) {
    SCOPED_TRACE(persistent ? "persistent grid" : "a CTA per row group");
    PersistentScope grid(persistent);
    for (Shape s : {Shape{4096, 1024}, Shape{4096, 512}, Shape{4096, 2048}, Shape{2048, 4096}, Shape{8192, 4096},
                    Shape{32768, 4096}, Shape{1024, 4099}, Shape{4096, 1023}, Shape{2304, 1030}, Shape{256, 13},
                    Shape{2304, 13}, Shape{8448, 37}, Shape{33280, 261}, Shape{16384, 2200}, Shape{4096, 1},
                    Shape{8192, 1}, Shape{96, 13}, Shape{1056, 37}, Shape{8192, 4100}}) {
      q8_0_case(s, {1, 2});
    }
    q8_0_case(Shape{1024, 32768}, {1});
    q8_0_case(Shape{4096, 129280}, {1});  // the head on the wide kernel too (kAuto keeps it staged)
  }
}

// Programmatic dependent launch (set_pdl): the wide kernel starts while the quantize launch
// before it runs and must read the row only after it. 64 rounds, each quantizing a different
// f32 row into ONE buffer that the wide kernel then reads: each round's output equals the CPU's
// dots of that round's row, so a read of a stale or half-written row shows. On a created
// stream, as the backend runs them (the overlap PDL allows is between kernels of one stream).
TEST_F(CudaKernels, MatvecQ8_0R1WideUnderPdlReadsItsProducersRow) {
  R1KernelScope scope(Q8_0R1Kernel::kWide);
  struct PdlScope {
    PdlScope() { set_pdl(true); }
    ~PdlScope() { set_pdl(false); }
  } pdl_on;
  Stream st = nullptr;
  ASSERT_TRUE(stream_create(&st).ok());
  struct StreamGuard {
    Stream s;
    ~StreamGuard() { stream_destroy(s); }
  } guard{st};
  for (Shape s : {Shape{4096, 1024}, Shape{8192, 4096}, Shape{1024, 32768}}) {
    for (const bool persistent : {false, true}) {
      PersistentScope grid(persistent);
      SCOPED_TRACE(std::to_string(s.n_in) + "x" + std::to_string(s.n_out) + (persistent ? ", persistent grid" : ""));
      const int rounds = 64;
      const int64_t nb = s.n_in / 32;
      const auto x = gaussian(static_cast<size_t>(rounds * s.n_in), 11);
      const auto w = random_weights(GgmlType::kQ8_0, s, static_cast<uint64_t>(s.n_in + s.n_out));
      const size_t rb = quant::row_bytes(GgmlType::kQ8_0, s.n_in);
      auto dw = to_device(w);
      auto dx = to_device(x);
      const Weights wv{dw->as<uint8_t>(), rb, s.n_in, s.n_out};
      DeviceBuf dq(sizeof(quant::BlockQ8_0Act) * nb), dy(sizeof(float) * s.n_out * rounds);
      dy.poison();
      ASSERT_TRUE(synchronize().ok());  // the uploads (legacy stream) are done before `st` (non-blocking) reads them
      for (int k = 0; k < rounds; ++k) {
        ASSERT_TRUE(
            quantize_q8_0_act(dx->as<float>() + k * s.n_in, s.n_in, 1, s.n_in, dq.as<quant::BlockQ8_0Act>(), nb, st)
                .ok());
        ASSERT_TRUE(
            matvec_q8_0(wv, dq.as<quant::BlockQ8_0Act>(), nb, 1, dy.as<float>() + k * s.n_out, s.n_out, st).ok());
      }
      ASSERT_TRUE(stream_sync(st).ok());
      std::vector<float> got(static_cast<size_t>(s.n_out) * rounds), want(got.size());
      dy.get(got.data(), got.size() * sizeof(float));
      std::vector<quant::BlockQ8_0Act> xq(nb);
      for (int k = 0; k < rounds; ++k) {
        quant::quantize_q8_0_act(x.data() + k * s.n_in, xq.data(), s.n_in);
        for (int64_t o = 0; o < s.n_out; ++o)
          want[k * s.n_out + o] =
              quant::dot_q8_0(reinterpret_cast<const quant::BlockQ8_0*>(w.data() + o * rb), xq.data(), nb);
      }
      EXPECT_EQ(0u, bit_mismatches(got.data(), want.data(), want.size(), "q8_0 wide under pdl"));
    }
  }
}

// One f32 row through matvec_q8_0_r1_f32 (the staged kernel quantizing the row itself: the
// fused Q8_0 matmul of one row) against the CPU (quant::quantize_q8_0_act then dot_q8_0) and
// against the two launches it replaces (quantize_q8_0_act, then matvec_q8_0 on the staged
// kernel: kStagedPrequant), bit for bit. The row carries every quantizer pattern
// (activation_rows: ties, zero / -0 blocks, subnormals, a doubled maximum of both signs, NaN and
// ±inf unless `finite`). Shapes the staged kernel does not take (n_in not a multiple of 256)
// must launch nothing and say so (*fused false, y untouched); so must every shape under
// kStagedPrequant, kWarp and kWide. kWideFused (and kAuto up to kR1WideFusedMaxIn inputs):
// the wide kernel quantizing the row, the same bits.
void q8_0_r1_f32_case(const Shape& s, bool finite) {
  SCOPED_TRACE(std::to_string(s.n_in) + "x" + std::to_string(s.n_out) + (finite ? " finite" : " nan/inf"));
  const int64_t nb = s.n_in / 32;
  const bool takes = s.n_in % 256 == 0;
  const auto x = activation_rows(1, s.n_in, static_cast<uint32_t>(s.n_in * 7 + s.n_out), finite);
  std::vector<quant::BlockQ8_0Act> xq(nb);
  quant::quantize_q8_0_act(x.data(), xq.data(), s.n_in);
  const auto w = random_weights(GgmlType::kQ8_0, s, static_cast<uint64_t>(s.n_in * 17 + s.n_out));
  std::vector<float> want(s.n_out);
  const size_t rb = quant::row_bytes(GgmlType::kQ8_0, s.n_in);
  for (int64_t o = 0; o < s.n_out; ++o)
    want[o] = quant::dot_q8_0(reinterpret_cast<const quant::BlockQ8_0*>(w.data() + o * rb), xq.data(), nb);
  auto dw = to_device(w);
  auto dx = to_device(x);
  const Weights wv{dw->as<uint8_t>(), rb, s.n_in, s.n_out};
  DeviceBuf dy(sizeof(float) * s.n_out), dq(sizeof(quant::BlockQ8_0Act) * nb);
  const std::string name = "q8_0 r1 " + std::to_string(s.n_in) + "x" + std::to_string(s.n_out);
  std::vector<float> fused_y(s.n_out), split_y(s.n_out);
  {
    R1KernelScope scope(Q8_0R1Kernel::kStaged);
    dy.poison();
    bool fused = !takes;
    const Status st = matvec_q8_0_r1_f32(wv, dx->as<float>(), dy.as<float>(), &fused);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(synchronize().ok());
    EXPECT_EQ(takes, fused) << name << ": the staged kernel takes n_in a multiple of 256";
    dy.get(fused_y.data(), fused_y.size() * sizeof(float));
    if (takes) {
      EXPECT_EQ(0u, bit_mismatches(fused_y.data(), want.data(), want.size(), name + " fused"));
    }
  }
  {
    R1KernelScope scope(Q8_0R1Kernel::kStagedPrequant);
    dy.poison();
    ASSERT_TRUE(quantize_q8_0_act(dx->as<float>(), s.n_in, 1, s.n_in, dq.as<quant::BlockQ8_0Act>(), nb).ok());
    ASSERT_TRUE(matvec_q8_0(wv, dq.as<quant::BlockQ8_0Act>(), nb, 1, dy.as<float>(), s.n_out).ok());
    ASSERT_TRUE(synchronize().ok());
    dy.get(split_y.data(), split_y.size() * sizeof(float));
    EXPECT_EQ(0u, bit_mismatches(split_y.data(), want.data(), want.size(), name + " two launches"));
    if (takes) {
      EXPECT_EQ(0u, bit_mismatches(fused_y.data(), split_y.data(), want.size(), name + " fused vs two"));
    }
  }
  // Not fused: nothing launched, y keeps its poison (0xffffffff).
  auto untouched = [&](Q8_0R1Kernel k, const char* mode) {
    R1KernelScope scope(k);
    dy.poison();
    bool fused = true;
    ASSERT_TRUE(matvec_q8_0_r1_f32(wv, dx->as<float>(), dy.as<float>(), &fused).ok());
    ASSERT_TRUE(synchronize().ok());
    EXPECT_FALSE(fused) << name << " " << mode;
    const auto y = dy.get_vec<uint32_t>(static_cast<size_t>(s.n_out));
    EXPECT_EQ(static_cast<ptrdiff_t>(y.size()), std::count(y.begin(), y.end(), 0xffffffffu)) << name << " " << mode;
  };
  // The wide kernel quantizing the row itself (kWideFused; kAuto for n_in <= kR1WideFusedMaxIn
  // below the head): the same shapes taken (n_in a multiple of 256), the same bits.
  for (Q8_0R1Kernel k : {Q8_0R1Kernel::kWideFused, Q8_0R1Kernel::kAuto}) {
    const bool auto_fuses = (s.n_in <= kR1WideFusedMaxIn || (wide_persistent_takes(s.n_in, 1) &&
                                                             s.n_in <= kR1WidePersistentFusedMaxIn)) &&
                            s.n_out < kR1StagedMinRows;
    if (k == Q8_0R1Kernel::kAuto && !auto_fuses) continue;
    const char* mode = k == Q8_0R1Kernel::kAuto ? " auto (wide fused)" : " wide fused";
    R1KernelScope scope(k);
    dy.poison();
    bool fused = !takes;
    const Status st = matvec_q8_0_r1_f32(wv, dx->as<float>(), dy.as<float>(), &fused);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(synchronize().ok());
    EXPECT_EQ(takes, fused) << name << mode << ": the wide kernel takes n_in a multiple of 256";
    if (takes) {
      std::vector<float> wide_y(s.n_out);
      dy.get(wide_y.data(), wide_y.size() * sizeof(float));
      EXPECT_EQ(0u, bit_mismatches(wide_y.data(), want.data(), want.size(), name + mode));
    }
  }
  if (!takes) {
    untouched(Q8_0R1Kernel::kStaged, "staged, shape not taken");
    untouched(Q8_0R1Kernel::kWideFused, "wide fused, shape not taken");
  }
  untouched(Q8_0R1Kernel::kStagedPrequant, "prequant");
  untouched(Q8_0R1Kernel::kWarp, "warp");
  untouched(Q8_0R1Kernel::kWide, "wide (after a quantize launch)");
}

TEST_F(CudaKernels, MatvecQ8_0R1F32FusedBitsEqualCpuAndTwoLaunches) {
  // The Flash r = 1 Q8_0 shapes (attn / output-LoRA halves 4096 -> 1024, attn_kv 4096 -> 512,
  // attn_q_b 1024 -> 32768, the output projections 8192 / 32768 -> 4096, the shared expert
  // 4096 <-> 2048, the head 4096 -> 129280; 8, 4 and 2 rows per warp, 1 and 2 stages), odd ones
  // (one step of 8 blocks; 72 blocks: a partial step; a partial last CTA; several steps per
  // warp; fewer rows than a warp's tile) and two the staged kernel does not take (96, 1056).
  for (Shape s : {Shape{4096, 1024}, Shape{4096, 512}, Shape{1024, 32768}, Shape{8192, 4096},
                  Shape{32768, 4096}, Shape{4096, 2048}, Shape{2048, 4096}, Shape{256, 256}, Shape{2304, 13},
                  Shape{2304, 1030}, Shape{1024, 4099}, Shape{16384, 2200}, Shape{32768, 261}, Shape{256, 1},
                  Shape{96, 13}, Shape{1056, 37}}) {
    q8_0_r1_f32_case(s, /*finite=*/true);
    q8_0_r1_f32_case(s, /*finite=*/false);
    if (HasFatalFailure()) return;
  }
  q8_0_r1_f32_case(Shape{4096, 129280}, /*finite=*/false);  // the head (550 MB of weights): once
}

TEST_F(CudaKernels, MatvecQ8_0MmaBitsEqualCpu) {
  // The tensor-core kernel's shapes: a partial last tile (4113 = 257 tiles + 1 row), the
  // 2-byte copy path with a one-block tail chunk and a partial tile (8224 x 4099), several tiles
  // per warp of the persistent grid (1024 x 32768, attn_q_b), and the vocabulary head.
  q8_0_case(Shape{4096, 4113});
  q8_0_case(Shape{8224, 4099}, {2, 5, 8});
  q8_0_case(Shape{1024, 32768}, {2, 3, 8});
  q8_0_case(Shape{4096, 129280}, {8});
  // The kernel forced onto every shape and r = 1..8, 11: fewer rows than one tile (13, 11),
  // a single block per row (32 inputs), odd block counts (3, 33, 257), partial tiles.
  for (Shape s : {Shape{96, 13}, Shape{32, 40}, Shape{256, 256}, Shape{1056, 37}, Shape{8224, 11},
                  Shape{4096, 1024}, Shape{512, 4100}}) {
    q8_0_case(s, {1, 2, 3, 4, 5, 6, 7, 8, 11}, /*mma=*/true);
  }
}

template <bool kF16>
void dense_case(const Shape& s, int64_t x_stride) {
  const auto x = gaussian(static_cast<size_t>(kMaxTestRows * x_stride), 5);
  const GgmlType t = kF16 ? GgmlType::kF16 : GgmlType::kF32;
  check_matvec<float>(
      t, s, x, x_stride,
      [](const Weights& w, const float* xd, int64_t xs, int r, float* y, int64_t ys) {
        return kF16 ? matvec_f16(w, xd, xs, r, y, ys) : matvec_f32(w, xd, xs, r, y, ys);
      },
      [](const uint8_t* row, const float* xr, int64_t n) {
        if constexpr (kF16) return quant::dot_f16(reinterpret_cast<const uint16_t*>(row), xr, n);
        return quant::dot_f32(reinterpret_cast<const float*>(row), xr, n);
      },
      kF16 ? "f16" : "f32");
}

// The narrow shapes (< 4096 rows) run both kernels (set_dense_narrow_kernel): staged and tiled;
// 40000 columns are past the staged kernel's shared memory (it falls back to the tiled one).
TEST_F(CudaKernels, MatvecF16BitsEqualCpuForR1To8) {
  const DenseNarrowKernel saved = dense_narrow_kernel();
  for (DenseNarrowKernel k : {DenseNarrowKernel::kStaged, DenseNarrowKernel::kTiled}) {
  set_dense_narrow_kernel(k);
  SCOPED_TRACE(k == DenseNarrowKernel::kStaged ? "staged" : "tiled");
  dense_case<true>({64, 24}, 64);
  dense_case<true>({40000, 3}, 40000);
  dense_case<true>({256, 256}, 256);
  dense_case<true>({4096, 24}, 4096);
  dense_case<true>({16384, 24}, 16384);
  dense_case<true>({4099, 7}, 4101);  // tail of 3, unaligned rows and x: the scalar-load path
  dense_case<true>({272, 4100}, 272);  // >= 4096 rows: 8 rows per CTA, a partial last CTA
  dense_case<true>({127, 9}, 129);     // one 64-lane chunk and a tail of 63
  dense_case<true>({2111, 4096}, 2111);  // wide, tail 63, unaligned rows
  dense_case<true>({1000, 4096}, 1003);
  }
  set_dense_narrow_kernel(saved);
}

// The many-row kernel (matvec_f16_rows / matvec_f32_rows, matvec_dense_rows.cu) at r = 1, 2,
// 8 and the prefill counts 9, 16, 17, 32, 33, 100 (partial 16- and 8-row tiles), on the
// compressor / indexer shapes (4096 -> 256 / 512 / 1024: the 8 x 8 tile at 32 rows, the 16 x
// 16 one at 100), n_out 3 (one partial output tile), 4096 -> 4100 (a partial last tile of
// outputs), n_in 4097 (a tail of 1; rows and x not 16-byte aligned: plain weight loads and
// 4-byte cp.async) and 100 (one 64-column step and a tail of 36, a partial chunk), 4160 (a
// partial last chunk of 64 columns), 63 (no staged column at all), and an x stride that is not
// a multiple of 4 on aligned weights. Activations: activation_rows' finite patterns (wide
// magnitudes, zero / -0 blocks, subnormals, ties). Every row equals the CPU's dot, so a row
// alone (r = 1) equals the same row in any batch.
template <bool kF16>
void dense_rows_case(const Shape& s, int64_t x_stride) {
  constexpr int kRows = 100;
  const auto x = activation_rows(kRows, x_stride, static_cast<uint32_t>(s.n_in * 3 + s.n_out), /*finite=*/true);
  const GgmlType t = kF16 ? GgmlType::kF16 : GgmlType::kF32;
  check_matvec<float>(
      t, s, x, x_stride,
      [](const Weights& w, const float* xd, int64_t xs, int r, float* y, int64_t ys) {
        return kF16 ? matvec_f16_rows(w, xd, xs, r, y, ys) : matvec_f32_rows(w, xd, xs, r, y, ys);
      },
      [](const uint8_t* row, const float* xr, int64_t n) {
        if constexpr (kF16) return quant::dot_f16(reinterpret_cast<const uint16_t*>(row), xr, n);
        return quant::dot_f32(reinterpret_cast<const float*>(row), xr, n);
      },
      kF16 ? "f16 rows" : "f32 rows", {1, 2, 8, 9, 16, 17, 32, 33, 100});
}

TEST_F(CudaKernels, MatvecF16RowsBitsEqualCpu) {
  for (Shape s : {Shape{4096, 256}, Shape{4096, 512}, Shape{4096, 1024}, Shape{4096, 3}, Shape{4097, 256},
                  Shape{4097, 3}, Shape{100, 3}, Shape{100, 512}, Shape{4160, 1024}, Shape{63, 17},
                  Shape{4096, 4100}}) {
    dense_rows_case<true>(s, s.n_in);
    if (HasFatalFailure()) return;
  }
  dense_rows_case<true>(Shape{4096, 512}, 4099);  // aligned weights, x rows not 16-byte aligned
}

TEST_F(CudaKernels, MatvecF32RowsBitsEqualCpu) {
  for (Shape s : {Shape{4096, 256}, Shape{4096, 512}, Shape{4096, 1024}, Shape{4096, 3}, Shape{4097, 256},
                  Shape{100, 3}, Shape{4160, 1024}, Shape{63, 17}}) {
    dense_rows_case<false>(s, s.n_in);
    if (HasFatalFailure()) return;
  }
  dense_rows_case<false>(Shape{4096, 512}, 4101);
}

TEST_F(CudaKernels, MatvecF32BitsEqualCpuForR1To8) {
  const DenseNarrowKernel saved = dense_narrow_kernel();
  for (DenseNarrowKernel k : {DenseNarrowKernel::kStaged, DenseNarrowKernel::kTiled}) {
  set_dense_narrow_kernel(k);
  SCOPED_TRACE(k == DenseNarrowKernel::kStaged ? "staged" : "tiled");
  dense_case<false>({64, 24}, 64);
  dense_case<false>({40000, 3}, 40000);
  dense_case<false>({4096, 24}, 4096);
  dense_case<false>({1030, 9}, 1031);
  dense_case<false>({496, 4099}, 496);
  dense_case<false>({191, 4097}, 193);  // wide, tail 63, unaligned x
  }
  set_dense_narrow_kernel(saved);
}

// matmul_grouped (ops.h) over narrow F16 / F32 matrices of one n_in: one staged launch for all
// groups (matvec_dense_grouped), each group's outputs the CPU's dots. Shapes: the compressors'
// and indexer's projections of one h (4096 -> 1024, 1024, 256, 256); n_in 100 with groups of 3,
// 17, 64 outputs reading different x rows with odd strides (unaligned: the scalar paths); the
// fallbacks (a group of >= 4096 outputs, 9 rows: the matmuls one by one) give the same bits.
TEST_F(CudaKernels, MatmulGroupedDenseBitsEqualCpu) {
  struct Case {
    int64_t n_in;
    std::vector<int64_t> n_out;
    bool shared_x;
    std::vector<int> rows;
  };
  const Case cases[] = {{4096, {1024, 1024, 256, 256}, true, {1, 2, 8}},
                        {100, {3, 17, 64}, false, {1, 3, 8}},
                        {256, {40, 4100}, true, {1}},
                        {256, {40, 24}, true, {9}}};
  for (bool f16 : {true, false}) {
    const GgmlType t = f16 ? GgmlType::kF16 : GgmlType::kF32;
    for (const Case& c : cases) {
      const int n = static_cast<int>(c.n_out.size());
      const size_t rb = quant::row_bytes(t, c.n_in) + (c.shared_x ? 0 : 4);  // odd: rows not 16-byte aligned
      std::vector<std::vector<uint8_t>> w(n);
      std::vector<std::unique_ptr<DeviceBuf>> dw(n);
      for (int g = 0; g < n; ++g) {
        w[g].assign(rb * c.n_out[g], 0);
        for (int64_t o = 0; o < c.n_out[g]; ++o)
          quant::fill_random_blocks(t, w[g].data() + o * rb, c.n_in, 0.5f, static_cast<uint64_t>(70 + 13 * g + o));
        dw[g] = to_device(w[g]);
      }
      for (int rows : c.rows) {
        const int64_t xs = c.shared_x ? c.n_in : c.n_in + 3;  // x row k of group g at g·(n_in + 1) + k·xs
        const auto x = activation_rows(rows + 2, xs + c.n_in, static_cast<uint32_t>(c.n_in + rows), /*finite=*/true);
        auto dx = to_device(x);
        std::vector<int64_t> ys(n);
        std::vector<std::unique_ptr<DeviceBuf>> dy(n);
        std::vector<backend::MatmulParams> p(n);
        for (int g = 0; g < n; ++g) {
          ys[g] = c.n_out[g] + g;
          dy[g] = std::make_unique<DeviceBuf>(sizeof(float) * ys[g] * rows);
          dy[g]->poison();
          p[g].w = backend::Matrix{dw[g]->as<uint8_t>(), t, c.n_in, c.n_out[g], rb};
          p[g].x = dx->as<float>() + (c.shared_x ? 0 : g * (c.n_in + 1)), p[g].x_stride = xs;
          p[g].y = dy[g]->as<float>(), p[g].y_stride = ys[g];
          p[g].n_rows = rows;
        }
        DeviceBuf scratch(matmul_grouped_scratch_bytes(p.data(), n) + 64);
        const Status st = matmul_grouped(p.data(), n, OpScratch{scratch.data(), scratch.bytes()}, nullptr);
        ASSERT_TRUE(st.ok()) << st.to_string();
        sync();
        for (int g = 0; g < n; ++g) {
          const auto got = dy[g]->get_vec<float>(static_cast<size_t>(ys[g]) * rows);
          std::vector<float> want, have;
          for (int k = 0; k < rows; ++k) {
            const float* xr = x.data() + (c.shared_x ? 0 : g * (c.n_in + 1)) + k * xs;
            for (int64_t o = 0; o < c.n_out[g]; ++o) {
              const uint8_t* row = w[g].data() + o * rb;
              want.push_back(f16 ? quant::dot_f16(reinterpret_cast<const uint16_t*>(row), xr, c.n_in)
                                 : quant::dot_f32(reinterpret_cast<const float*>(row), xr, c.n_in));
              have.push_back(got[k * ys[g] + o]);
            }
          }
          EXPECT_EQ(0u, bit_mismatches(have.data(), want.data(), want.size(),
                                       std::string(f16 ? "f16" : "f32") + " n_in " + std::to_string(c.n_in) +
                                           " group " + std::to_string(g) + " rows " + std::to_string(rows)));
        }
      }
    }
  }
}

// matmul_grouped (ops.h) over one row of Q8_0 matrices of one n_in: mixed widths (attention's
// q_a 4096 -> 1024 and kv 4096 -> 512 of one h: the fused wide launch with each group's n_out
// where the kernel choice fuses it, the matmuls one by one where not) and one width (the shared
// expert's gate and up, 4096 -> 2048: fused under kAuto now that two groups fuse), under every
// one-row kernel choice: each group's outputs the CPU's dots, nothing past a group written.
TEST_F(CudaKernels, MatmulGroupedQ8_0OneRowBitsEqualCpu) {
  struct Case {
    int64_t n_in;
    std::vector<int64_t> n_out;
  };
  const Case cases[] = {{4096, {1024, 512}}, {4096, {2048, 2048}}, {4096, {512, 1024, 8}}, {256, {13, 300}}};
  for (const Case& c : cases) {
    const int n = static_cast<int>(c.n_out.size());
    const int64_t nb = c.n_in / 32;
    const size_t rb = quant::row_bytes(GgmlType::kQ8_0, c.n_in);
    const auto x = activation_rows(1, c.n_in, static_cast<uint32_t>(c.n_in + n), /*finite=*/true);
    std::vector<quant::BlockQ8_0Act> xq(nb);
    quant::quantize_q8_0_act(x.data(), xq.data(), c.n_in);
    auto dx = to_device(x);
    std::vector<std::vector<uint8_t>> w(n);
    std::vector<std::unique_ptr<DeviceBuf>> dw(n), dy(n);
    for (int g = 0; g < n; ++g) {
      w[g] = random_weights(GgmlType::kQ8_0, Shape{c.n_in, c.n_out[g]}, static_cast<uint64_t>(90 + g));
      dw[g] = to_device(w[g]);
      dy[g] = std::make_unique<DeviceBuf>(sizeof(float) * (c.n_out[g] + 16));  // 16 past the group: stay untouched
    }
    // The wide paths also on the persistent grid (mode + 100 in the messages).
    for (int mode = 0; mode < 9; ++mode) {
      static constexpr Q8_0R1Kernel kModes[] = {Q8_0R1Kernel::kAuto,           Q8_0R1Kernel::kWideFused,
                                                Q8_0R1Kernel::kWide,           Q8_0R1Kernel::kStaged,
                                                Q8_0R1Kernel::kStagedPrequant, Q8_0R1Kernel::kWarp};
      const Q8_0R1Kernel k = kModes[mode % 6];
      const bool persistent = mode >= 6;
      R1KernelScope scope(k);
      PersistentScope grid(persistent);
      std::vector<backend::MatmulParams> p(n);
      for (int g = 0; g < n; ++g) {
        dy[g]->poison();
        p[g].w = backend::Matrix{dw[g]->as<uint8_t>(), GgmlType::kQ8_0, c.n_in, c.n_out[g], rb};
        p[g].x = dx->as<float>(), p[g].x_stride = c.n_in;
        p[g].y = dy[g]->as<float>(), p[g].y_stride = c.n_out[g];
        p[g].n_rows = 1;
      }
      DeviceBuf scratch(matmul_grouped_scratch_bytes(p.data(), n) + 64);
      const Status st = matmul_grouped(p.data(), n, OpScratch{scratch.data(), scratch.bytes()}, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      sync();
      for (int g = 0; g < n; ++g) {
        const auto got = dy[g]->get_vec<float>(static_cast<size_t>(c.n_out[g] + 16));
        std::vector<float> want(c.n_out[g]);
        for (int64_t o = 0; o < c.n_out[g]; ++o)
          want[o] = quant::dot_q8_0(reinterpret_cast<const quant::BlockQ8_0*>(w[g].data() + o * rb), xq.data(), nb);
        const std::string what = "mode " + std::to_string(static_cast<int>(k) + (persistent ? 100 : 0)) + " n_in " +
                                 std::to_string(c.n_in) + " group " + std::to_string(g) + " of " +
                                 std::to_string(c.n_out[g]);
        EXPECT_EQ(0u, bit_mismatches(got.data(), want.data(), want.size(), what));
        uint32_t past = 0;
        for (int i = 0; i < 16; ++i) {
          uint32_t b;
          std::memcpy(&b, &got[c.n_out[g] + i], 4);
          past += b == 0xffffffffu ? 0 : 1;
        }
        EXPECT_EQ(0u, past) << what << ": outputs past the group written";
      }
    }
  }
}

template <typename Run, typename Dot>
void expert_case(GgmlType t, const Shape& s, Run run, Dot dot, const char* name) {
  const int64_t nb = s.n_in / 256;
  const auto x = activation_rows(kMaxTestRows, s.n_in, static_cast<uint32_t>(s.n_in + 11), /*finite=*/true);
  std::vector<quant::BlockQ8K> xq(kMaxTestRows * nb);
  for (int k = 0; k < kMaxTestRows; ++k) quant::quantize_q8_k_act(x.data() + k * s.n_in, xq.data() + k * nb, s.n_in);
  check_matvec<quant::BlockQ8K>(t, s, xq, nb, run, dot, name);
}

TEST_F(CudaKernels, MatvecIq2XxsBitsEqualCpuForR1To8) {
  for (Shape s : {Shape{256, 128}, Shape{4096, 2048}, Shape{768, 19}, Shape{9984, 11}}) {
    expert_case(
        GgmlType::kIQ2_XXS, s,
        [](const Weights& w, const quant::BlockQ8K* xd, int64_t xs, int r, float* y, int64_t ys) {
          return matvec_iq2_xxs(w, xd, xs, r, y, ys);
        },
        [](const uint8_t* row, const quant::BlockQ8K* xr, int64_t n) {
          return quant::dot_iq2_xxs_q8_k(reinterpret_cast<const quant::BlockIQ2XXS*>(row), xr, n / 256);
        },
        "iq2_xxs");
  }
}

TEST_F(CudaKernels, MatvecQ2KBitsEqualCpuForR1To8) {
  for (Shape s : {Shape{256, 256}, Shape{2048, 4096}, Shape{768, 19}}) {
    expert_case(
        GgmlType::kQ2_K, s,
        [](const Weights& w, const quant::BlockQ8K* xd, int64_t xs, int r, float* y, int64_t ys) {
          return matvec_q2_k(w, xd, xs, r, y, ys);
        },
        [](const uint8_t* row, const quant::BlockQ8K* xr, int64_t n) {
          return quant::dot_q2_k_q8_k(reinterpret_cast<const quant::BlockQ2K*>(row), xr, n / 256);
        },
        "q2_k");
  }
}

TEST_F(CudaKernels, MatvecQ4KBitsEqualCpuForR1To8) {
  for (Shape s : {Shape{256, 64}, Shape{4096, 2048}, Shape{1280, 21}}) {
    expert_case(
        GgmlType::kQ4_K, s,
        [](const Weights& w, const quant::BlockQ8K* xd, int64_t xs, int r, float* y, int64_t ys) {
          return matvec_q4_k(w, xd, xs, r, y, ys);
        },
        [](const uint8_t* row, const quant::BlockQ8K* xr, int64_t n) {
          return quant::dot_q4_k_q8_k(reinterpret_cast<const quant::BlockQ4K*>(row), xr, n / 256);
        },
        "q4_k");
  }
}

TEST_F(CudaKernels, RmsNormBitsEqualCpu) {
  // Both kernels (set_rms_norm_kernel). 7: tail only; 2111: a partial last staged chunk ending
  // in a tail of 63 (64-lane order); 16385: past the staged kernel's rows (the chunked one
  // runs). Strides n + 5 (rows after the first not 16-byte aligned: 4-byte copies and scalar
  // stores) and n (aligned when n is). With 3 rows, rows 1 and 2 hold an inf and a NaN.
  const RmsNormKernel saved = rms_norm_kernel_choice();
  for (RmsNormKernel kern : {RmsNormKernel::kStaged, RmsNormKernel::kChunked})
  for (int64_t n : {7, 64, 1000, 2111, 4096, 16384, 16385}) {
    for (int rows : {1, 3, 9}) {
      for (bool weighted : {false, true}) {
        for (bool in_place : {false, true}) {
          set_rms_norm_kernel(kern);
          const int64_t stride = n + (in_place ? 0 : 5);
          auto x = gaussian(static_cast<size_t>(rows * stride), static_cast<uint32_t>(n + rows), 3.0f);
          if (rows == 3) {
            x[static_cast<size_t>(stride + n / 2)] = std::numeric_limits<float>::infinity();
            x[static_cast<size_t>(2 * stride + n / 3)] = std::numeric_limits<float>::quiet_NaN();
          }
          const auto w = gaussian(static_cast<size_t>(n), 9);
          std::vector<float> want(x.size(), 0.0f);
          for (int k = 0; k < rows; ++k)
            backend::cpu::rms_norm_row(x.data() + k * stride, weighted ? w.data() : nullptr,
                                       want.data() + k * stride, n, 1e-6f);
          auto dx = to_device(x);
          auto dw = to_device(w);
          DeviceBuf dout(x.size() * sizeof(float));
          dout.poison();
          float* out = in_place ? dx->as<float>() : dout.as<float>();
          ASSERT_TRUE(rms_norm(dx->as<float>(), weighted ? dw->as<float>() : nullptr, out, n, stride, rows, 1e-6f).ok());
          sync();
          std::vector<float> got(x.size());
          (in_place ? *dx : dout).get(got.data(), got.size() * sizeof(float));
          std::vector<float> g2, w2;
          for (int k = 0; k < rows; ++k)
            for (int64_t i = 0; i < n; ++i) {
              g2.push_back(got[k * stride + i]);
              w2.push_back(want[k * stride + i]);
            }
          EXPECT_EQ(0u, bit_mismatches(g2.data(), w2.data(), g2.size(),
                                       std::string(kern == RmsNormKernel::kStaged ? "staged" : "chunked") +
                                           " rms_norm n=" + std::to_string(n) + " rows=" + std::to_string(rows) +
                                           " stride=" + std::to_string(stride)));
        }
      }
    }
  }
  set_rms_norm_kernel(saved);
}

// copy_many: every region lands byte for byte, whatever its alignment (16-byte words, 4-byte
// words, bytes), length (0, short tails, several blocks) or count (more than one launch's
// kCopyBatch), and nothing outside the destinations changes.
TEST_F(CudaKernels, CopyManyMovesEveryRegionExactly) {
  constexpr size_t kBytes = 1 << 20;
  std::vector<uint8_t> src(kBytes), want(kBytes, 0xa5);
  std::mt19937 rng(77);
  for (auto& b : src) b = static_cast<uint8_t>(rng());
  DeviceBuf dsrc(kBytes), ddst(kBytes);
  dsrc.put(src.data(), kBytes);
  ddst.put(want.data(), kBytes);
  std::vector<backend::CopyRegion> regions;
  size_t at = 0;  // destinations never overlap: consecutive, with gaps
  std::uniform_int_distribution<int> len(0, 9000), off(0, 50000);
  for (int i = 0; i < kCopyBatch * 2 + 5; ++i) {
    size_t n = static_cast<size_t>(len(rng));
    if (i % 3 == 0) n &= ~size_t{15};  // some 16-byte multiples
    if (i == 7) n = 0;
    if (i == 11) n = 200000;  // many blocks
    size_t d = at + static_cast<size_t>(i % 5);           // alignments 0..4
    size_t s = static_cast<size_t>(off(rng)) & (i % 2 ? ~size_t{15} : ~size_t{0});
    if (i % 4 == 0) {  // both ends and the length 16-byte aligned: the 16-byte word path
      d = (d + 15) & ~size_t{15};
      s &= ~size_t{15};
      n &= ~size_t{15};
    }
    if (d + n > kBytes || s + n > kBytes) break;
    regions.push_back(backend::CopyRegion{ddst.as<uint8_t>() + d, dsrc.as<uint8_t>() + s, n});
    std::memcpy(want.data() + d, src.data() + s, n);
    at = d + n + 3;
  }
  ASSERT_GT(regions.size(), static_cast<size_t>(kCopyBatch)) << "the case covers two launches";
  const Status s = copy_many(regions.data(), static_cast<int>(regions.size()), nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  sync();
  const std::vector<uint8_t> got = ddst.get_vec<uint8_t>(kBytes);
  size_t bad = 0;
  for (size_t i = 0; i < kBytes; ++i) bad += got[i] != want[i];
  EXPECT_EQ(0u, bad) << "bytes that differ from the expected destination";
}

TEST_F(CudaKernels, TopTwoEqualsScalarDefinition) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<std::vector<float>> rows;
  std::vector<int32_t> excluded;
  for (int64_t n : {1, 7, 8192, 129280}) {
    auto r = gaussian(static_cast<size_t>(n), static_cast<uint32_t>(n));
    rows.push_back(r);
    excluded.push_back(-1);
    if (n > 100) {
      auto t = r;  // the maximum twice: the first index wins, margin +0
      const int64_t a = n / 3, b = n / 2;
      t[a] = t[b] = 50.0f;
      rows.push_back(t);
      excluded.push_back(-1);
      rows.push_back(t);  // excluding the first holder
      excluded.push_back(static_cast<int32_t>(a));
      auto u = r;  // NaNs everywhere but never winning
      for (int64_t i = 0; i < n; i += 3) u[i] = qnan;
      u[n - 1] = 60.0f;
      rows.push_back(u);
      excluded.push_back(-1);
    }
  }
  rows.push_back(std::vector<float>(1000, qnan));  // all NaN: first index
  excluded.push_back(-1);
  rows.push_back(std::vector<float>(1000, qnan));
  excluded.push_back(0);
  rows.push_back(std::vector<float>(999, -inf));  // all -inf: first index, NaN margin
  excluded.push_back(-1);
  {
    std::vector<float> z(4096, -1.0f);  // signed zeros tying for the maximum
    z[100] = -0.0f;
    z[3000] = 0.0f;
    rows.push_back(z);
    excluded.push_back(-1);
    z[5] = inf;
    rows.push_back(z);
    excluded.push_back(-1);
  }
  DeviceBuf dres(sizeof(TopTwoResult));
  for (size_t c = 0; c < rows.size(); ++c) {
    const auto& r = rows[c];
    auto dx = to_device(r);
    dres.poison();
    ASSERT_TRUE(top_two(dx->as<float>(), static_cast<int64_t>(r.size()), excluded[c], dres.as<TopTwoResult>()).ok());
    sync();
    TopTwoResult got{};
    dres.get(&got, sizeof got);
    const TopTwo want = top_two_scalar(std::span<const float>(r.data(), r.size()), excluded[c]);
    EXPECT_EQ(want.id, got.id) << "case " << c;
    uint32_t a, b;
    std::memcpy(&a, &want.margin, 4);
    std::memcpy(&b, &got.margin, 4);
    if (std::isnan(want.margin)) {
      EXPECT_TRUE(std::isnan(got.margin)) << "case " << c;
    } else {
      EXPECT_EQ(a, b) << "case " << c << " margin cpu " << want.margin << " gpu " << got.margin;
    }
  }
}

// Argument checks run before any device call, so this one needs no GPU.
TEST(CudaLaunchers, BadShapesAreErrorsNotAborts) {
  const Weights w{nullptr, 34, 33, 4};  // n_in not a multiple of 32
  const Status s = matvec_q8_0(w, nullptr, 0, 1, nullptr, 0);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("matvec_q8_0"), std::string::npos) << s.message();
  EXPECT_FALSE(rms_norm(nullptr, nullptr, nullptr, 0, 0, 1, 1e-6f).ok());
  EXPECT_FALSE(quantize_q8_k_act(nullptr, 0, 1, 100, nullptr, 0).ok());
}

}  // namespace
}  // namespace ds4::cuda
