// tests/cuda/moe_rows_test.cpp — the expert-grouped routed experts (backend/cuda/moe_rows.cu,
// ops.h moe under MoeRowsKernel::kGrouped and kTensor) against the CPU backend, bit for bit.
//
// Shapes: DS4 Flash (n_embd 4096, n_ff 2048, 256 experts, 6 used; IQ2_XXS/Q2_K and Q4_K/Q4_K
// experts: the 16-byte staging, one stage per row) at 2, 6, 8, 17 and 32 rows, and small / wide
// ones (512 -> 256: the 2-byte staging; 10240 -> 3072 and Q2_K 5376 -> 512: several stages per
// row; Q2_K gate/up, IQ2_XXS down). Selections:
// "shared" (every row draws its slots from 8 experts: groups of up to all the rows, several
// pair chunks per group), "distinct" (no expert chosen twice in the call: groups of one pair)
// and "random" (6 of 256 per row, as real batches). Every expert's weights differ (a read of a
// wrong expert shows as a mismatch). Per case: grouped == CPU with dp4a dots (kGrouped) and
// with tensor-core dots (kTensor; several stages per row on the wide shapes and Q4_K's, several
// pair chunks with "shared"), per-pair (kPairs) == CPU, and batch invariance: rows computed
// alone (n_rows = 1) equal the same rows in the batch. Expert ids outside [0, n_expert) give
// NaN rows on every path and leave the other rows untouched.
// Without a usable GPU these tests skip with the reason probe_device gives.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/moe_rows.h"
#include "backend/cuda/ops.h"
#include "quant/quant.h"
#include "tests/cuda/device_buf.h"

namespace ds4::cuda {
namespace {

using backend::GgmlType;
using test_util::bit_mismatches;
using test_util::DeviceBuf;

// Restores the process-wide MoeRowsKernel when a scope ends.
struct MoeRowsScope {
  explicit MoeRowsScope(MoeRowsKernel k) : saved(moe_rows_kernel()) { set_moe_rows_kernel(k); }
  ~MoeRowsScope() { set_moe_rows_kernel(saved); }
  MoeRowsKernel saved;
};

// [n_expert × n_out rows × n_in] expert weights, all distinct: expert 0 random blocks, every
// other expert a copy of it whose first super-block of each row is redrawn (seeded by e), so
// experts differ in every row at a fraction of the drawing cost.
std::vector<uint8_t> distinct_experts(GgmlType t, int64_t n_in, int64_t n_out, int n_expert, uint64_t seed) {
  const size_t rb = quant::row_bytes(t, n_in), eb = rb * static_cast<size_t>(n_out);
  const size_t bb = rb / static_cast<size_t>(n_in / quant::kQKK);
  std::vector<uint8_t> w(eb * static_cast<size_t>(n_expert));
  quant::fill_random_blocks(t, w.data(), n_in * n_out, 0.05f, seed);
  std::vector<uint8_t> first(bb * static_cast<size_t>(n_out));
  for (int e = 1; e < n_expert; ++e) {
    uint8_t* ew = w.data() + eb * static_cast<size_t>(e);
    std::memcpy(ew, w.data(), eb);
    quant::fill_random_blocks(t, first.data(), quant::kQKK * n_out, 0.05f, seed + 7919 * static_cast<uint64_t>(e));
    for (int64_t o = 0; o < n_out; ++o) std::memcpy(ew + o * rb, first.data() + o * bb, bb);
  }
  return w;
}

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng);
  return x;
}

enum class Pick { kShared, kDistinct, kRandom };
const char* pick_name(Pick k) { return k == Pick::kShared ? "shared" : k == Pick::kDistinct ? "distinct" : "random"; }

// sel [rows × used]: distinct experts within each row.
std::vector<int32_t> pick(Pick k, int rows, int used, int n_expert, std::mt19937& rng) {
  std::vector<int32_t> sel;
  std::vector<int32_t> all(n_expert);
  for (int e = 0; e < n_expert; ++e) all[e] = e;
  if (k == Pick::kDistinct) {
    std::shuffle(all.begin(), all.end(), rng);
    sel.assign(all.begin(), all.begin() + static_cast<size_t>(rows) * used);  // rows·used <= n_expert
    return sel;
  }
  std::vector<int32_t> pool = all;
  if (k == Pick::kShared) {
    std::shuffle(pool.begin(), pool.end(), rng);
    pool.resize(static_cast<size_t>(std::min(n_expert, std::max(8, used))));
  }
  for (int i = 0; i < rows; ++i) {
    std::shuffle(pool.begin(), pool.end(), rng);
    sel.insert(sel.end(), pool.begin(), pool.begin() + used);
  }
  return sel;
}

