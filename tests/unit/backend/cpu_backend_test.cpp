// tests/unit/backend/cpu_backend_test.cpp — the CPU backend ops against their spec formulas
// (ds4-architecture.md §3-4) and their batch / thread invariance, without a model file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "core/reduce.h"
#include "quant/dot.h"
#include "quant/half.h"
#include "quant/quant.h"

namespace ds4::backend {
namespace {

std::vector<float> randv(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

TEST(CpuOps, RmsNormMatchesDoubleSumFormula) {
  const auto x = randv(300, 1);
  const auto w = randv(300, 2);
  std::vector<float> out(300);
  cpu::rms_norm_row(x.data(), w.data(), out.data(), 300, 1e-6f);
  double ss = 0;
  for (float v : x) ss += static_cast<double>(v) * v;
  const float scale = 1.0f / sqrtf(static_cast<float>(ss / 300.0) + 1e-6f);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(out[i], x[i] * scale * w[i]);
}

TEST(CpuOps, RopeInverseUndoesForwardAndLeavesNopeDims) {
  RopeParams yarn;
  yarn.freq_base = 160000.0f;
  yarn.freq_scale = 1.0f / 16.0f;
  yarn.ext_factor = 1.0f;
  yarn.attn_factor = 1.0f / (1.0f + 0.1f * logf(16.0f));
  yarn.n_ctx_orig = 65536;
  for (const RopeParams& rp : {RopeParams{}, yarn}) {
    auto x = randv(2 * 128, 3);
    const auto orig = x;
    cpu::rope_tail_rows(x.data(), 2, 128, 64, 777, rp, false);
    for (int h = 0; h < 2; ++h) {
      for (int j = 0; j < 64; ++j) EXPECT_EQ(x[h * 128 + j], orig[h * 128 + j]);
    }
    EXPECT_NE(x[64], orig[64]);
    cpu::rope_tail_rows(x.data(), 2, 128, 64, 777, rp, true);
    for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], orig[i], 1e-5f);
  }
  // Position 0 is the identity rotation for plain RoPE (cos 0 = 1, sin 0 = 0).
  auto z = randv(128, 4);
  const auto z0 = z;
  cpu::rope_tail_rows(z.data(), 1, 128, 64, 0, RopeParams{}, false);
  EXPECT_EQ(z, z0);
}

TEST(CpuOps, SinkhornGivesNearDoublyStochasticCombine) {
  const auto mix = randv(24, 5, 2.0f);
  const float scale[3] = {1.0f, 1.0f, 1.0f};
  const auto base = randv(24, 6, 0.5f);
  float pre[4], post[4], comb[16];
  cpu::hc_split_sinkhorn(mix.data(), scale, base.data(), 4, 20, 1e-6f, pre, post, comb);
  for (int c = 0; c < 4; ++c) {
    float col = 0, row = 0;
    for (int r = 0; r < 4; ++r) col += comb[r * 4 + c];
    for (int r = 0; r < 4; ++r) row += comb[c * 4 + r];
    EXPECT_NEAR(col, 1.0f, 1e-4f);
    EXPECT_NEAR(row, 1.0f, 1e-3f);
    EXPECT_GT(pre[c], 0.0f);
    EXPECT_LT(pre[c], 1.0f + 1e-5f);
    EXPECT_GT(post[c], 0.0f);
    EXPECT_LT(post[c], 2.0f);
  }
}

TEST(CpuBackend, Q8MatmulRowsAreBatchAndThreadInvariant) {
  const int n_in = 256, n_out = 96;
  std::vector<float> wf = randv(static_cast<size_t>(n_in) * n_out, 7);
  std::vector<quant::BlockQ8_0> w(static_cast<size_t>(n_in / 32) * n_out);
  for (int o = 0; o < n_out; ++o) quant::quantize_row_q8_0(wf.data() + o * n_in, w.data() + o * (n_in / 32), n_in);
  Matrix m{reinterpret_cast<const uint8_t*>(w.data()), gguf::GgmlType::kQ8_0, n_in, n_out, 34 * (n_in / 32)};
  const auto x = randv(8 * n_in, 8);
  std::vector<float> ref(8 * n_out);
  auto one = make_cpu_backend(1);
  for (int i = 0; i < 8; ++i) {
    MatmulParams p{m, x.data() + i * n_in, n_in, ref.data() + i * n_out, n_out, 1};
    one->matmul(p);
    // Against the reference dot directly.
    std::vector<quant::BlockQ8_0Act> xq(n_in / 32);
    quant::quantize_q8_0_act(x.data() + i * n_in, xq.data(), n_in);
    for (int o = 0; o < n_out; ++o) EXPECT_EQ(ref[i * n_out + o], quant::dot_q8_0(w.data() + o * (n_in / 32), xq.data(), n_in / 32));
  }
  for (int threads : {2, 3}) {
    auto be = make_cpu_backend(threads);
    std::vector<float> y(8 * n_out);
    MatmulParams p{m, x.data(), n_in, y.data(), n_out, 8};
    be->matmul(p);
    EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4)) << threads;
  }
}

