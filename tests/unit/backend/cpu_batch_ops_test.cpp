// tests/unit/backend/cpu_batch_ops_test.cpp — the batched / hoisted forms of the CPU ops give
// exactly the bits of their one-row definitions.
//
//  * rms_norm_rows (the kernel table's 64-lane double sums) == rms_norm_row per row, weighted,
//    unweighted and in place, for 1..11 rows (more than one group of 8);
//  * rope_tail_rows (cos/sin computed once per call) == the per-head formula of §3.8, with
//    and without the YaRN ramp, forward and inverse;
//  * the routed-expert op (pairs grouped by expert, one parallel task list) gives each row
//    the bits of that row run alone, for 1 and 2 threads, IQ2_XXS gate/up + Q2_K down;
//  * matmul_grouped == its matmuls one by one;
//  * attention_inputs (all rows' RoPE / FP8 / raw push / indexer query in one op), sink
//    attention's fused de-rotation and the router give each row the bits of its per-row
//    steps, for 1 and 4 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
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

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

TEST(CpuBatchOps, RmsNormRowsEqualsRowByRow) {
  const int64_t n = 301, stride = 307;
  const auto w = randv(n, 3);
  for (int rows = 1; rows <= 11; ++rows) {
    const auto x = randv(static_cast<size_t>(rows * stride), 10 + rows, 5.0f);
    for (const float* wp : {w.data(), static_cast<const float*>(nullptr)}) {
      std::vector<float> want(x.size(), 0.0f), got(x.size(), 0.0f);
      for (int i = 0; i < rows; ++i) cpu::rms_norm_row(x.data() + i * stride, wp, want.data() + i * stride, n, 1e-6f);
      cpu::rms_norm_rows(x.data(), wp, got.data(), n, stride, rows, 1e-6f);
      EXPECT_TRUE(same_bits(want.data(), got.data(), want.size())) << rows;
      std::vector<float> inplace = x;
      cpu::rms_norm_rows(inplace.data(), wp, inplace.data(), n, stride, rows, 1e-6f);
      for (int i = 0; i < rows; ++i)
        EXPECT_TRUE(same_bits(want.data() + i * stride, inplace.data() + i * stride, n)) << rows << " in place";
    }
  }
}

// The §3.8 formula with cos/sin evaluated per head (the definition rope_tail_rows hoists),
// written out here independently of core/rope.h except for the sin / cos themselves.
void rope_per_head(float* x, int n_head, int head_dim, int n_rot, int64_t pos, const RopeParams& rp,
                   bool inverse) {
  const int n_nope = head_dim - n_rot;
  const float theta_scale = powf(rp.freq_base, -2.0f / static_cast<float>(n_rot));
  const float sin_sign = inverse ? -1.0f : 1.0f;
  float corr_lo = 0.0f, corr_hi = 0.0f;
  auto corr_dim = [&](float beta) {
    return static_cast<float>(n_rot) * logf(static_cast<float>(rp.n_ctx_orig) / (beta * 2.0f * static_cast<float>(M_PI))) /
           (2.0f * logf(rp.freq_base));
  };
  if (rp.ext_factor != 0.0f) {
    corr_lo = fmaxf(0.0f, floorf(corr_dim(rp.beta_fast)));
    corr_hi = fminf(static_cast<float>(n_rot - 1), ceilf(corr_dim(rp.beta_slow)));
  }
  for (int h = 0; h < n_head; ++h) {
    float* tail = x + static_cast<int64_t>(h) * head_dim + n_nope;
    float theta_extrap = static_cast<float>(pos);
    for (int i = 0; i < n_rot; i += 2) {
      const float theta_interp = rp.freq_scale * theta_extrap;
      float theta = theta_interp;
      float mscale = rp.attn_factor;
      if (rp.ext_factor != 0.0f) {
        const float y = (static_cast<float>(i / 2) - corr_lo) / fmaxf(0.001f, corr_hi - corr_lo);
        const float ramp_mix = (1.0f - fminf(1.0f, fmaxf(0.0f, y))) * rp.ext_factor;
        theta = theta_interp * (1.0f - ramp_mix) + theta_extrap * ramp_mix;
        mscale *= 1.0f + 0.1f * logf(1.0f / rp.freq_scale);
      }
      float sn, cs;
      detmath::sincos_f32(theta, &sn, &cs);  // the shared sin / cos (core/detmath.h)
      const float c = cs * mscale;
      const float s = sin_sign * sn * mscale;
      const float x0 = tail[i];
      const float x1 = tail[i + 1];
      tail[i] = x0 * c - x1 * s;
      tail[i + 1] = x0 * s + x1 * c;
      theta_extrap *= theta_scale;
    }
  }
}