struct Shape {
  int64_t n_embd, n_ff;
  int n_expert, n_used;
  GgmlType gate_up, down;
  std::vector<int> rows;
  std::vector<Pick> picks;
};

class MoeRows : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status s = probe_device(0, &info_);
    if (!s.ok()) GTEST_SKIP() << "no usable CUDA device: " << s.message();
    cpu_ = backend::make_cpu_backend(8);
  }
  DeviceInfo info_;
  std::unique_ptr<backend::Backend> cpu_;
};

// The experts of one shape on the host and the device, and calls of the op on both.
struct Experts {
  const Shape& sh;
  std::vector<uint8_t> g, u, d;
  std::unique_ptr<DeviceBuf> dg, du, dd;
  Experts(const Shape& s, uint64_t seed) : sh(s) {
    g = distinct_experts(s.gate_up, s.n_embd, s.n_ff, s.n_expert, seed + 1);
    u = distinct_experts(s.gate_up, s.n_embd, s.n_ff, s.n_expert, seed + 2);
    d = distinct_experts(s.down, s.n_ff, s.n_embd, s.n_expert, seed + 3);
    dg = test_util::to_device(g), du = test_util::to_device(u), dd = test_util::to_device(d);
  }
  backend::ExpertMatrix em(bool dev, int which) const {
    const GgmlType t = which == 2 ? sh.down : sh.gate_up;
    const int64_t n_in = which == 2 ? sh.n_ff : sh.n_embd, n_out = which == 2 ? sh.n_embd : sh.n_ff;
    const uint8_t* p = which == 0 ? (dev ? dg->as<uint8_t>() : g.data())
                       : which == 1 ? (dev ? du->as<uint8_t>() : u.data())
                                    : (dev ? dd->as<uint8_t>() : d.data());
    return backend::ExpertMatrix{p, t, n_in, n_out, sh.n_expert, quant::row_bytes(t, n_in)};
  }
  static ExpertFormat format(GgmlType t) {
    return t == GgmlType::kIQ2_XXS ? ExpertFormat::kIQ2_XXS : t == GgmlType::kQ2_K ? ExpertFormat::kQ2_K
                                                                                     : ExpertFormat::kQ4_K;
  }
  // The op on the device for `rows` rows (host inputs uploaded), returning out. grouped_only:
  // moe_rows_try itself, which must take the shape (a silent fall-back to the per-pair path
  // would make a "grouped == CPU" check test the old kernels).
  std::vector<float> gpu(const std::vector<float>& x, const std::vector<int32_t>& sel, const std::vector<float>& wt,
                         int rows, bool grouped_only = false) const {
    auto dx = test_util::to_device(x);
    auto dsel = test_util::to_device(sel);
    auto dwt = test_util::to_device(wt);
    std::vector<float> init(static_cast<size_t>(rows) * sh.n_embd);
    std::memset(init.data(), 0x5a, init.size() * sizeof(float));
    auto dout = test_util::to_device(init);
    const size_t bytes = backend::moe_scratch_bytes(sh.n_embd, sh.n_ff, sh.n_used, rows);
    EXPECT_LE(moe_device_scratch_bytes(sh.n_embd, sh.n_ff, sh.n_used, rows), bytes)
        << "the CUDA layout must fit moe_scratch_bytes";
    DeviceBuf scratch(bytes);
    scratch.poison();  // a recycled allocation may hold the last run's rows: an unwritten one shows
    backend::MoeParams p;
    p.n_used = sh.n_used, p.n_rows = rows, p.clamp = 10.0f;
    p.x = dx->as<float>(), p.sel = dsel->as<int32_t>(), p.wt = dwt->as<float>(), p.out = dout->as<float>();
    p.scratch = scratch.data();
    p.gate = em(true, 0), p.up = em(true, 1), p.down = em(true, 2);
    if (grouped_only) {
      bool done = false;
      const Status s = moe_rows_try(p, format(sh.gate_up), format(sh.down), nullptr, &done);
      EXPECT_TRUE(s.ok()) << s.to_string();
      EXPECT_TRUE(done) << "the grouped kernels declined the shape";
    } else {
      const Status s = moe(p, nullptr);
      EXPECT_TRUE(s.ok()) << s.to_string();
    }
    const Status ss = synchronize();
    EXPECT_TRUE(ss.ok()) << ss.to_string();
    return dout->get_vec<float>(init.size());
  }
  std::vector<float> cpu(backend::Backend* be, const std::vector<float>& x, const std::vector<int32_t>& sel,
                         const std::vector<float>& wt, int rows) const {
    std::vector<float> out(static_cast<size_t>(rows) * sh.n_embd);
    std::vector<uint8_t> scratch(backend::moe_scratch_bytes(sh.n_embd, sh.n_ff, sh.n_used, rows) + 64);
    backend::MoeParams p;
    p.n_used = sh.n_used, p.n_rows = rows, p.clamp = 10.0f;
    p.x = x.data(), p.sel = sel.data(), p.wt = wt.data(), p.out = out.data(), p.scratch = scratch.data();
    p.gate = em(false, 0), p.up = em(false, 1), p.down = em(false, 2);
    be->moe(p);
    return out;
  }
};

