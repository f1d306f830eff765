// tests/unit/backend/op_profile_test.cpp — the op-timeline profiler (backend/op_profile.h) on the
// CPU: the byte counts and classes of op_cost(), the report of ProfileStats from made-up
// timings, and the profiling wrapper over the CPU backend with a fake clock (every mark 10 us
// after the previous one), so op times, gaps, host round trips, phases and the ring's
// read-back are checked without a GPU. The CUDA event clock itself needs a GPU (test_cuda).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backend/op_profile.h"

namespace ds4::backend {
namespace {

Matrix q8_0(int64_t n_in, int64_t n_out) {
  static const uint8_t dummy = 0;
  return Matrix{&dummy, GgmlType::kQ8_0, n_in, n_out, static_cast<size_t>(n_in / 32 * 34)};
}

TEST(OpProfile, MatmulBytesAndClasses) {
  MatmulParams p;
  p.w = q8_0(4096, 1024);
  p.n_rows = 1;
  OpCost c = op_cost(p);
  EXPECT_EQ(c.cls, OpClass::kDenseQ8_0);
  EXPECT_EQ(c.bytes, 4352u * 1024u + (4096u + 1024u) * 4u);  // weights + x + y
  p.n_rows = 6;
  EXPECT_EQ(op_cost(p).bytes, 4352u * 1024u + 6u * (4096u + 1024u) * 4u);
  p.w = q8_0(4096, 129280);  // the vocabulary projection
  EXPECT_EQ(op_cost(p).cls, OpClass::kHead);
  p.w.type = GgmlType::kF16;
  p.w.n_out = 24;
  p.w.row_bytes = 4096 * 2;
  EXPECT_EQ(op_cost(p).cls, OpClass::kDenseF16);
  MatmulParams g[2] = {p, p};
  EXPECT_EQ(op_cost(g, 2).bytes, 2 * op_cost(p).bytes);
}

// matmul_grouped's key: one shape as n x (in x out); mixed widths (q_a and kv) as in x (out + ...);
// a short buffer truncated, still terminated.
TEST(OpProfile, GroupedMatmulKeyNamesEveryWidth) {
  MatmulParams p[3];
  p[0].w = q8_0(4096, 2048);
  p[1].w = q8_0(4096, 2048);
  char buf[96];
  format_matmul_grouped_key(buf, sizeof buf, p, 2);
  EXPECT_STREQ("matmul_grouped q8_0 2x(4096x2048)", buf);
  p[0].w = q8_0(4096, 1024);
  p[1].w = q8_0(4096, 512);
  p[2].w = q8_0(4096, 8);
  format_matmul_grouped_key(buf, sizeof buf, p, 3);
  EXPECT_STREQ("matmul_grouped q8_0 4096x(1024+512+8)", buf);
  char small[24];
  format_matmul_grouped_key(small, sizeof small, p, 3);
  EXPECT_EQ(std::string(buf).substr(0, sizeof small - 1), std::string(small));
}

TEST(OpProfile, ExpertBytesExactForOneRowBoundedForMore) {
  static const uint8_t dummy = 0;
  MoeParams p;
  p.n_used = 6;
  p.n_rows = 1;
  p.gate = ExpertMatrix{&dummy, GgmlType::kIQ2_XXS, 4096, 2048, 256, 1000};
  p.up = p.gate;
  p.down = ExpertMatrix{&dummy, GgmlType::kQ2_K, 2048, 4096, 256, 700};
  const uint64_t per_expert = 1000u * 2048u * 2u + 700u * 4096u;
  const uint64_t act = 2u * 4096u * 4u + 6u * 8u;
  EXPECT_EQ(op_cost(p).cls, OpClass::kExperts);
  EXPECT_EQ(op_cost(p).bytes, 6 * per_expert + act);
  p.n_rows = 100;  // 600 selections, at most 256 distinct experts
  EXPECT_EQ(op_cost(p).bytes, 256 * per_expert + 100 * act);
  EXPECT_EQ(op_cost(p, 10).bytes, 10 * per_expert + 100 * act);  // a counted distinct set
}

TEST(OpProfile, StatsReportSharesAndGaps) {
  ProfileStats st;
  st.begin_forward(1);
  // 2 ops of 100 us and 300 us, a 50 us gap between, a 10 us download, a 40 us round trip.
  st.add_op(1, "matmul q8_0 4096x1024", {OpClass::kDenseQ8_0, 200'000'000}, 100.0, 0.0, GapKind::kNone);
  st.add_op(1, "moe iq2_xxs/q2_k", {OpClass::kExperts, 300'000'000}, 300.0, 50.0, GapKind::kBetweenOps);
  st.add_op(1, "download", {OpClass::kHostWait, 4}, 10.0, 0.0, GapKind::kBetweenOps);
  st.begin_forward(1);
  st.add_op(1, "matmul q8_0 4096x1024", {OpClass::kDenseQ8_0, 200'000'000}, 100.0, 40.0, GapKind::kHostRound);
  st.begin_forward(6);
  st.add_op(6, "moe iq2_xxs/q2_k", {OpClass::kExperts, 900'000'000}, 900.0, 0.0, GapKind::kExcluded);
  EXPECT_EQ(st.ops(), 5);
  const std::string r = st.report("test device");
  // Decode: 2 forwards; busy 500, gaps 50 (+0 excluded), round trip 40 + download 10: 600 us.
  EXPECT_NE(r.find("op profile, test device: decode (1 row per forward)"), std::string::npos) << r;
  EXPECT_NE(r.find("2 forwards, 2 tokens; 2.0 ops per forward"), std::string::npos) << r;
  EXPECT_NE(r.find("0.300 ms on the device timeline = ops 0.250 ms (83.3%) + gaps between ops 0.025 ms (8.3%) "
                   "+ host round trip 0.025 ms (8.3%)"),
            std::string::npos)
      << r;
  // The matmul: 2 calls of 100 us, 200 MB each: 2000 GB/s, one call per forward.
  EXPECT_NE(r.find("matmul q8_0 4096x1024"), std::string::npos);
  EXPECT_NE(r.find("2000.0"), std::string::npos) << r;
  // The verify phase: one forward of 6 rows; expert bytes marked as an upper bound.
  EXPECT_NE(r.find("verify / batch (6 rows per forward)"), std::string::npos) << r;
  EXPECT_NE(r.find("1 excluded"), std::string::npos) << r;
  EXPECT_NE(r.find("<="), std::string::npos) << r;
}

// Every mark 10 us after the previous one: each op lasts 10 us, each gap is 10 us.
class FakeClock final : public OpClock {
 public:
  explicit FakeClock(int capacity) : t_(static_cast<size_t>(capacity)) {}
  int capacity() const override { return static_cast<int>(t_.size()); }
  void record(int mark) override {
    t_[static_cast<size_t>(mark)] = now_;
    now_ += 10.0;
  }
  void wait(int) override { ++waits; }
  double elapsed_us(int from, int to) override { return t_[static_cast<size_t>(to)] - t_[static_cast<size_t>(from)]; }
  int waits = 0;