TEST(CpuBatchOps, RopeTailRowsEqualsPerHeadFormula) {
  RopeParams plain;
  RopeParams yarn;
  yarn.freq_scale = 0.0625f;
  yarn.ext_factor = 1.0f;
  yarn.attn_factor = 1.0f / (1.0f + 0.1f * logf(16.0f));
  yarn.n_ctx_orig = 4096;
  for (const RopeParams& rp : {plain, yarn}) {
    for (int64_t pos : {0, 1, 37, 4095, 100000}) {
      for (bool inverse : {false, true}) {
        const auto x = randv(8 * 128, static_cast<uint32_t>(pos) + (inverse ? 7u : 3u));
        std::vector<float> want = x, got = x;
        rope_per_head(want.data(), 8, 128, 64, pos, rp, inverse);
        cpu::rope_tail_rows(got.data(), 8, 128, 64, pos, rp, inverse);
        EXPECT_TRUE(same_bits(want.data(), got.data(), want.size())) << pos << " " << inverse << " " << rp.ext_factor;
      }
    }
  }
}

TEST(CpuBatchOps, MoeRowsEqualSingleRowRuns) {
  const int64_t E = 512, F = 256;
  const int n_expert = 6, U = 3, R = 7;
  const size_t gu_row = quant::row_bytes(gguf::GgmlType::kIQ2_XXS, E);
  const size_t d_row = quant::row_bytes(gguf::GgmlType::kQ2_K, F);
  std::vector<uint8_t> gate(gu_row * F * n_expert), up(gate.size()), down(d_row * E * n_expert);
  quant::fill_random_blocks(gguf::GgmlType::kIQ2_XXS, gate.data(), E * F * n_expert, 0.3f, 11);
  quant::fill_random_blocks(gguf::GgmlType::kIQ2_XXS, up.data(), E * F * n_expert, 0.3f, 12);
  quant::fill_random_blocks(gguf::GgmlType::kQ2_K, down.data(), F * E * n_expert, 0.3f, 13);
  MoeParams base;
  base.gate = ExpertMatrix{gate.data(), gguf::GgmlType::kIQ2_XXS, E, F, n_expert, gu_row};
  base.up = ExpertMatrix{up.data(), gguf::GgmlType::kIQ2_XXS, E, F, n_expert, gu_row};
  base.down = ExpertMatrix{down.data(), gguf::GgmlType::kQ2_K, F, E, n_expert, d_row};
  base.n_used = U;
  base.clamp = 7.0f;
  const auto x = randv(static_cast<size_t>(R * E), 21, 2.0f);
  // Rows share experts in different slots (and one row repeats no expert twice).
  const std::vector<int32_t> sel = {0, 1, 2, 2, 0, 5, 5, 4, 3, 1, 2, 0, 3, 4, 5, 0, 4, 2, 1, 5, 3};
  const auto wt = randv(sel.size(), 22, 1.0f);
  std::vector<float> want(static_cast<size_t>(R * E));
  {
    auto be = make_cpu_backend(1);
    std::vector<uint8_t> scratch(moe_scratch_bytes(E, F, U, 1));
    for (int i = 0; i < R; ++i) {
      MoeParams p = base;
      p.x = x.data() + i * E;
      p.sel = sel.data() + i * U;
      p.wt = wt.data() + i * U;
      p.n_rows = 1;
      p.out = want.data() + i * E;
      p.scratch = scratch.data();
      be->moe(p);
    }
  }
  for (int threads : {1, 2}) {
    auto be = make_cpu_backend(threads);
    std::vector<uint8_t> scratch(moe_scratch_bytes(E, F, U, R));
    std::vector<float> got(want.size(), -1.0f);
    MoeParams p = base;
    p.x = x.data();
    p.sel = sel.data();
    p.wt = wt.data();
    p.n_rows = R;
    p.out = got.data();
    p.scratch = scratch.data();
    be->moe(p);
    EXPECT_TRUE(same_bits(want.data(), got.data(), want.size())) << threads;
    // Non-trivial output (the op ran): some value differs from the fill.
    EXPECT_NE(got[3], -1.0f);
  }
}