void run_shape(backend::Backend* cpu, const Shape& sh) {
  // Every shape here fills the tensor-core CTAs (else kTensor would run the dp4a kernels and
  // its check below would test them twice).
  ASSERT_TRUE(moe_rows_tc_fills(sh.n_embd, sh.n_ff)) << sh.n_embd << " -> " << sh.n_ff;
  const uint64_t seed = static_cast<uint64_t>(sh.n_embd + sh.n_ff + static_cast<int>(sh.gate_up) * 31);
  const Experts ex(sh, seed);
  std::mt19937 rng(static_cast<uint32_t>(seed));
  const int64_t E = sh.n_embd;
  for (Pick k : sh.picks) {
    for (int rows : sh.rows) {
      if (k == Pick::kDistinct && rows * sh.n_used > sh.n_expert) continue;
      const std::string what = std::string("moe ") + gguf::type_name(sh.gate_up) + "/" + gguf::type_name(sh.down) +
                               " n_embd=" + std::to_string(E) + " n_ff=" + std::to_string(sh.n_ff) +
                               " rows=" + std::to_string(rows) + " " + pick_name(k);
      const std::vector<int32_t> sel = pick(k, rows, sh.n_used, sh.n_expert, rng);
      std::vector<float> wt(sel.size());
      std::uniform_real_distribution<float> uni(0.05f, 0.6f);
      for (auto& w : wt) w = uni(rng);
      const std::vector<float> x = gaussian(static_cast<size_t>(rows) * E, static_cast<uint32_t>(seed + rows));
      const std::vector<float> want = ex.cpu(cpu, x, sel, wt, rows);
      std::vector<float> grouped, tensor, pairs;
      {
        MoeRowsScope scope(MoeRowsKernel::kGrouped);
        grouped = ex.gpu(x, sel, wt, rows, /*grouped_only=*/true);
      }
      {
        MoeRowsScope scope(MoeRowsKernel::kTensor);
        tensor = ex.gpu(x, sel, wt, rows, /*grouped_only=*/true);
      }
      {
        MoeRowsScope scope(MoeRowsKernel::kPairs);
        pairs = ex.gpu(x, sel, wt, rows);
      }
      EXPECT_EQ(0u, bit_mismatches(grouped.data(), want.data(), want.size(), what + " grouped")) << what;
      EXPECT_EQ(0u, bit_mismatches(tensor.data(), want.data(), want.size(), what + " tensor cores")) << what;
      EXPECT_EQ(0u, bit_mismatches(pairs.data(), want.data(), want.size(), what + " pairs")) << what;
      // Batch invariance: the first, a middle and the last row alone (the n_rows = 1 path).
      for (int i : {0, rows / 2, rows - 1}) {
        const std::vector<float> xi(x.begin() + i * E, x.begin() + (i + 1) * E);
        const std::vector<int32_t> si(sel.begin() + i * sh.n_used, sel.begin() + (i + 1) * sh.n_used);
        const std::vector<float> wi(wt.begin() + i * sh.n_used, wt.begin() + (i + 1) * sh.n_used);
        const std::vector<float> alone = ex.gpu(xi, si, wi, 1);
        EXPECT_EQ(0u, bit_mismatches(grouped.data() + i * E, alone.data(), static_cast<size_t>(E),
                                     what + " row " + std::to_string(i) + " alone vs batched"))
            << what;
        EXPECT_EQ(0u, bit_mismatches(tensor.data() + i * E, alone.data(), static_cast<size_t>(E),
                                     what + " row " + std::to_string(i) + " alone vs batched (tensor cores)"))
            << what;
      }
    }
  }
}

