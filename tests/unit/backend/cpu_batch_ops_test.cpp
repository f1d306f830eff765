// tests/unit/backend/cpu_batch_ops_test.cpp — the batched / hoisted forms of the CPU ops give
// exactly the bits of their one-row definitions.
//
//  * rms_norm_rows (interleaved double sums) == rms_norm_row per row, weighted, unweighted and
//    in place, for 1..11 rows (more than one group of 8);
//  * rope_tail_rows (cos/sin computed once per call) == the per-head formula of §3.8, with
//    and without the YaRN ramp, forward and inverse;
//  * the routed-expert op (pairs grouped by expert, one parallel task list) gives each row
//    the bits of that row run alone, for 1 and 2 threads, IQ2_XXS gate/up + Q2_K down.
#include <gtest/gtest.h>

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

// The §3.8 formula with cos/sin evaluated per head (the definition rope_tail_rows hoists).
void rope_per_head(float* x, int n_head, int head_dim, int n_rot, int64_t pos, const model::RopeParams& rp,
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
      const float c = cosf(theta) * mscale;
      const float s = sin_sign * sinf(theta) * mscale;
      const float x0 = tail[i];
      const float x1 = tail[i + 1];
      tail[i] = x0 * c - x1 * s;
      tail[i + 1] = x0 * s + x1 * c;
      theta_extrap *= theta_scale;
    }
  }
}

TEST(CpuBatchOps, RopeTailRowsEqualsPerHeadFormula) {
  model::RopeParams plain;
  model::RopeParams yarn;
  yarn.freq_scale = 0.0625f;
  yarn.ext_factor = 1.0f;
  yarn.attn_factor = 1.0f / (1.0f + 0.1f * logf(16.0f));
  yarn.n_ctx_orig = 4096;
  for (const model::RopeParams& rp : {plain, yarn}) {
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

}  // namespace
}  // namespace ds4::backend