// A matmul's folded input norm (MatmulParams::normed) is the rms_norm op, then the matmul of
// its rows: the same bits in normed and y, weighted and unweighted, rows strided.
TEST(CpuBackend, MatmulFoldedNormIsRmsNormThenMatmul) {
  const int n_in = 256, n_out = 40, rows = 3, stride = n_in + 32;
  std::vector<float> wf = randv(static_cast<size_t>(n_in) * n_out, 17);
  std::vector<quant::BlockQ8_0> w(static_cast<size_t>(n_in / 32) * n_out);
  for (int o = 0; o < n_out; ++o) quant::quantize_row_q8_0(wf.data() + o * n_in, w.data() + o * (n_in / 32), n_in);
  Matrix m{reinterpret_cast<const uint8_t*>(w.data()), gguf::GgmlType::kQ8_0, n_in, n_out, 34 * (n_in / 32)};
  const auto x = randv(static_cast<size_t>(rows) * stride, 18, 3.0f);
  const auto nw = randv(n_in, 19);
  for (int threads : {1, 3}) {
    auto be = make_cpu_backend(threads);
    for (const float* weight : {nw.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> normed(static_cast<size_t>(rows) * stride, 0.0f), ref_normed = normed;
      std::vector<float> y(static_cast<size_t>(rows) * n_out), ref_y = y;
      RmsNormParams r;
      r.x = x.data(), r.weight = weight, r.out = ref_normed.data(), r.n = n_in, r.stride = stride, r.n_rows = rows;
      r.eps = 1e-5f;
      be->rms_norm(r);
      be->matmul(MatmulParams{m, ref_normed.data(), stride, ref_y.data(), n_out, rows});
      MatmulParams p{m, x.data(), stride, y.data(), n_out, rows};
      p.normed = normed.data(), p.norm_weight = weight, p.norm_eps = 1e-5f;
      be->matmul(p);
      EXPECT_EQ(0, std::memcmp(normed.data(), ref_normed.data(), normed.size() * 4)) << threads;
      EXPECT_EQ(0, std::memcmp(y.data(), ref_y.data(), y.size() * 4)) << threads;
      EXPECT_NE(ref_normed[5], x[5]);  // the norm did something
    }
  }
}

// An HC pre's post_first is the hc_post op, then the HC pre of its output: the same bits in x
// and every output, also when the post reads the post / comb that the HC pre overwrites.
TEST(CpuBackend, HcPreWithPostFirstIsHcPostThenHcPre) {
  const int n_hc = 4, rows = 3;
  const int64_t E = 64, hc = n_hc * E, mix_dim = 2 * n_hc + n_hc * n_hc;
  const auto fw = randv(static_cast<size_t>(hc) * mix_dim, 31);
  std::vector<uint16_t> fn(fw.size());
  for (size_t i = 0; i < fw.size(); ++i) fn[i] = quant::f32_to_f16(fw[i]);
  const Matrix m{reinterpret_cast<const uint8_t*>(fn.data()), gguf::GgmlType::kF16, hc, mix_dim,
                 static_cast<size_t>(2 * hc)};
  const std::vector<float> scale{0.7f, 0.3f, 0.9f};
  const auto base = randv(mix_dim, 32), f = randv(rows * E, 33, 2.0f), xb = randv(rows * hc, 34, 2.0f);
  const auto post0 = randv(rows * n_hc, 35), comb0 = randv(rows * n_hc * n_hc, 36), nw = randv(E, 37);
  struct Out {
    std::vector<float> x, flat, mix, y, post, comb, normed;
  };
  auto run = [&](bool fold, int threads) {
    auto be = make_cpu_backend(threads);
    Out o{std::vector<float>(rows * hc), std::vector<float>(rows * hc), std::vector<float>(rows * mix_dim),
          std::vector<float>(rows * E), post0, comb0, std::vector<float>(rows * E)};
    HcPostParams pp{f.data(), xb.data(), o.post.data(), o.comb.data(), o.x.data(), n_hc, E, rows};
    HcPreParams p;
    p.x = o.x.data(), p.fn = m, p.scale = scale.data(), p.base = base.data(), p.n_hc = n_hc, p.n_embd = E;
    p.n_rows = rows, p.flat = o.flat.data(), p.mix = o.mix.data(), p.y = o.y.data(), p.post = o.post.data();
    p.comb = o.comb.data(), p.norm_weight = nw.data(), p.normed = o.normed.data();
    if (fold) {
      p.post_first = pp;
    } else {
      be->hc_post(pp);
    }
    be->hc_pre(p);
    return o;
  };
  const Out want = run(false, 1);
  EXPECT_NE(want.post, post0);  // the HC pre overwrote what the post read
  for (int threads : {1, 3}) {
    const Out got = run(true, threads);
    EXPECT_EQ(got.x, want.x) << threads;
    EXPECT_EQ(got.mix, want.mix) << threads;
    EXPECT_EQ(got.y, want.y) << threads;
    EXPECT_EQ(got.post, want.post) << threads;
    EXPECT_EQ(got.comb, want.comb) << threads;
    EXPECT_EQ(got.normed, want.normed) << threads;
  }
}

TEST(CpuBackend, CompressorRatio4PoolsTwoWindowsAndShiftsState) {
  auto be = make_cpu_backend(1);
  const int D = 128, W = 2 * D, R = 4;
  std::vector<float> skv(8 * W, 0.0f), ssc(8 * W, -1.0e30f);
  std::vector<uint16_t> ape(R * W, quant::f32_to_f16(0.0f));
  std::vector<float> norm(D, 1.0f), pooled(D);
  const int row_bytes = quant::fp8_row_bytes(D, 64);
  std::vector<uint8_t> out(row_bytes, 0xa5);  // FP8 store; the sentinel: written only by the emitting step
  RopeParams rp;
  // Window 0: token t has kv = t+1 everywhere, equal scores: the pooled value is the mean of
  // the current lane (1+2+3+4)/4 = 2.5 because the previous lane is still empty.
  int emitted = 0;
  for (int t = 0; t < 4; ++t) {
    std::vector<float> kv(W, static_cast<float>(t + 1)), sc(W, 0.0f);
    CompressorStepParams p;
    p.state_kv = skv.data();
    p.state_score = ssc.data();
    p.kv_cur = kv.data();
    p.sc_cur = sc.data();
    p.ape = ape.data();
    p.norm = norm.data();
    p.ratio = R;
    p.head_dim = D;
    p.n_rot = 64;
    p.pos = t;
    p.rope = rp;
    p.indexer = false;
    p.pooled = pooled.data();
    p.out_fp8 = out.data();
    be->compressor_step(p);
    emitted += compressor_emits(t, R);
    EXPECT_EQ(out[row_bytes - 1] != 0xa5, compressor_emits(t, R)) << t;
  }
  EXPECT_EQ(emitted, 1);
  // The row: pooled 2.5 everywhere, normed, roped at position 0, FP8 on the non-RoPE dims; its
  // FP8 store decodes to the f16 row of those values, and is the bytes of fp8_kv_row_store.
  std::vector<float> want(D, 2.5f);
  cpu::rms_norm_row(want.data(), norm.data(), want.data(), D, 1e-6f);
  cpu::rope_tail_rows(want.data(), 1, D, 64, 0, rp, false);
  std::vector<uint8_t> want_store(row_bytes);
  std::vector<float> stored = want;
  quant::fp8_kv_row_store(stored.data(), D, 64, want_store.data());
  quant::fp8_e4m3_roundtrip(want.data(), D - 64);
  EXPECT_EQ(0, std::memcmp(want.data(), pooled.data(), sizeof(float) * D));
  EXPECT_EQ(out, want_store);
  std::vector<float> dec(D);
  quant::fp8_row_decode(out.data(), D, 64, dec.data());
  for (int j = 0; j < D; ++j) EXPECT_EQ(quant::f32_bits(dec[j]), quant::f32_bits(quant::f16_round(want[j]))) << j;
  EXPECT_EQ(dec[0], 1.0f);
  // State rows 4..7 moved to 0..3.
  for (int r = 0; r < 4; ++r) EXPECT_EQ(skv[r * W], static_cast<float>(r + 1));
}

// compressor_rows (a prefill group's chain in one call) is the steps one by one: the same state
// (every row) and the same stored rows, over calls that start and end mid-window, for both
// ratios and both row kinds. The CPU runs the default (Backend::compressor_rows), which the
// CUDA kernels are tested against.
TEST(CpuBackend, CompressorRowsAreTheStepsOneByOne) {
  auto be = make_cpu_backend(2);
  struct Case {
    int ratio, head_dim;
    bool indexer;
    std::vector<int> calls;
  };
  for (const Case& c : {Case{4, 128, false, {3, 1, 9, 0, 22}}, Case{4, 128, true, {5, 16, 2}},
                        Case{128, 128, false, {100, 40, 130}}}) {
    const int R = c.ratio, D = c.head_dim, W = (R == 4 ? 2 : 1) * D, rows = (R == 4 ? 2 : 1) * R;
    int total = 0;
    for (int n : c.calls) total += n;
    const std::vector<float> kv = randv(static_cast<size_t>(total) * W, 11);
    const std::vector<float> sc = randv(static_cast<size_t>(total) * W, 12, 3.0f);
    std::vector<uint16_t> ape(static_cast<size_t>(R) * W);
    const std::vector<float> a = randv(ape.size(), 13, 0.5f);
    for (size_t i = 0; i < a.size(); ++i) ape[i] = quant::f32_to_f16(a[i]);
    const std::vector<float> norm = randv(D, 14);
    const int rb = c.indexer ? quant::fp4_row_bytes(D) : quant::fp8_row_bytes(D, 64);
    const int max_out = total / R + 2;
    // a: compressor_rows per call; b: compressor_step per row. Both from the same prior state.
    std::vector<float> skv_a = randv(static_cast<size_t>(rows) * W, 15), ssc_a = randv(static_cast<size_t>(rows) * W, 16);
    std::vector<float> skv_b = skv_a, ssc_b = ssc_a, pooled(D);
    std::vector<uint8_t> out_a(static_cast<size_t>(max_out) * rb, 0), out_b = out_a;
    CompressorStepParams base;
    base.ape = ape.data();
    base.norm = norm.data();
    base.ratio = R;
    base.head_dim = D;
    base.n_rot = 64;
    base.indexer = c.indexer;
    base.pooled = pooled.data();
    int64_t pos = 1001, row = 0, emitted = 0;
    for (int n : c.calls) {
      CompressorRowsParams p;
      p.step = base;
      p.n = n;
      p.step.state_kv = skv_a.data();
      p.step.state_score = ssc_a.data();
      p.step.pos = pos;
      p.step.kv_cur = kv.data() + row * W;
      p.step.sc_cur = sc.data() + row * W;
      (c.indexer ? p.step.out_fp4 : p.step.out_fp8) = out_a.data() + emitted * rb;
      be->compressor_rows(p);
      for (int i = 0; i < n; ++i) {
        CompressorStepParams q = p.step;
        q.state_kv = skv_b.data();
        q.state_score = ssc_b.data();
        q.pos = pos + i;
        q.kv_cur = kv.data() + (row + i) * W;
        q.sc_cur = sc.data() + (row + i) * W;
        q.out_fp4 = q.out_fp8 = nullptr;
        (c.indexer ? q.out_fp4 : q.out_fp8) = out_b.data() + emitted * rb;
        be->compressor_step(q);
        emitted += compressor_emits(q.pos, R);
      }
      pos += n;
      row += n;
      ASSERT_EQ(0, std::memcmp(skv_a.data(), skv_b.data(), skv_a.size() * sizeof(float))) << "ratio " << R << " at " << pos;
      ASSERT_EQ(0, std::memcmp(ssc_a.data(), ssc_b.data(), ssc_a.size() * sizeof(float))) << "ratio " << R << " at " << pos;
      ASSERT_EQ(out_a, out_b) << "ratio " << R << " at " << pos;
    }
    EXPECT_GE(emitted, 2);
  }
}

// The indexer row of a compressor step (Hadamard + FP4) goes to out_fp4 as the FP4 store of
// its f16 row: the store decodes to f16_round of the row built in pooled, and that row is
// the QAT of the normed, roped pooled row. Four tokens with the same kv pool to kv exactly.
TEST(CpuBackend, CompressorIndexerRowIsTheFp4StoreOfTheF16Row) {
  auto be = make_cpu_backend(1);
  const int D = 128, W = 2 * D, R = 4, n_rot = 64;
  const int row_bytes = quant::fp4_row_bytes(D);
  std::vector<float> skv(8 * W, 0.0f), ssc(8 * W, -1.0e30f);
  std::vector<uint16_t> ape(R * W, quant::f32_to_f16(0.0f));
  const auto norm = randv(D, 41);
  std::vector<float> pooled(D);
  std::vector<uint8_t> out(2 * row_bytes, 0x5a);
  RopeParams rp;
  for (int win = 0; win < 2; ++win) {
    const auto kv = randv(W, 42 + win, win == 0 ? 1.0f : 1.0e-3f);
    std::vector<float> sc(W, 0.0f);
    for (int t = 4 * win; t < 4 * win + 4; ++t) {
      CompressorStepParams p;
      p.state_kv = skv.data();
      p.state_score = ssc.data();
      p.kv_cur = kv.data();
      p.sc_cur = sc.data();
      p.ape = ape.data();
      p.norm = norm.data();
      p.ratio = R;
      p.head_dim = D;
      p.n_rot = n_rot;
      p.pos = t;
      p.rope = rp;
      p.indexer = true;
      p.pooled = pooled.data();
      p.out_fp4 = out.data() + win * row_bytes;
      be->compressor_step(p);
      EXPECT_EQ(out[win * row_bytes + row_bytes - 1] != 0x5a, compressor_emits(t, R)) << t;
    }
    if (win == 1) continue;  // the second window also pools the first: its row is checked by decode only
    std::vector<float> want(kv.begin() + D, kv.end());  // the current lane of the window
    cpu::rms_norm_row(want.data(), norm.data(), want.data(), D, 1e-6f);
    cpu::rope_tail_rows(want.data(), 1, D, n_rot, 0, rp, false);
    quant::indexer_qat_row(want.data());
    EXPECT_EQ(0, std::memcmp(want.data(), pooled.data(), sizeof(float) * D));
  }
  for (int win = 0; win < 2; ++win) {
    std::vector<float> dec(D);
    quant::fp4_row_decode(out.data() + win * row_bytes, D, dec.data(), quant::fp4_value_table());
    if (win == 1) {
      for (int j = 0; j < D; ++j) {
        const float f = quant::f16_round(pooled[j]);
        EXPECT_EQ(0, std::memcmp(&dec[j], &f, 4)) << j;
      }
    }
    int nonzero = 0;
    for (float v : dec) nonzero += v != 0.0f;
    EXPECT_GT(nonzero, D / 2) << win;
  }
  std::vector<float> want(D);  // window 0 again, from its inputs
  {
    const auto kv = randv(W, 42, 1.0f);
    std::copy(kv.begin() + D, kv.end(), want.begin());
    cpu::rms_norm_row(want.data(), norm.data(), want.data(), D, 1e-6f);
    cpu::rope_tail_rows(want.data(), 1, D, n_rot, 0, rp, false);
    quant::indexer_qat_row(want.data());
    std::vector<float> dec(D);
    quant::fp4_row_decode(out.data(), D, dec.data(), quant::fp4_value_table());
    for (int j = 0; j < D; ++j) {
      const float f = quant::f16_round(want[j]);
      EXPECT_EQ(0, std::memcmp(&dec[j], &f, 4)) << j;
    }
  }
}

TEST(CpuBackend, IndexerTopKPrefersLowIndexOnTies) {
  auto be = make_cpu_backend(2);
  const int n = 40, hd = 128;
  // All rows identical except rows 7 and 30 which score higher: top-4 = {7, 30, 0, 1}.
  const int rb = quant::fp4_row_bytes(hd);
  std::vector<uint8_t> rows(static_cast<size_t>(n) * rb);  // FP4 stores
  for (int c = 0; c < n; ++c) {
    std::vector<float> v(hd, c == 7 || c == 30 ? 1.0f : 0.5f);  // exact E2M1 values at their scale
    quant::fp4_e2m1_roundtrip_row_store(v.data(), hd, rows.data() + c * rb);
  }
  std::vector<float> q(hd, 1.0f), w(1, 1.0f), scores(n);
  std::vector<int32_t> order(n);
  std::vector<uint8_t> allowed(n);
  IndexerSelectParams p;
  p.q = q.data();
  p.w = w.data();
  p.rows = rows.data();
  p.n_rows = n;
  p.n_head = 1;
  p.head_dim = hd;
  p.top_k = 4;
  p.scores = scores.data();
  p.order = order.data();
  p.allowed = allowed.data();
  be->indexer_select(&p, 1);
  std::vector<int> sel;
  for (int c = 0; c < n; ++c) {
    if (allowed[c]) sel.push_back(c);
  }
  EXPECT_EQ(sel, (std::vector<int>{0, 1, 7, 30}));
}

TEST(CpuBackend, SinkAttentionMatchesFormula) {
  auto be = make_cpu_backend(1);
  const int D = 64, nh = 2, n_raw = 3;
  const auto q = randv(nh * D, 9);
  const auto kv = randv(n_raw * D, 10);
  const float sinks[2] = {0.3f, -0.2f};
  std::vector<float> scores(nh * n_raw), out(nh * D);
  SinkAttentionParams p;
  p.q = q.data();
  p.raw = kv.data();
  p.raw_cap = n_raw;
  p.n_raw = n_raw;
  p.sinks = sinks;
  p.n_head = nh;
  p.head_dim = D;
  p.scores = scores.data();
  p.out = out.data();
  be->sink_attention(&p, 1);
  for (int h = 0; h < nh; ++h) {
    double s[3], mx = sinks[h];
    for (int r = 0; r < 3; ++r) {
      double d = 0;
      for (int j = 0; j < D; ++j) d += static_cast<double>(q[h * D + j]) * kv[r * D + j];
      s[r] = d / std::sqrt(static_cast<double>(D));
      mx = std::max(mx, s[r]);
    }
    double den = std::exp(sinks[h] - mx);
    for (int r = 0; r < 3; ++r) den += std::exp(s[r] - mx);
    for (int j = 0; j < D; ++j) {
      double o = 0;
      for (int r = 0; r < 3; ++r) o += std::exp(s[r] - mx) * kv[r * D + j];
      EXPECT_NEAR(out[h * D + j], o / den, 1e-5);
    }
  }
}

// A batch of independent attention queries (different key counts, compressed rows with and
// without a mask, sizes on both sides of the inline threshold) gives, per query, the bits of
// that query alone on one thread, at any thread count; with the keys as the target stores them
// (raw rows as f16 bits, compressed rows as FP8 stores) it gives the bits of the same
// (decoded) keys as f32 (the drafter's kind). D 32 with n_rot 32: an FP8 store of f16 dims
// only; D 128 with n_rot 64: one FP8 block and 64 f16 dims.
TEST(CpuBackend, BatchedSinkAttentionEqualsSingleQueries) {
  for (const int D : {32, 128}) {
    const int nh = 8, n_q = 6, n_comp = 24, n_rot = D == 32 ? 32 : 64;
    const int rb = quant::fp8_row_bytes(D, n_rot);
    auto kv = randv(static_cast<size_t>(64) * D, 21);
    auto comp = randv(static_cast<size_t>(n_comp) * D, 22);
    std::vector<uint16_t> kv16(kv.size());
    std::vector<uint8_t> comp8(static_cast<size_t>(n_comp) * rb);
    quant::f32_to_f16_row(kv.data(), kv16.data(), static_cast<int64_t>(kv.size()));
    quant::f16_to_f32_row(kv16.data(), kv.data(), static_cast<int64_t>(kv.size()));
    for (int c = 0; c < n_comp; ++c) {
      quant::fp8_kv_row_store(comp.data() + c * D, D, n_rot, comp8.data() + c * rb);
      quant::fp8_row_decode(comp8.data() + c * rb, D, n_rot, comp.data() + c * D);
    }
    const auto qs = randv(static_cast<size_t>(n_q) * nh * D, 23);
    const auto sinks = randv(nh, 24);
    std::vector<uint8_t> mask(n_comp);
    for (int c = 0; c < n_comp; ++c) mask[c] = (c * 7) % 3 != 0;
    const int64_t stride = static_cast<int64_t>(nh) * (64 + n_comp);
    auto queries = [&](std::vector<float>& scores, std::vector<float>& out, bool stored = false) {
      scores.assign(static_cast<size_t>(n_q) * stride, 0.0f);
      out.assign(static_cast<size_t>(n_q) * nh * D, 0.0f);
      std::vector<SinkAttentionParams> p(n_q);
      for (int i = 0; i < n_q; ++i) {
        p[i].q = qs.data() + static_cast<size_t>(i) * nh * D;
        p[i].raw = kv.data();               // windows that slide by one row per query
        p[i].raw_cap = 64;
        p[i].raw_first = i;
        p[i].n_raw = 40 + i;
        p[i].comp = i % 2 == 0 ? comp.data() : nullptr;
        p[i].n_comp = i % 2 == 0 ? n_comp - i : 0;
        p[i].comp_allowed = i % 4 == 0 ? mask.data() : nullptr;
        p[i].sinks = sinks.data();
        p[i].n_head = nh;
        p[i].head_dim = D;
        p[i].scores = scores.data() + i * stride;
        p[i].out = out.data() + static_cast<size_t>(i) * nh * D;
        p[i].n_rot = n_rot;
        p[i].pos = 100 + i;
        if (stored) {
          p[i].raw_f16 = kv16.data();
          p[i].comp_fp8 = p[i].comp != nullptr ? comp8.data() : nullptr;
          p[i].raw = p[i].comp = nullptr;
        }
      }
      return p;
    };
    std::vector<float> s1, want;
    auto single = queries(s1, want);
    auto be1 = make_cpu_backend(1);
    for (int i = 0; i < n_q; ++i) be1->sink_attention(&single[i], 1);
    for (const int threads : {1, 2, 4}) {
      auto be = make_cpu_backend(threads);
      std::vector<float> s2, got;
      auto batch = queries(s2, got);
      be->sink_attention(batch.data(), n_q);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)))
          << "D " << D << ", threads " << threads;
      std::vector<float> s3, got16;
      auto batch16 = queries(s3, got16, true);
      be->sink_attention(batch16.data(), n_q);
      EXPECT_EQ(0, std::memcmp(got16.data(), want.data(), want.size() * sizeof(float)))
          << "stored keys, D " << D << ", threads " << threads;
    }
  }
}