// attention_inputs over R rows (1 and 4 threads) == per row, in order: q RoPE, kv RoPE, kv FP8
// round trip, the f16-rounded raw push into its ring slot, and (rows >= idx_first) the indexer
// query's RoPE, per-head Hadamard + FP4 QAT and head-weight scaling (the per-row steps the
// target forward ran before the op existed).
TEST(CpuBatchOps, AttentionInputsEqualPerRowSteps) {
  const int R = 7, NH = 8, D = 128, NR = 64, NIH = 4, IDX = 128, CAP = 11, first = 3;
  const int64_t pos0 = 4093;  // the ring wraps inside the batch
  RopeParams rp;
  rp.freq_scale = 0.0625f;
  rp.ext_factor = 1.0f;
  rp.n_ctx_orig = 4096;
  const float scale = 0.0441941738f;
  const auto q0 = randv(static_cast<size_t>(R * NH * D), 31, 3.0f);
  const auto kv0 = randv(static_cast<size_t>(R * D), 32, 3.0f);
  const auto iq0 = randv(static_cast<size_t>(R * NIH * IDX), 33, 3.0f);
  const auto iw0 = randv(static_cast<size_t>(R * NIH), 34, 2.0f);
  const auto rawf = randv(static_cast<size_t>(CAP * D), 35, 1.0f);
  std::vector<uint16_t> raw0(rawf.size());  // the f16 ring
  quant::f32_to_f16_row(rawf.data(), raw0.data(), static_cast<int64_t>(rawf.size()));
  std::vector<float> q = q0, kv = kv0, iq = iq0, iw = iw0;
  std::vector<uint16_t> raw = raw0;
  for (int r = 0; r < R; ++r) {
    const int64_t pos = pos0 + r;
    cpu::rope_tail_rows(q.data() + r * NH * D, NH, D, NR, pos, rp, false);
    float* k = kv.data() + r * D;
    cpu::rope_tail_rows(k, 1, D, NR, pos, rp, false);
    quant::fp8_e4m3_roundtrip(k, D - NR);
    for (int j = 0; j < D; ++j) raw[(pos % CAP) * D + j] = quant::f32_to_f16(k[j]);
    if (r < first) continue;
    cpu::rope_tail_rows(iq.data() + r * NIH * IDX, NIH, IDX, NR, pos, rp, false);
    for (int h = 0; h < NIH; ++h) quant::indexer_qat_row(iq.data() + (r * NIH + h) * IDX);
    for (int h = 0; h < NIH; ++h) iw[r * NIH + h] = iw[r * NIH + h] * scale;
  }
  for (int threads : {1, 4}) {
    auto be = make_cpu_backend(threads);
    std::vector<float> gq = q0, gkv = kv0, giq = iq0, giw = iw0;
    std::vector<uint16_t> graw = raw0;
    AttentionInputsParams p;
    p.n_rows = R;
    p.pos0 = pos0;
    p.rope = rp;
    p.n_rot = NR;
    p.head_dim = D;
    p.q = gq.data();
    p.q_stride = NH * D;
    p.n_head = NH;
    p.kv = gkv.data();
    p.raw = graw.data();
    p.raw_cap = CAP;
    p.iq = giq.data();
    p.iw = giw.data();
    p.n_idx_head = NIH;
    p.idx_dim = IDX;
    p.idx_first = first;
    p.iw_scale = scale;
    be->attention_inputs(p);
    EXPECT_TRUE(same_bits(q.data(), gq.data(), q.size())) << threads;
    EXPECT_TRUE(same_bits(kv.data(), gkv.data(), kv.size())) << threads;
    EXPECT_EQ(raw, graw) << threads;
    EXPECT_TRUE(same_bits(iq.data(), giq.data(), iq.size())) << threads;
    EXPECT_TRUE(same_bits(iw.data(), giw.data(), iw.size())) << threads;
    // Rows before idx_first keep their indexer inputs; untouched ring slots keep theirs.
    EXPECT_TRUE(same_bits(iq0.data(), giq.data(), first * NIH * IDX));
    EXPECT_TRUE(std::equal(raw0.begin() + 8 * D, raw0.begin() + 9 * D, graw.begin() + 8 * D));  // slot 8: not written
  }
}

