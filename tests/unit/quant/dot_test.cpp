// tests/unit/quant/dot_test.cpp — reference dot products: (a) against a double-precision
// dequantize-and-dot within a tolerance, (b) against an independent restatement of the
// documented operation order (bit-exact; also the RMSNorm statistic sumsq_f64), (c) integer
// block parts against the dequantizer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "quant/quant.h"

namespace ds4::quant {
namespace {

std::vector<float> gaussian(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

double dot_double(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}
double abs_dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::fabs(static_cast<double>(a[i]) * b[i]);
  return s;
}

// Independent restatement of the canonical 64-lane order (quant/dot.h), written lane-major:
// each lane's chain over i = j, j+64, ... (mul, then add), then the halving tree as a vector
// of half the width per step.
template <typename T>
T lane_major_64(const float* w, const float* x, int64_t n) {
  std::vector<T> p(64, T{0});
  for (int64_t j = 0; j < 64; ++j) {
    for (int64_t i = j; i < n; i += 64) {
      const T t = static_cast<T>(w[i]) * static_cast<T>(x[i]);
      p[j] = p[j] + t;
    }
  }
  while (p.size() > 1) {
    const size_t h = p.size() / 2;
    std::vector<T> q(h);
    for (size_t j = 0; j < h; ++j) q[j] = p[j] + p[j + h];
    p = q;
  }
  return p[0];
}

TEST(DotF32, CanonicalOrderHandCase) {
  // n = 130: two 64-wide chunks, then elements 128 and 129 (lanes 0 and 1). Values chosen
  // so that the 64-lane order, the old 16-lane order and a sequential sum all differ.
  std::vector<float> w(130, 1.0f), x(130, 0.0f);
  x[0] = 1e8f;
  x[32] = -1e8f;  // lane 32: cancels lane 0 only at the tree's step h = 32
  x[64] = 1.0f;   // lane 0 again: 1e8 + 1 rounds to 1e8 (float spacing 8 there)
  x[128] = 0.5f;  // lane 0: lost the same way
  x[129] = 0.25f; // lane 1: survives
  // 64 lanes: p0 = 1e8, p32 = -1e8, p1 = 0.25 -> h = 32: p0 = 0 -> result 0.25.
  EXPECT_EQ(dot_f32(w.data(), x.data(), 130), 0.25f);
  EXPECT_EQ(lane_major_64<float>(w.data(), x.data(), 130), 0.25f);
  // The old 16-lane order: lane 0 = ((1e8 + 0) + -1e8) + 0 + 1 = 1, then the tail 0.5, 0.25.
  // A plain sequential sum gives the same 1.75.
  float seq = 0.0f;
  for (int i = 0; i < 130; ++i) seq += w[i] * x[i];
  EXPECT_EQ(seq, 1.75f);
}

TEST(DotF32, MatchesLaneMajorRestatementAndDouble) {
  for (int64_t n : {0, 1, 15, 16, 17, 31, 63, 64, 65, 100, 127, 128, 191, 4096, 4099, 4159}) {
    const auto w = gaussian(n, 1 + static_cast<uint32_t>(n));
    const auto x = gaussian(n, 1000 + static_cast<uint32_t>(n));
    const float r = dot_f32(w.data(), x.data(), n);
    EXPECT_EQ(f32_bits(r), f32_bits(lane_major_64<float>(w.data(), x.data(), n))) << n;
    EXPECT_NEAR(r, dot_double(w, x), 1e-5 * abs_dot(w, x) + 1e-30) << n;
  }
  EXPECT_EQ(f32_bits(dot_f32(nullptr, nullptr, 0)), 0u);  // +0.0f for empty rows
}

TEST(SumsqF64, CanonicalOrderHandCase) {
  // 2^27 squared = 2^54, where double's spacing is 4: a sequential sum loses each + 1, the
  // 64-lane order sums lane 1's four ones first and adds 4 exactly.
  std::vector<float> x(194, 0.0f);
  x[0] = 134217728.0f;  // 2^27
  x[1] = x[65] = x[129] = x[193] = 1.0f;
  EXPECT_EQ(sumsq_f64(x.data(), 194), 18014398509481988.0);  // 2^54 + 4
  double seq = 0.0;
  for (float v : x) seq += static_cast<double>(v) * v;
  EXPECT_EQ(seq, 18014398509481984.0);  // 2^54
}

TEST(SumsqF64, MatchesLaneMajorRestatement) {
  for (int64_t n : {0, 1, 7, 63, 64, 65, 200, 1031, 4096, 16384, 16389}) {
    const auto x = gaussian(n, 500 + static_cast<uint32_t>(n), 3.0f);
    const double r = sumsq_f64(x.data(), n);
    EXPECT_EQ(r, lane_major_64<double>(x.data(), x.data(), n)) << n;
    EXPECT_NEAR(r, dot_double(x, x), 1e-12 * r + 1e-300) << n;
  }
}

TEST(DotF16, EqualsDotF32OfConvertedRow) {
  for (int64_t n : {7, 16, 50, 512}) {
    const auto wf = gaussian(n, 7 + static_cast<uint32_t>(n));
    const auto x = gaussian(n, 77 + static_cast<uint32_t>(n));
    std::vector<uint16_t> h(n), b(n);
    std::vector<float> wh(n), wb(n);
    f32_to_f16_row(wf.data(), h.data(), n);
    f32_to_bf16_row(wf.data(), b.data(), n);
    f16_to_f32_row(h.data(), wh.data(), n);
    bf16_to_f32_row(b.data(), wb.data(), n);
    EXPECT_EQ(f32_bits(dot_f16(h.data(), x.data(), n)), f32_bits(dot_f32(wh.data(), x.data(), n)));
    EXPECT_EQ(f32_bits(dot_bf16(b.data(), x.data(), n)), f32_bits(dot_f32(wb.data(), x.data(), n)));
    EXPECT_NEAR(dot_f16(h.data(), x.data(), n), dot_double(wh, x), 1e-5 * abs_dot(wh, x));
  }
}

TEST(DotQ8_0, RestatementAndDouble) {
  const int64_t n = 32 * 37;
  const auto wf = gaussian(n, 3), xf = gaussian(n, 4);
  std::vector<BlockQ8_0> w(n / 32);
  std::vector<BlockQ8_0Act> x(n / 32);
  quantize_row_q8_0(wf.data(), w.data(), n);
  quantize_q8_0_act(xf.data(), x.data(), n);
  // Restatement: dequantized ints per block; the float steps spelled out.
  float acc = 0.0f;
  for (int64_t b = 0; b < n / 32; ++b) {
    long long isum = 0;
    for (int i = 0; i < 32; ++i) isum += w[b].qs[i] * x[b].qs[i];
    const volatile float s = f16_to_f32(w[b].d) * x[b].d;
    const volatile float t = s * static_cast<float>(isum);
    acc = acc + t;
  }
  const float r = dot_q8_0(w.data(), x.data(), n / 32);
  EXPECT_EQ(f32_bits(r), f32_bits(acc));
  // Against double precision of the dequantized rows.
  std::vector<float> wd(n), xd(n);
  dequantize_row_q8_0(w.data(), wd.data(), n);
  for (int64_t i = 0; i < n; ++i) xd[i] = x[i / 32].d * static_cast<float>(x[i / 32].qs[i % 32]);
  EXPECT_NEAR(r, dot_double(wd, xd), 1e-5 * abs_dot(wd, xd));
  EXPECT_EQ(dot_q8_0(w.data(), x.data(), 0), 0.0f);
}

// Weight block with its f16 scales replaced (to read exact integer parts via dequantize).
template <typename B>
B with_scales(B blk, uint16_t d, uint16_t dmin) {
  blk.d = d;
  blk.dmin = dmin;
  return blk;
}

struct KCase {
  std::vector<BlockQ8K> y;
  std::vector<float> yd;  // dequantized activations
};

KCase make_act(int nb, uint32_t seed) {
  KCase k;
  const auto xf = gaussian(256 * nb, seed, 2.0f);
  k.y.resize(nb);
  quantize_q8_k_act(xf.data(), k.y.data(), 256 * nb);
  k.yd.resize(256 * nb);
  dequantize_row_q8_k(k.y.data(), k.yd.data(), 256 * nb);
  return k;
}

// Σ v[i]·q8[i] in exact integer arithmetic where v are integer-valued floats.
int64_t int_dot(const float* v, const int8_t* q) {
  double s = 0;
  for (int i = 0; i < 256; ++i) s += static_cast<double>(v[i]) * q[i];
  return static_cast<int64_t>(s);
}

TEST(DotQ2K, IntegerPartsRestatementAndDouble) {
  const int nb = 6;
  const auto wf = gaussian(256 * nb, 11);
  std::vector<BlockQ2K> w(nb);
  quantize_row_q2_k(wf.data(), w.data(), 256 * nb);
  fill_random_blocks(GgmlType::kQ2_K, &w[5], 256, 0.1f, 99);  // arbitrary bits too
  const KCase a = make_act(nb, 12);
  float sumf = 0.0f;
  float tmp[256];
  for (int b = 0; b < nb; ++b) {
    int32_t isum, summs;
    q2_k_block_isums(w[b], a.y[b], &isum, &summs);
    const BlockQ2K only_sc = with_scales(w[b], 0x3c00, 0x0000);  // d=1, dmin=0 -> sc·q
    dequantize_row_q2_k(&only_sc, tmp, 256);
    EXPECT_EQ(isum, int_dot(tmp, a.y[b].qs));
    const BlockQ2K only_m = with_scales(w[b], 0x0000, 0x3c00);  // -> −m
    dequantize_row_q2_k(&only_m, tmp, 256);
    EXPECT_EQ(-summs, int_dot(tmp, a.y[b].qs));
    const volatile float dall = a.y[b].d * f16_to_f32(w[b].d);
    const volatile float dmin = a.y[b].d * f16_to_f32(w[b].dmin);
    const volatile float p = dall * static_cast<float>(isum);
    const volatile float q = dmin * static_cast<float>(summs);
    sumf = sumf + (p - q);
  }
  const float r = dot_q2_k_q8_k(w.data(), a.y.data(), nb);
  EXPECT_EQ(f32_bits(r), f32_bits(sumf));
  std::vector<float> wd(256 * nb);
  dequantize_row_q2_k(w.data(), wd.data(), 256 * nb);
  EXPECT_NEAR(r, dot_double(wd, a.yd), 1e-5 * abs_dot(wd, a.yd));
}

TEST(DotQ4K, IntegerPartsRestatementAndDouble) {
  const int nb = 5;
  const auto wf = gaussian(256 * nb, 21);
  std::vector<BlockQ4K> w(nb);
  quantize_row_q4_k(wf.data(), w.data(), 256 * nb);
  fill_random_blocks(GgmlType::kQ4_K, &w[4], 256, 0.1f, 98);
  const KCase a = make_act(nb, 22);
  float sumf = 0.0f;
  float tmp[256];
  for (int b = 0; b < nb; ++b) {
    int32_t isum, summs;
    q4_k_block_isums(w[b], a.y[b], &isum, &summs);
    const BlockQ4K only_sc = with_scales(w[b], 0x3c00, 0x0000);
    dequantize_row_q4_k(&only_sc, tmp, 256);
    EXPECT_EQ(isum, int_dot(tmp, a.y[b].qs));
    const BlockQ4K only_m = with_scales(w[b], 0x0000, 0x3c00);
    dequantize_row_q4_k(&only_m, tmp, 256);
    EXPECT_EQ(-summs, int_dot(tmp, a.y[b].qs));
    const volatile float d = a.y[b].d * f16_to_f32(w[b].d);
    const volatile float dmin = a.y[b].d * f16_to_f32(w[b].dmin);
    const volatile float p = d * static_cast<float>(isum);
    const volatile float q = dmin * static_cast<float>(summs);
    sumf = sumf + (p - q);
  }
  const float r = dot_q4_k_q8_k(w.data(), a.y.data(), nb);
  EXPECT_EQ(f32_bits(r), f32_bits(sumf));
  std::vector<float> wd(256 * nb);
  dequantize_row_q4_k(w.data(), wd.data(), 256 * nb);
  EXPECT_NEAR(r, dot_double(wd, a.yd), 1e-5 * abs_dot(wd, a.yd));
}

TEST(DotIq2Xxs, IntegerPartsRestatementAndDouble) {
  const int nb = 4;
  const auto wf = gaussian(256 * nb, 31);
  std::vector<BlockIQ2XXS> w(nb);
  quantize_row_iq2_xxs(wf.data(), w.data(), 256 * nb);
  fill_random_blocks(GgmlType::kIQ2_XXS, &w[3], 256, 0.1f, 97);
  const KCase a = make_act(nb, 32);
  float sumf = 0.0f;
  float tmp[256];
  for (int b = 0; b < nb; ++b) {
    const int32_t bsum = iq2_xxs_block_isum(w[b], a.y[b]);
    BlockIQ2XXS unit = w[b];
    unit.d = 0x3c00;  // d = 1 -> values (2ls+1)/8·g·±1, exact
    dequantize_row_iq2_xxs(&unit, tmp, 256);
    for (float& v : tmp) v *= 8.0f;
    EXPECT_EQ(bsum, int_dot(tmp, a.y[b].qs));
    const volatile float d = f16_to_f32(w[b].d) * a.y[b].d;
    const volatile float t = d * static_cast<float>(bsum);
    sumf = sumf + t;
  }
  const float r = dot_iq2_xxs_q8_k(w.data(), a.y.data(), nb);
  EXPECT_EQ(f32_bits(r), f32_bits(0.125f * sumf));
  std::vector<float> wd(256 * nb);
  dequantize_row_iq2_xxs(w.data(), wd.data(), 256 * nb);
  EXPECT_NEAR(r, dot_double(wd, a.yd), 1e-5 * abs_dot(wd, a.yd));
}

TEST(DotKQuants, IntegerPartsAtExtremes) {
  // Largest possible magnitudes: every quant at its maximum, activations at -128.
  BlockQ8K y{};
  y.d = 1.0f;
  for (int i = 0; i < 256; ++i) y.qs[i] = -128;
  for (int j = 0; j < 16; ++j) y.bsums[j] = -2048;
  BlockQ4K q4{};
  std::memset(q4.scales, 0xff, sizeof q4.scales);
  std::memset(q4.qs, 0xff, sizeof q4.qs);
  int32_t isum, summs;
  q4_k_block_isums(q4, y, &isum, &summs);
  EXPECT_EQ(isum, 63 * 15 * -128 * 256);
  EXPECT_EQ(summs, 63 * -4096 * 8);
  BlockIQ2XXS iq{};
  uint32_t aux[2] = {0xffffffffu, 0xf0000000u};  // grid 255, no signs, ls = 15
  for (int g = 0; g < 8; ++g) std::memcpy(iq.qs + 4 * g, aux, sizeof aux);
  int64_t grid_sum = 0;
  for (int b = 0; b < 8; ++b) grid_sum += (kIq2XxsGrid[255] >> (8 * b)) & 0xff;
  EXPECT_EQ(iq2_xxs_block_isum(iq, y), 31 * -128 * grid_sum * 4 * 8);
}

}  // namespace
}  // namespace ds4::quant