// Likewise for the indexer: every query of a batch selects what it selects alone.
TEST(CpuBackend, BatchedIndexerSelectEqualsSingleQueries) {
  const int hd = 128, nh = 4, n_q = 5, max_rows = 220, top_k = 16;
  auto rowsf = randv(static_cast<size_t>(max_rows) * hd, 31);  // becomes the QAT'd rows
  const int rb = quant::fp4_row_bytes(hd);
  std::vector<uint8_t> rows(static_cast<size_t>(max_rows) * rb);  // the FP4 indexer store
  for (int c = 0; c < max_rows; ++c) quant::indexer_qat_row_store(rowsf.data() + c * hd, hd, rows.data() + c * rb);
  const auto qs = randv(static_cast<size_t>(n_q) * nh * hd, 32);
  const auto ws = randv(static_cast<size_t>(n_q) * nh, 33);
  auto queries = [&](std::vector<float>& scores, std::vector<int32_t>& order, std::vector<uint8_t>& allowed) {
    scores.assign(static_cast<size_t>(n_q) * max_rows, 0.0f);
    order.assign(static_cast<size_t>(n_q) * max_rows, 0);
    allowed.assign(static_cast<size_t>(n_q) * max_rows, 2);
    std::vector<IndexerSelectParams> p(n_q);
    for (int i = 0; i < n_q; ++i) {
      p[i].q = qs.data() + static_cast<size_t>(i) * nh * hd;
      p[i].w = ws.data() + static_cast<size_t>(i) * nh;
      p[i].rows = rows.data();
      p[i].n_rows = 120 + 25 * i;  // a growing prefix, as rows of a verify batch see
      p[i].n_head = nh;
      p[i].head_dim = hd;
      p[i].top_k = top_k;
      p[i].scores = scores.data() + i * max_rows;
      p[i].order = order.data() + i * max_rows;
      p[i].allowed = allowed.data() + i * max_rows;
    }
    return p;
  };
  std::vector<float> sc1;
  std::vector<int32_t> or1;
  std::vector<uint8_t> want;
  auto single = queries(sc1, or1, want);
  auto be1 = make_cpu_backend(1);
  for (int i = 0; i < n_q; ++i) be1->indexer_select(&single[i], 1);
  for (int i = 0; i < n_q; ++i) {
    int picked = 0;
    for (int64_t c = 0; c < single[i].n_rows; ++c) picked += want[i * max_rows + c];
    EXPECT_EQ(picked, top_k);
  }
  // A score is Σ_k relu(dot_f32(the f16-rounded QAT row, q_k))·w_k in head order.
  for (int64_t c = 0; c < single[0].n_rows; c += 17) {
    float row[hd];
    quant::f16_round_row(rowsf.data() + c * hd, row, hd);
    float sc = 0.0f;
    for (int k = 0; k < nh; ++k) {
      const float d = quant::dot_f32(row, qs.data() + k * hd, hd);
      sc += (d > 0.0f ? d : 0.0f) * ws[k];
    }
    EXPECT_EQ(sc, sc1[c]) << "row " << c;
  }
  for (const int threads : {1, 2, 4}) {
    auto be = make_cpu_backend(threads);
    std::vector<float> sc2;
    std::vector<int32_t> or2;
    std::vector<uint8_t> got;
    auto batch = queries(sc2, or2, got);
    be->indexer_select(batch.data(), n_q);
    EXPECT_EQ(got, want) << "threads " << threads;
    EXPECT_EQ(0, std::memcmp(sc2.data(), sc1.data(), sc1.size() * sizeof(float))) << "threads " << threads;
  }
}