// attention_inputs' folded norms (q_head_norm, kv_norm) == the rms_norm op on each q head and on
// kv first, then attention_inputs without them: the same bits, at 1 and 4 threads.
TEST(CpuBatchOps, AttentionInputsNormsEqualRmsNormFirst) {
  constexpr int R = 5, NH = 3, D = 128, NR = 64, CAP = 16;
  RopeParams rp;
  rp.n_ctx_orig = 4096;
  const auto q0 = randv(static_cast<size_t>(R * NH * D), 41, 3.0f);
  const auto kv0 = randv(static_cast<size_t>(R * D), 42, 3.0f);
  const auto w = randv(static_cast<size_t>(D), 43, 1.0f);
  auto base = [&](float* q, float* kv, uint16_t* raw) {
    AttentionInputsParams p;
    p.n_rows = R;
    p.pos0 = 77;
    p.rope = rp;
    p.n_rot = NR;
    p.head_dim = D;
    p.q = q;
    p.q_stride = NH * D;
    p.n_head = NH;
    p.kv = kv;
    p.raw = raw;
    p.raw_cap = CAP;
    p.norm_eps = 1e-6f;
    return p;
  };
  for (int threads : {1, 4}) {
    auto be = make_cpu_backend(threads);
    std::vector<float> q = q0, kv = kv0;
    std::vector<uint16_t> raw(CAP * D, 0);
    RmsNormParams n;
    n.x = n.out = q.data();
    n.n = D;
    n.n_rows = R * NH;
    n.eps = 1e-6f;
    be->rms_norm(n);
    n.x = n.out = kv.data();
    n.weight = w.data();
    n.n_rows = R;
    be->rms_norm(n);
    be->attention_inputs(base(q.data(), kv.data(), raw.data()));
    std::vector<float> fq = q0, fkv = kv0;
    std::vector<uint16_t> fraw(CAP * D, 0);
    AttentionInputsParams p = base(fq.data(), fkv.data(), fraw.data());
    p.q_head_norm = true;
    p.kv_norm = w.data();
    be->attention_inputs(p);
    EXPECT_TRUE(same_bits(q.data(), fq.data(), q.size())) << threads;
    EXPECT_TRUE(same_bits(kv.data(), fkv.data(), kv.size())) << threads;
    EXPECT_EQ(raw, fraw) << threads;
    EXPECT_FALSE(same_bits(q0.data(), fq.data(), q0.size()));  // the norm did change q
  }
}

