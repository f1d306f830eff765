// tests/unit/backend/cpu_row_helpers_test.cpp — the SIMD row helpers of the CPU backend
// (dot_f32_many, weighted_sum, RMSNorm statistic / scaling) and the op bodies built on them
// (sink attention heads, HC pre Sinkhorn over several rows, HC post) give exactly the bits of
// their plain scalar definitions, on every ISA the machine supports.
//
//  * sink_attention_heads == the per-key loop (quant::dot_f32, one axpy per key), with more
//    keys than one internal chunk (64) and with an allowed mask on the compressed rows; with
//    stored keys (the target's f16 raw rows and FP8 compressed rows) == the same keys decoded
//    to f32 (the drafter's kind), across the stored path's smaller chunks;
//  * hc_pre_finish_rows on 1..11 rows == hc_split_sinkhorn + stream sum row by row;
//  * rms_norm_rows == rms_norm_row per row for odd widths, every ISA.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kernels.h"
#include "core/detmath.h"
#include "quant/dot.h"
#include "quant/half.h"
#include "quant/kv_sim.h"

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

// Runs f once per supported ISA (restoring the original afterwards).
template <typename F>
void for_each_isa(F&& f) {
  const cpu::Isa original = cpu::active_isa();
  for (cpu::Isa isa : {cpu::Isa::kScalar, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
    if (!cpu::set_isa(isa)) continue;
    SCOPED_TRACE(cpu::isa_name(isa));
    f();
  }
  cpu::set_isa(original);
}

// The sink attention definition, key by key (the form the CPU backend had before batching).
void sink_reference(const SinkAttentionParams& p) {
  const int D = p.head_dim;
  const float kq_scale = 1.0f / sqrtf(static_cast<float>(D));
  const int64_t n_all = p.n_raw + p.n_comp;
  for (int h = 0; h < p.n_head; ++h) {
    const float* qh = p.q + h * D;
    float* score = p.scores + h * n_all;
    float mx = p.sinks[h];
    for (int r = 0; r < p.n_raw; ++r) {
      score[r] = quant::dot_f32(qh, p.raw_row(r), D) * kq_scale;
      if (score[r] > mx) mx = score[r];
    }
    for (int64_t c = 0; c < p.n_comp; ++c) {
      if (p.comp_allowed != nullptr && !p.comp_allowed[c]) {
        score[p.n_raw + c] = -1.0e30f;
        continue;
      }
      const float s = quant::dot_f32(qh, p.comp + c * D, D) * kq_scale;
      score[p.n_raw + c] = s;
      if (s > mx) mx = s;
    }
    float* oh = p.out + h * D;
    for (int j = 0; j < D; ++j) oh[j] = 0.0f;
    float den = detmath::exp_f32(p.sinks[h] - mx);
    auto add = [&](float w, const float* k) {
      den += w;
      for (int j = 0; j < D; ++j) {
        const float t = w * k[j];
        oh[j] = oh[j] + t;
      }
    };
    for (int r = 0; r < p.n_raw; ++r) add(detmath::exp_f32(score[r] - mx), p.raw_row(r));
    for (int64_t c = 0; c < p.n_comp; ++c) {
      if (p.comp_allowed != nullptr && !p.comp_allowed[c]) continue;
      add(detmath::exp_f32(score[p.n_raw + c] - mx), p.comp + c * D);
    }
    const float inv = 1.0f / den;
    for (int j = 0; j < D; ++j) oh[j] *= inv;
  }
}

TEST(CpuRowHelpers, SinkAttentionHeadsEqualPerKeyLoop) {
  const int D = 72, nh = 3;  // D not a multiple of 16: SIMD tails too
  for (const auto& [n_raw, n_comp, masked] : {std::tuple{5, 0, false}, std::tuple{40, 70, false},
                                              std::tuple{40, 70, true}, std::tuple{0, 9, true}}) {
    SCOPED_TRACE(testing::Message() << n_raw << " raw, " << n_comp << " comp, masked " << masked);
    const auto q = randv(nh * D, 1, 2.0f);
    const auto raw = randv(static_cast<size_t>(n_raw) * D + 1, 2);
    const auto comp = randv(static_cast<size_t>(n_comp) * D + 1, 3);
    std::vector<uint8_t> allowed(n_comp);
    for (int c = 0; c < n_comp; ++c) allowed[c] = (c % 3) != 1;
    const float sinks[3] = {0.3f, -0.2f, 1.5f};
    SinkAttentionParams p;
    p.q = q.data();
    p.raw = raw.data();  // a ring that wraps: positions 1003 .. 1003 + n_raw - 1
    p.raw_cap = n_raw;
    p.raw_first = 1003;
    p.n_raw = n_raw;
    p.comp = comp.data();
    p.n_comp = n_comp;
    p.comp_allowed = masked ? allowed.data() : nullptr;
    p.sinks = sinks;
    p.n_head = nh;
    p.head_dim = D;
    const size_t n_scores = static_cast<size_t>(nh) * (n_raw + n_comp);
    std::vector<float> want_scores(n_scores), want_out(nh * D);
    p.scores = want_scores.data();
    p.out = want_out.data();
    sink_reference(p);
    for_each_isa([&] {
      std::vector<float> scores(n_scores, 7.0f), out(nh * D, 7.0f);
      SinkAttentionParams g = p;
      g.scores = scores.data();
      g.out = out.data();
      cpu::sink_attention_heads(g, 0, 1);
      cpu::sink_attention_heads(g, 1, nh);
      EXPECT_TRUE(same_bits(want_out.data(), out.data(), out.size()));
      EXPECT_TRUE(same_bits(want_scores.data(), scores.data(), scores.size()));
    });
  }
}

// Stored keys (raw_f16 f16 rows, comp_fp8 FP8 stores) give the bits of the same values as f32
// keys: widths whose stored chunk (16384 / D keys) is below the 64 keys of the f32 chunk, so
// chunk edges differ too; FP8 stores of 8, 7 and 15 blocks.
TEST(CpuRowHelpers, SinkAttentionHeadsStoredKeysEqualF32Keys) {
  const int nh = 2;
  for (const auto& [D, n_rot, n_raw, n_comp, masked] :
       {std::tuple{520, 8, 40, 70, true}, std::tuple{512, 64, 33, 0, false}, std::tuple{512, 64, 5, 9, true},
        std::tuple{1000, 40, 3, 50, false}}) {
    SCOPED_TRACE(testing::Message() << "D " << D << ", " << n_raw << " raw, " << n_comp << " comp");
    const auto q = randv(static_cast<size_t>(nh) * D, 11, 2.0f);
    auto raw = randv(static_cast<size_t>(n_raw) * D + 1, 12);
    auto comp = randv(static_cast<size_t>(n_comp) * D + 1, 13);
    const int rb = quant::fp8_row_bytes(D, n_rot);
    std::vector<uint16_t> raw16(raw.size());
    std::vector<uint8_t> comp8(static_cast<size_t>(n_comp) * rb);
    quant::f32_to_f16_row(raw.data(), raw16.data(), static_cast<int64_t>(raw.size()));
    quant::f16_to_f32_row(raw16.data(), raw.data(), static_cast<int64_t>(raw.size()));
    for (int c = 0; c < n_comp; ++c) {  // the compressed rows' FP8 stores, and their values as f32
      quant::fp8_kv_row_store(comp.data() + static_cast<size_t>(c) * D, D, n_rot, comp8.data() + c * rb);
      quant::fp8_row_decode(comp8.data() + c * rb, D, n_rot, comp.data() + static_cast<size_t>(c) * D);
    }
    std::vector<uint8_t> allowed(n_comp);
    for (int c = 0; c < n_comp; ++c) allowed[c] = (c % 4) != 2;
    const float sinks[2] = {0.1f, -0.7f};
    SinkAttentionParams p;
    p.q = q.data();
    p.raw_cap = n_raw;
    p.raw_first = 77;
    p.n_raw = n_raw;
    p.n_comp = n_comp;
    p.comp_allowed = masked ? allowed.data() : nullptr;
    p.sinks = sinks;
    p.n_head = nh;
    p.head_dim = D;
    p.n_rot = n_rot;
    p.pos = 500;
    const size_t n_scores = static_cast<size_t>(nh) * (n_raw + n_comp);
    for_each_isa([&] {
      std::vector<float> want_scores(n_scores, 7.0f), want(static_cast<size_t>(nh) * D, 7.0f);
      std::vector<float> scores(n_scores, 5.0f), got(want.size(), 5.0f);
      SinkAttentionParams a = p, b = p;
      a.raw = raw.data(), a.comp = comp.data(), a.scores = want_scores.data(), a.out = want.data();
      b.raw_f16 = raw16.data(), b.comp_fp8 = comp8.data(), b.scores = scores.data(), b.out = got.data();
      ASSERT_TRUE(b.stored_keys() && b.keys_one_kind() && !a.stored_keys());
      cpu::sink_attention_heads(a, 0, nh);
      cpu::sink_attention_heads(b, 0, nh);
      EXPECT_TRUE(same_bits(want.data(), got.data(), got.size()));
      EXPECT_TRUE(same_bits(want_scores.data(), scores.data(), scores.size()));
    });
  }
}

TEST(CpuRowHelpers, HcPreFinishRowsEqualsRowByRow) {
  const int n_hc = 4;
  const int64_t n_embd = 40, mix_dim = 2 * n_hc + n_hc * n_hc, hc_dim = n_hc * n_embd;
  const auto scale = randv(3, 4, 1.0f);
  const auto base = randv(mix_dim, 5, 0.5f);
  for (int rows = 1; rows <= 11; ++rows) {
    SCOPED_TRACE(rows);
    const auto x = randv(static_cast<size_t>(rows * hc_dim), 6 + rows);
    const auto mix = randv(static_cast<size_t>(rows * mix_dim), 20 + rows, 3.0f);
    std::vector<float> want_y(rows * n_embd), want_post(rows * n_hc), want_comb(rows * n_hc * n_hc);
    for (int i = 0; i < rows; ++i) {
      float pre[n_hc];
      cpu::hc_split_sinkhorn(mix.data() + i * mix_dim, scale.data(), base.data(), n_hc, 20, 1e-6f, pre,
                             want_post.data() + i * n_hc, want_comb.data() + i * n_hc * n_hc);
      float* y = want_y.data() + i * n_embd;
      for (int64_t d = 0; d < n_embd; ++d) y[d] = 0.0f;
      for (int h = 0; h < n_hc; ++h)
        for (int64_t d = 0; d < n_embd; ++d) {
          const float t = pre[h] * x[i * hc_dim + h * n_embd + d];
          y[d] = y[d] + t;
        }
    }
    for_each_isa([&] {
      std::vector<float> y(want_y.size()), post(want_post.size()), comb(want_comb.size());
      HcPreParams p;
      p.x = x.data();
      p.scale = scale.data();
      p.base = base.data();
      p.n_hc = n_hc;
      p.n_embd = n_embd;
      p.sinkhorn_iters = 20;
      p.hc_eps = 1e-6f;
      p.n_rows = rows;
      p.mix = const_cast<float*>(mix.data());
      p.y = y.data();
      p.post = post.data();
      p.comb = comb.data();
      cpu::hc_pre_finish_rows(p);
      EXPECT_TRUE(same_bits(want_y.data(), y.data(), y.size()));
      EXPECT_TRUE(same_bits(want_post.data(), post.data(), post.size()));
      EXPECT_TRUE(same_bits(want_comb.data(), comb.data(), comb.size()));
    });
  }
}

TEST(CpuRowHelpers, HcPostRowsEqualsFormula) {
  const int n_hc = 4, rows = 3;
  const int64_t n_embd = 37, hc_dim = n_hc * n_embd;
  const auto f = randv(rows * n_embd, 30);
  const auto x = randv(rows * hc_dim, 31);
  const auto post = randv(rows * n_hc, 32);
  const auto comb = randv(rows * n_hc * n_hc, 33);
  std::vector<float> want(rows * hc_dim);
  for (int i = 0; i < rows; ++i)
    for (int c = 0; c < n_hc; ++c)
      for (int64_t d = 0; d < n_embd; ++d) {
        float acc = f[i * n_embd + d] * post[i * n_hc + c];
        for (int r = 0; r < n_hc; ++r) {
          const float t = comb[i * n_hc * n_hc + r * n_hc + c] * x[i * hc_dim + r * n_embd + d];
          acc = acc + t;
        }
        want[i * hc_dim + c * n_embd + d] = acc;
      }
  for_each_isa([&] {
    std::vector<float> out(want.size());
    HcPostParams p;
    p.f = f.data();
    p.x = x.data();
    p.post = post.data();
    p.comb = comb.data();
    p.out = out.data();
    p.n_hc = n_hc;
    p.n_embd = n_embd;
    p.n_rows = rows;
    cpu::hc_post_rows(p);
    EXPECT_TRUE(same_bits(want.data(), out.data(), out.size()));
  });
}

TEST(CpuRowHelpers, RmsNormRowsEqualsRowByRowOnEveryIsa) {
  for (const int64_t n : {int64_t{7}, int64_t{64}, int64_t{1031}}) {
    const int64_t stride = n + 3;
    const auto w = randv(n, 40);
    for (int rows : {1, 2, 6, 8, 9}) {
      const auto x = randv(static_cast<size_t>(rows * stride), 41 + rows, 4.0f);
      std::vector<float> want(x.size(), 0.0f);
      for (int i = 0; i < rows; ++i) cpu::rms_norm_row(x.data() + i * stride, w.data(), want.data() + i * stride, n, 1e-6f);
      for_each_isa([&] {
        std::vector<float> got(x.size(), 0.0f);
        cpu::rms_norm_rows(x.data(), w.data(), got.data(), n, stride, rows, 1e-6f);
        EXPECT_TRUE(same_bits(want.data(), got.data(), want.size())) << n << " x " << rows;
      });
    }
  }
}

}  // namespace
}  // namespace ds4::backend