TEST(CpuBackend, RouterTopKKeepsLowerIdOnTiesAndRenormalizes) {
  auto be = make_cpu_backend(1);
  // Logits chosen so experts 1 and 3 tie for the top score and 5 is third.
  std::vector<float> logits = {0.0f, 3.0f, 0.5f, 3.0f, -1.0f, 2.0f};
  std::vector<float> probs(6), wt(3);
  std::vector<int32_t> sel(3);
  RouteParams p;
  p.logits = logits.data();
  p.n_rows = 1;
  p.n_expert = 6;
  p.n_used = 3;
  p.renorm = true;
  p.scale = 1.5f;
  p.probs = probs.data();
  p.sel = sel.data();
  p.wt = wt.data();
  be->route(p);
  EXPECT_EQ(sel, (std::vector<int32_t>{1, 3, 5}));
  const float p1 = sqrtf(cpu::softplus_stable(3.0f)), p5 = sqrtf(cpu::softplus_stable(2.0f));
  const float sum = p1 + p1 + p5;
  EXPECT_EQ(wt[0], p1 / sum * 1.5f);
  EXPECT_EQ(wt[2], p5 / sum * 1.5f);
  // A bias can reorder the selection; a hash table overrides it with the token's row.
  std::vector<float> bias = {10.0f, 0, 0, 0, 0, 0};
  p.bias = bias.data();
  be->route(p);
  EXPECT_EQ(sel, (std::vector<int32_t>{0, 1, 3}));
  std::vector<int32_t> table = {0, 1, 2, 4, 2, 0};  // token 0 -> {0,1,2}; token 1 -> {4,2,0}
  int32_t token = 1;
  p.tid2eid = table.data();
  p.tokens = &token;
  be->route(p);
  EXPECT_EQ(sel, (std::vector<int32_t>{4, 2, 0}));
}