// hc_pre's folded norm (normed = rms_norm(y) · w) == the rms_norm op on its y, weighted and not,
// at 1 and 4 threads over 1 and 7 rows; y, post and comb are the same with and without it.
TEST(CpuBatchOps, HcPreFoldedNormEqualsRmsNormAfter) {
  constexpr int NHC = 4, E = 96, MIX = 2 * NHC + NHC * NHC;
  const auto fw = randv(static_cast<size_t>(NHC * E * MIX), 51, 0.1f);
  std::vector<uint8_t> fn(quant::row_bytes(GgmlType::kF16, NHC * E) * MIX);
  quant::quantize_row(GgmlType::kF16, fw.data(), fn.data(), NHC * E * MIX);
  const std::vector<float> scale = {0.7f, 0.3f, 0.9f};
  const auto base = randv(MIX, 52);
  const auto w = randv(E, 53);
  for (int threads : {1, 4}) {
    auto be = make_cpu_backend(threads);
    for (int rows : {1, 7}) {
      for (const float* weight : {w.data(), static_cast<const float*>(nullptr)}) {
        const auto x = randv(static_cast<size_t>(rows * NHC * E), 54 + rows, 2.0f);
        std::vector<float> flat(rows * NHC * E), mix(rows * MIX), y(rows * E), post(rows * NHC), comb(rows * NHC * NHC);
        HcPreParams p;
        p.x = x.data();
        p.fn = Matrix{fn.data(), GgmlType::kF16, NHC * E, MIX, quant::row_bytes(GgmlType::kF16, NHC * E)};
        p.scale = scale.data();
        p.base = base.data();
        p.n_hc = NHC;
        p.n_embd = E;
        p.n_rows = rows;
        p.flat = flat.data(), p.mix = mix.data(), p.y = y.data(), p.post = post.data(), p.comb = comb.data();
        be->hc_pre(p);
        std::vector<float> want(rows * E);
        RmsNormParams n;
        n.x = y.data();
        n.weight = weight;
        n.out = want.data();
        n.n = E;
        n.n_rows = rows;
        n.eps = 1e-5f;
        be->rms_norm(n);
        std::vector<float> y2(rows * E), post2(rows * NHC), comb2(rows * NHC * NHC), normed(rows * E);
        HcPreParams q = p;
        q.y = y2.data(), q.post = post2.data(), q.comb = comb2.data();
        q.normed = normed.data();
        q.norm_weight = weight;
        q.norm_out_eps = 1e-5f;
        be->hc_pre(q);
        EXPECT_TRUE(same_bits(want.data(), normed.data(), want.size())) << threads << " threads, " << rows << " rows";
        EXPECT_TRUE(same_bits(y.data(), y2.data(), y.size()));
        EXPECT_TRUE(same_bits(post.data(), post2.data(), post.size()));
        EXPECT_TRUE(same_bits(comb.data(), comb2.data(), comb.size()));
        EXPECT_FALSE(same_bits(y.data(), normed.data(), y.size()));  // the norm did something
      }
    }
  }
}

// Sink attention with n_rot > 0 == the same queries without, each output head then de-rotated
// at its query's position; batched over queries and threads.
TEST(CpuBatchOps, SinkAttentionDerotatesEachHead) {
  const int NH = 4, D = 128, NR = 64, NK = 9, Q = 3;
  const auto q = randv(static_cast<size_t>(Q * NH * D), 41, 1.0f);
  const auto keys = randv(static_cast<size_t>(NK * D), 42, 1.0f);
  const auto sinks = randv(NH, 43, 1.0f);
  RopeParams rp;
  auto queries = [&](std::vector<float>& scores, std::vector<float>& out, bool derotate) {
    std::vector<SinkAttentionParams> ps(Q);
    for (int i = 0; i < Q; ++i) {
      SinkAttentionParams& a = ps[i];
      a.q = q.data() + i * NH * D;
      a.raw = keys.data();
      a.raw_cap = NK;
      a.n_raw = NK - i;
      a.sinks = sinks.data();
      a.n_head = NH;
      a.head_dim = D;
      a.scores = scores.data() + i * NH * NK;
      a.out = out.data() + i * NH * D;
      a.n_rot = derotate ? NR : 0;
      a.pos = 1000 + 5 * i;
      a.rope = rp;
    }
    return ps;
  };
  std::vector<float> scores(static_cast<size_t>(Q * NH * NK)), want(static_cast<size_t>(Q * NH * D));
  auto be1 = make_cpu_backend(1);
  auto plain = queries(scores, want, false);
  be1->sink_attention(plain.data(), Q);
  for (int i = 0; i < Q; ++i) cpu::rope_tail_rows(want.data() + i * NH * D, NH, D, NR, 1000 + 5 * i, rp, true);
  for (int threads : {1, 4}) {
    auto be = make_cpu_backend(threads);
    std::vector<float> got(want.size(), 0.0f);
    auto ps = queries(scores, got, true);
    be->sink_attention(ps.data(), Q);
    EXPECT_TRUE(same_bits(want.data(), got.data(), want.size())) << threads;
  }
}