 private:
  std::vector<double> t_;
  double now_ = 0.0;
};

TEST(OpProfile, WrapperTimesOpsGapsAndRoundTripsOnTheCpuBackend) {
  std::string report;
  {
    auto be = make_profiling_backend(make_cpu_backend(1), std::make_unique<FakeClock>(64), "fake",
                                     [&](const std::string& r) { report = r; });
    const std::vector<uint16_t> table(2 * 4, 0x3c00);  // F16 1.0, 2 rows of 4
    Array<int32_t> tok(*be, 1);
    Array<float> x(*be, 16);
    const int32_t id = 1;
    be->upload(tok.data(), &id, sizeof id);  // op 0: copy class, before any forward
    EmbedParams e;
    e.table = reinterpret_cast<const uint8_t*>(table.data());
    e.row_bytes = 8;
    e.tokens = tok.data();
    e.n_embd = 4;
    e.n_hc = 4;
    e.out = x.data();
    be->embed(e);  // op 1
    AddParams a{x.data(), x.data(), x.data(), 16};
    be->add(a);  // op 2
    float host[16];
    be->download(host, x.data(), sizeof host);  // op 3: host wait
    EXPECT_EQ(host[0], 2.0f);  // the wrapped backend still computes
    be->add(a);  // op 4: after a host round trip
  }
  // The upload before the first forward is its own phase. Phase decode: 1 forward; 4 ops;
  // busy 3 x 10 us; gaps between ops: 3 x 10 us (the first one after the upload); round trip:
  // the download's 10 us + one 10 us gap: 80 us in all.
  EXPECT_NE(report.find("before the first forward"), std::string::npos) << report;
  EXPECT_NE(report.find("1 forwards, 1 tokens; 4.0 ops per forward"), std::string::npos) << report;
  EXPECT_NE(report.find("0.080 ms on the device timeline = ops 0.030 ms (37.5%) + gaps between ops 0.030 ms "
                        "(37.5%) + host round trip 0.020 ms (25.0%)"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("3 gaps between ops (mean 10.00 us), 1 host round trips"), std::string::npos) << report;
}

TEST(OpProfile, RingReadBackWhenFullExcludesOnlyItsOwnGap) {
  std::string report;
  auto clock = std::make_unique<FakeClock>(8);  // 4 slots: a read-back every 3 ops
  FakeClock* c = clock.get();
  {
    auto be = make_profiling_backend(make_cpu_backend(1), std::move(clock), "fake",
                                     [&](const std::string& r) { report = r; });
    Array<float> x(*be, 4);
    AddParams a{x.data(), x.data(), x.data(), 4};
    for (int i = 0; i < 20; ++i) be->add(a);
    EXPECT_GE(c->waits, 6);
  }
  // 20 ops; read-backs after ops 3, 6, ..., 18 exclude 6 gaps; 13 gaps of 10 us remain.
  EXPECT_NE(report.find("20.0 ops per forward"), std::string::npos) << report;
  EXPECT_NE(report.find("13 gaps between ops (mean 10.00 us), 0 host round trips (mean 0.00 us + download), "
                        "6 excluded"),
            std::string::npos)
      << report;
}

}  // namespace
}  // namespace ds4::backend