TEST(CpuBackend, SwigluClampsGateAboveAndUpBothSides) {
  auto be = make_cpu_backend(1);
  std::vector<float> g = {20.0f, -3.0f, 1.0f}, u = {20.0f, -20.0f, 0.5f}, out(3);
  SwigluParams p{g.data(), u.data(), out.data(), 3, 10.0f};
  be->swiglu(p);
  EXPECT_EQ(out[0], cpu::silu(10.0f) * 10.0f);
  EXPECT_EQ(out[1], cpu::silu(-3.0f) * -10.0f);
  EXPECT_EQ(out[2], cpu::silu(1.0f) * 0.5f);
}

TEST(CpuBackend, ReadoutOpsAreTheCoreDefinitionsPerRow) {
  // top_k of r rows (strided) == core top_k_row per row; argmax with a margin == top_two.
  auto be = backend::make_cpu_backend(2);
  const int rows = 5, k = 9;
  const int64_t n = 333, stride = 337;
  std::mt19937 rng(8);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * stride));
  for (auto& v : x) v = std::round(g(rng) * 3.0f);  // ties
  x[5] = std::nanf("");
  std::vector<int32_t> ids(rows * k), am(rows);
  std::vector<float> vals(rows * k), mg(rows);
  be->top_k(backend::TopKParams{x.data(), n, stride, rows, k, 4, ids.data(), vals.data()});
  be->argmax(backend::ArgmaxParams{x.data(), n, stride, rows, am.data(), 4, mg.data()});
  for (int r = 0; r < rows; ++r) {
    const std::span<const float> row(x.data() + r * stride, static_cast<size_t>(n));
    std::vector<int32_t> wi(k);
    std::vector<float> wv(k);
    top_k_row(row, k, 4, wi.data(), wv.data());
    for (int j = 0; j < k; ++j) {
      EXPECT_EQ(wi[j], ids[r * k + j]) << r << "," << j;
      EXPECT_EQ(wv[j], vals[r * k + j]) << r << "," << j;
    }
    const TopTwo t = top_two(row, 4);
    EXPECT_EQ(t.id, am[r]);
    EXPECT_EQ(t.margin, mg[r]);
    EXPECT_EQ(t.id, ids[r * k]);  // the first candidate is the greedy token
  }
}

}  // namespace
}  // namespace ds4::backend