// The router over R rows (1 and 4 threads, learned and hash routing) == each row routed alone.
TEST(CpuBatchOps, RouteRowsEqualSingleRows) {
  const int R = 9, X = 64, U = 6;
  const auto logits = randv(static_cast<size_t>(R * X), 51, 4.0f);
  const auto bias = randv(X, 52, 0.5f);
  std::vector<int32_t> table(static_cast<size_t>(20 * U)), tokens(R);
  for (size_t k = 0; k < table.size(); ++k) table[k] = static_cast<int32_t>((k * 7) % X);
  for (int i = 0; i < R; ++i) tokens[i] = (i * 3) % 20;
  for (bool hash : {false, true}) {
    RouteParams base;
    base.bias = hash ? nullptr : bias.data();
    base.tid2eid = hash ? table.data() : nullptr;
    base.n_expert = X;
    base.n_used = U;
    base.scale = 1.5f;
    std::vector<int32_t> want_sel(static_cast<size_t>(R * U));
    std::vector<float> want_wt(static_cast<size_t>(R * U)), probs(static_cast<size_t>(R * X));
    auto be1 = make_cpu_backend(1);
    for (int i = 0; i < R; ++i) {
      RouteParams p = base;
      p.logits = logits.data() + i * X;
      p.tokens = tokens.data() + i;
      p.n_rows = 1;
      p.probs = probs.data();
      p.sel = want_sel.data() + i * U;
      p.wt = want_wt.data() + i * U;
      be1->route(p);
    }
    for (int threads : {1, 4}) {
      auto be = make_cpu_backend(threads);
      std::vector<int32_t> sel(want_sel.size(), -1);
      std::vector<float> wt(want_wt.size(), 0.0f);
      RouteParams p = base;
      p.logits = logits.data();
      p.tokens = tokens.data();
      p.n_rows = R;
      p.probs = probs.data();
      p.sel = sel.data();
      p.wt = wt.data();
      be->route(p);
      EXPECT_EQ(sel, want_sel) << hash << " " << threads;
      EXPECT_TRUE(same_bits(want_wt.data(), wt.data(), wt.size())) << hash << " " << threads;
    }
  }
}

// matmul_grouped (one pool job, each matmul cut into output pieces) == the matmuls one by one,
// Q8_0 and F16 weights, 1 and 8 rows (the output LoRA's shape: group g reads its own slice of
// the x row and writes its own slice of the y row; and the compressor projections' mixed
// widths), 1 and 4 threads.
TEST(CpuBatchOps, MatmulGroupedEqualsSeparateMatmuls) {
  const int G = 4;
  const int64_t n_in = 256;
  // 160: pieces end inside a 16-output tile boundary; mixed widths as the compressors' groups.
  for (const std::vector<int64_t>& n_out :
       {std::vector<int64_t>{160, 160, 160, 160}, std::vector<int64_t>{160, 96, 160, 32}}) {
    int64_t off[G + 1] = {0};
    for (int g = 0; g < G; ++g) off[g + 1] = off[g] + n_out[g];
    const int64_t total = off[G];
    for (gguf::GgmlType t : {gguf::GgmlType::kQ8_0, gguf::GgmlType::kF16}) {
      const size_t rb = quant::row_bytes(t, n_in);
      std::vector<uint8_t> w(rb * total);
      quant::fill_random_blocks(t, w.data(), n_in * total, 0.5f, 61);
      for (int rows : {1, 8}) {
        const auto x = randv(static_cast<size_t>(rows * G * n_in), 62 + rows, 2.0f);
        auto params = [&](std::vector<float>& y) {
          std::vector<MatmulParams> ps(G);
          for (int g = 0; g < G; ++g) {
            ps[g].w = Matrix{w.data() + off[g] * rb, t, n_in, n_out[g], rb};
            ps[g].x = x.data() + g * n_in;
            ps[g].x_stride = G * n_in;
            ps[g].y = y.data() + off[g];
            ps[g].y_stride = total;
            ps[g].n_rows = rows;
          }
          return ps;
        };
        std::vector<float> want(static_cast<size_t>(rows * total), 0.0f);
        auto be1 = make_cpu_backend(1);
        for (const MatmulParams& q : params(want)) be1->matmul(q);
        for (int threads : {1, 4}) {
          auto be = make_cpu_backend(threads);
          std::vector<float> got(want.size(), -7.0f);
          auto ps = params(got);
          be->matmul_grouped(ps.data(), G);
          EXPECT_TRUE(same_bits(want.data(), got.data(), want.size()))
              << gguf::type_name(t) << " rows " << rows << " threads " << threads << " widths " << n_out[1];
        }
      }
    }
  }
}

}  // namespace
}  // namespace ds4::backend