TEST_F(MoeRows, FlashIq2Q2kBitsEqualCpu) {
  run_shape(cpu_.get(), Shape{4096, 2048, 256, 6, GgmlType::kIQ2_XXS, GgmlType::kQ2_K, {2, 6, 8, 17, 32},
                              {Pick::kShared, Pick::kDistinct, Pick::kRandom}});
  // More than 256 (row, slot) pairs: the grouping kernel's later placement rounds.
  run_shape(cpu_.get(), Shape{4096, 2048, 256, 6, GgmlType::kIQ2_XXS, GgmlType::kQ2_K, {64, 100},
                              {Pick::kShared, Pick::kRandom}});
}

// More experts than the grouping kernel's threads (each thread scans several experts).
TEST_F(MoeRows, ManyExpertsBitsEqualCpu) {
  run_shape(cpu_.get(), Shape{512, 256, 1000, 8, GgmlType::kIQ2_XXS, GgmlType::kQ2_K, {40}, {Pick::kRandom}});
}

TEST_F(MoeRows, FlashQ4kBitsEqualCpu) {
  run_shape(cpu_.get(), Shape{4096, 2048, 256, 6, GgmlType::kQ4_K, GgmlType::kQ4_K, {2, 6, 8, 17, 32},
                              {Pick::kShared, Pick::kDistinct, Pick::kRandom}});
}

// Small rows (2-byte staging; down rows of one super-block) and wide ones (several stages per
// weight row), few experts: big groups.
TEST_F(MoeRows, OddShapesBitsEqualCpu) {
  for (GgmlType gu : {GgmlType::kIQ2_XXS, GgmlType::kQ4_K}) {
    const GgmlType dn = gu == GgmlType::kQ4_K ? GgmlType::kQ4_K : GgmlType::kQ2_K;
    run_shape(cpu_.get(), Shape{512, 256, 8, 3, gu, dn, {2, 6, 17}, {Pick::kShared, Pick::kRandom}});
    run_shape(cpu_.get(), Shape{10240, 3072, 4, 3, gu, dn, {2, 9}, {Pick::kShared}});
  }
  // Q2_K gate/up and IQ2_XXS down (a q2 file may hold either), and Q2_K rows of 21 super-blocks
  // (1,764 bytes: the 2-byte staging in stages of 8, 8 and 5 blocks on the tensor-core path).
  run_shape(cpu_.get(), Shape{512, 256, 8, 3, GgmlType::kQ2_K, GgmlType::kIQ2_XXS, {2, 6, 17},
                              {Pick::kShared, Pick::kRandom}});
  run_shape(cpu_.get(), Shape{5376, 512, 4, 3, GgmlType::kQ2_K, GgmlType::kQ2_K, {2, 9}, {Pick::kShared}});
}

// Expert ids outside [0, n_expert): the row's output is NaN on both paths (the per-pair path's
// contract), every other row keeps its bits.
TEST_F(MoeRows, BadExpertIdsGiveNanRows) {
  const Shape sh{512, 256, 8, 3, GgmlType::kIQ2_XXS, GgmlType::kQ2_K, {}, {}};
  const Experts ex(sh, 77);
  std::mt19937 rng(3);
  const int rows = 6;
  std::vector<int32_t> sel = pick(Pick::kRandom, rows, sh.n_used, sh.n_expert, rng);
  std::vector<float> wt(sel.size(), 0.25f);
  const std::vector<float> x = gaussian(static_cast<size_t>(rows) * sh.n_embd, 5);
  const std::vector<float> clean = [&] {
    MoeRowsScope scope(MoeRowsKernel::kGrouped);
    return ex.gpu(x, sel, wt, rows);
  }();
  sel[2 * sh.n_used + 1] = -1;
  sel[4 * sh.n_used + 0] = sh.n_expert;
  for (MoeRowsKernel k : {MoeRowsKernel::kGrouped, MoeRowsKernel::kTensor, MoeRowsKernel::kPairs}) {
    MoeRowsScope scope(k);
    const std::vector<float> got = ex.gpu(x, sel, wt, rows);
    const std::string what = k == MoeRowsKernel::kGrouped ? "grouped" : k == MoeRowsKernel::kTensor ? "tensor" : "pairs";
    for (int i = 0; i < rows; ++i) {
      const float* gi = got.data() + i * sh.n_embd;
      if (i == 2 || i == 4) {
        size_t not_nan = 0;
        for (int64_t o = 0; o < sh.n_embd; ++o) not_nan += std::isnan(gi[o]) ? 0 : 1;
        EXPECT_EQ(0u, not_nan) << what << " row " << i << " has a bad expert id: every output must be NaN";
      } else {
        EXPECT_EQ(0u, bit_mismatches(gi, clean.data() + i * sh.n_embd, static_cast<size_t>(sh.n_embd),
                                     what + " row " + std::to_string(i)));
      }
    }
  }
}

}  // namespace
}  // namespace ds4::cuda
