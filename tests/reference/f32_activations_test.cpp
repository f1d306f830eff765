// tests/reference/f32_activations_test.cpp — the CPU backend's ActivationNumerics::kF32 path
// (EngineOptions::f32_activations), op by op, against its definition.
//
//  * dequantize_weight_row (table-driven IQ2_XXS / Q2_K) == quant::dequantize_row, bit for bit,
//    for every weight type the engine dots against (Q8_0, IQ2_XXS, Q2_K, Q4_K);
//  * Q8_0 matmul under kF32 == quant::dot_f32(dequantized row, x) for every (row, output),
//    for 1 and 5 rows and 1 and 3 threads (batch / thread invariance), and differs from the
//    quantized path (the mode really switches);
//  * routed-expert MoE under kF32 == a scalar recomputation from the definition (dequantized
//    rows, quant::dot_f32, clamp + SiLU, router weight before down, slot-order sum), for a
//    batch of rows sharing experts, 1 and 2 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/matmul.h"
#include "quant/quant.h"

namespace ds4::backend {
namespace {

using gguf::GgmlType;

std::vector<float> randv(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

bool same_bits(const float* a, const float* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

TEST(F32Activations, DequantizeWeightRowMatchesQuant) {
  const int64_t n = 256 * 16;
  for (GgmlType t : {GgmlType::kQ8_0, GgmlType::kIQ2_XXS, GgmlType::kQ2_K, GgmlType::kQ4_K}) {
    std::vector<uint8_t> blocks(quant::row_bytes(t, n));
    quant::fill_random_blocks(t, blocks.data(), n, 0.5f, 7 + static_cast<uint64_t>(t));
    std::vector<float> want(n), got(n, -1.0f);
    quant::dequantize_row(t, blocks.data(), want.data(), n);
    cpu::dequantize_weight_row(t, blocks.data(), got.data(), n);
    EXPECT_TRUE(same_bits(want.data(), got.data(), want.size())) << static_cast<int>(t);
  }
}

TEST(F32Activations, DenseQ8_0IsDotOfDequantizedRows) {
  const int64_t n_in = 512, n_out = 37;
  const int R = 5;
  const size_t rb = quant::row_bytes(GgmlType::kQ8_0, n_in);
  std::vector<uint8_t> w(rb * n_out);
  quant::fill_random_blocks(GgmlType::kQ8_0, w.data(), n_in * n_out, 0.2f, 3);
  const auto x = randv(static_cast<size_t>(R * n_in), 4, 2.0f);
  std::vector<float> want(static_cast<size_t>(R * n_out)), deq(n_in);
  for (int64_t o = 0; o < n_out; ++o) {
    quant::dequantize_row(GgmlType::kQ8_0, w.data() + o * rb, deq.data(), n_in);
    for (int i = 0; i < R; ++i) want[i * n_out + o] = quant::dot_f32(deq.data(), x.data() + i * n_in, n_in);
  }
  MatmulParams p;
  p.w = Matrix{w.data(), GgmlType::kQ8_0, n_in, n_out, rb};
  p.x_stride = n_in;
  p.y_stride = n_out;
  for (int threads : {1, 3}) {
    auto be = make_cpu_backend(threads, ActivationNumerics::kF32);
    for (int rows : {1, R}) {
      std::vector<float> got(want.size(), -1.0f);
      p.x = x.data();
      p.y = got.data();
      p.n_rows = rows;
      be->matmul(p);
      EXPECT_TRUE(same_bits(want.data(), got.data(), static_cast<size_t>(rows * n_out)))
          << threads << " threads, " << rows << " rows";
    }
  }
  // The production path quantizes x: different bits somewhere.
  auto q = make_cpu_backend(1);
  std::vector<float> prod(want.size());
  p.x = x.data();
  p.y = prod.data();
  p.n_rows = R;
  q->matmul(p);
  EXPECT_FALSE(same_bits(want.data(), prod.data(), want.size()));
}

TEST(F32Activations, MoeIsDefinitionOnDequantizedExperts) {
  const int64_t E = 512, F = 256;
  const int n_expert = 6, U = 3, R = 7;
  const size_t gu_row = quant::row_bytes(GgmlType::kIQ2_XXS, E);
  const size_t d_row = quant::row_bytes(GgmlType::kQ2_K, F);
  std::vector<uint8_t> gate(gu_row * F * n_expert), up(gate.size()), down(d_row * E * n_expert);
  quant::fill_random_blocks(GgmlType::kIQ2_XXS, gate.data(), E * F * n_expert, 0.3f, 11);
  quant::fill_random_blocks(GgmlType::kIQ2_XXS, up.data(), E * F * n_expert, 0.3f, 12);
  quant::fill_random_blocks(GgmlType::kQ2_K, down.data(), F * E * n_expert, 0.3f, 13);
  MoeParams base;
  base.gate = ExpertMatrix{gate.data(), GgmlType::kIQ2_XXS, E, F, n_expert, gu_row};
  base.up = ExpertMatrix{up.data(), GgmlType::kIQ2_XXS, E, F, n_expert, gu_row};
  base.down = ExpertMatrix{down.data(), GgmlType::kQ2_K, F, E, n_expert, d_row};
  base.n_used = U;
  base.clamp = 7.0f;
  const auto x = randv(static_cast<size_t>(R * E), 21, 2.0f);
  const std::vector<int32_t> sel = {0, 1, 2, 2, 0, 5, 5, 4, 3, 1, 2, 0, 3, 4, 5, 0, 4, 2, 1, 5, 3};
  const auto wt = randv(sel.size(), 22, 1.0f);

  // The definition, one (row, slot) at a time.
  std::vector<float> want(static_cast<size_t>(R * E), 0.0f), wrow(E), g(F), u(F), mid(F);
  for (int i = 0; i < R; ++i) {
    for (int s = 0; s < U; ++s) {
      const int e = sel[i * U + s];
      for (int64_t o = 0; o < F; ++o) {
        quant::dequantize_row(GgmlType::kIQ2_XXS, base.gate.expert(e).data + o * gu_row, wrow.data(), E);
        g[o] = quant::dot_f32(wrow.data(), x.data() + i * E, E);
        quant::dequantize_row(GgmlType::kIQ2_XXS, base.up.expert(e).data + o * gu_row, wrow.data(), E);
        u[o] = quant::dot_f32(wrow.data(), x.data() + i * E, E);
        const float gv = std::min(g[o], base.clamp);
        const float uv = std::min(std::max(u[o], -base.clamp), base.clamp);
        mid[o] = cpu::silu(gv) * uv * wt[i * U + s];
      }
      for (int64_t o = 0; o < E; ++o) {
        quant::dequantize_row(GgmlType::kQ2_K, base.down.expert(e).data + o * d_row, wrow.data(), F);
        want[i * E + o] = want[i * E + o] + quant::dot_f32(wrow.data(), mid.data(), F);
      }
    }
  }
  for (int threads : {1, 2}) {
    auto be = make_cpu_backend(threads, ActivationNumerics::kF32);
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
  }
}

}  // namespace
}  // namespace ds4::backend
