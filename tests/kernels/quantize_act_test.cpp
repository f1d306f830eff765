// tests/kernels/quantize_act_test.cpp — cpu::quantize_q8_0_act / quantize_q8_k_act produce the
// bytes of quant::quantize_q8_0_act / quantize_q8_k_act on every ISA path.
//
// Inputs: gaussian rows with wide magnitudes, exact .5 ties after scaling, zero blocks, -0,
// subnormals, NaN and ±inf elements, and blocks whose largest |x| occurs twice with both
// signs (the Q8_K sign comes from the first occurrence).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "quant/quant.h"

namespace ds4::backend::cpu {
namespace {

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

struct IsaGuard {
  ~IsaGuard() { set_isa(detect_isa()); }
};

// n floats: block-wise patterns chosen by block index (block = 32 elements).
std::vector<float> make_input(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < n / 32; ++b) {
    float* xb = x.data() + b * 32;
    const float mag = std::ldexp(1.0f, static_cast<int>(b % 41) - 20);
    for (int i = 0; i < 32; ++i) xb[i] = g(rng) * mag;
    switch (b % 11) {
      case 1: for (int i = 0; i < 32; ++i) xb[i] = 0.0f; break;                  // zero block
      case 2: for (int i = 0; i < 32; ++i) xb[i] = (i % 2) ? -0.0f : 0.0f; break;
      case 3: for (int i = 0; i < 32; ++i) xb[i] = static_cast<float>(i - 16) * 0.5f; break;  // ties
      case 4: xb[5] = qnan; break;
      case 5: xb[9] = inf; break;
      case 6: xb[3] = -inf; xb[20] = qnan; break;
      case 7: for (int i = 0; i < 32; ++i) xb[i] = g(rng) * 1e-41f; break;  // subnormals
      case 8: xb[2] = -4.0f * mag * 8; xb[30] = 4.0f * mag * 8; break;       // ±max twice
      case 9: xb[7] = 3.0f * mag * 8; xb[8] = -3.0f * mag * 8; break;
      default: break;
    }
  }
  return x;
}

TEST(QuantizeAct, Q8_0BytesEqualReferenceOnEveryIsa) {
  IsaGuard guard;
  const int64_t n = 32 * 11 * 41;
  const std::vector<float> x = make_input(n, 3);
  std::vector<quant::BlockQ8_0Act> want(n / 32), got(n / 32);
  quant::quantize_q8_0_act(x.data(), want.data(), n);
  for (Isa isa : supported_isas()) {
    ASSERT_TRUE(set_isa(isa));
    std::memset(got.data(), 0x5a, got.size() * sizeof(got[0]));
    ds4::backend::cpu::quantize_q8_0_act(x.data(), got.data(), n);
    for (size_t b = 0; b < want.size(); ++b)
      ASSERT_EQ(std::memcmp(&want[b], &got[b], sizeof(want[b])), 0) << isa_name(isa) << " block " << b;
  }
}

TEST(QuantizeAct, Q8KBytesEqualReferenceOnEveryIsa) {
  IsaGuard guard;
  // 256-element blocks built from the same 32-element patterns (shifted so each Q8_K block
  // mixes several), plus whole zero / NaN-only blocks.
  const int64_t n = 256 * 60;
  std::vector<float> x = make_input(n, 5);
  for (int i = 0; i < 256; ++i) x[static_cast<size_t>(256 * 7 + i)] = 0.0f;
  for (int i = 0; i < 256; ++i) x[static_cast<size_t>(256 * 9 + i)] = std::numeric_limits<float>::quiet_NaN();
  x[256 * 11 + 17] = -7.5f;  // the same largest |x| twice, negative first
  x[256 * 11 + 200] = 7.5f;
  std::vector<quant::BlockQ8K> want(n / 256), got(n / 256);
  quant::quantize_q8_k_act(x.data(), want.data(), n);
  for (Isa isa : supported_isas()) {
    ASSERT_TRUE(set_isa(isa));
    std::memset(got.data(), 0x5a, got.size() * sizeof(got[0]));
    ds4::backend::cpu::quantize_q8_k_act(x.data(), got.data(), n);
    for (size_t b = 0; b < want.size(); ++b)
      ASSERT_EQ(std::memcmp(&want[b], &got[b], sizeof(want[b])), 0) << isa_name(isa) << " block " << b;
  }
}

}  // namespace
}  // namespace ds4::backend::cpu
