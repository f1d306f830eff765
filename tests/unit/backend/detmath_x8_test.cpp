// tests/unit/backend/detmath_x8_test.cpp — backend/cpu/detmath_x8.h's 8-lane exp / SiLU give
// exactly the bits of core/detmath.h's scalar definitions: every float of the ranges the
// SwiGLU loops see most ([-32, 32] densely), random bit patterns over the whole float line,
// and the special values (NaN, ±inf, ±0, the overflow / underflow edges, subnormals), each in
// every lane position; and kernels.h's exp_sub_row and swiglu_row (which use them on x86) equal
// the scalar definitions on every ISA the machine runs (weighted and not, in place, tails).
#include "backend/cpu/detmath_x8.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/detmath.h"

namespace ds4::backend::cpu {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Checks a batch of inputs (a multiple of 8) through both functions; returns the mismatches.
int64_t check(const std::vector<float>& in) {
  int64_t bad = 0;
  for (size_t i = 0; i + 8 <= in.size(); i += 8) {
    float s[8];
    silu_f32_x8(in.data() + i, s);
    x8::F8 v, e;
    std::memcpy(&v, in.data() + i, sizeof v);
    exp_f32_x8(v, &e);
    for (int l = 0; l < 8; ++l) {
      const float x = in[i + l];
      const float ws = detmath::silu_f32(x), we = detmath::exp_f32(x);
      const bool ok_s = std::isnan(ws) ? std::isnan(s[l]) : bits(s[l]) == bits(ws);
      const bool ok_e = std::isnan(we) ? std::isnan(e[l]) : bits(e[l]) == bits(we);
      if (!ok_s || !ok_e) {
        if (bad < 5) ADD_FAILURE() << "x=" << x << " silu " << s[l] << " vs " << ws << ", exp " << e[l] << " vs " << we;
        ++bad;
      }
    }
  }
  return bad;
}

TEST(DetmathX8, SiluAndExpEqualTheScalarDefinitionBitForBit) {
  std::vector<float> in;
  // Floats in [-32, 32], every 61st bit pattern (~0.55M values of each sign).
  for (uint32_t u = 0; u <= bits(32.0f); u += 61) {
    float f;
    std::memcpy(&f, &u, sizeof f);
    in.push_back(f);
    in.push_back(-f);
  }
  // Random bit patterns over the whole line (NaNs included).
  std::mt19937 rng(8);
  for (int k = 0; k < 500'000; ++k) {
    const uint32_t u = rng();
    float f;
    std::memcpy(&f, &u, sizeof f);
    in.push_back(f);
  }
  while (in.size() % 8 != 0) in.push_back(1.0f);
  EXPECT_EQ(check(in), 0) << in.size() << " inputs";
}

TEST(DetmathX8, SpecialValuesInEveryLane) {
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), inf, -inf, 0.0f, -0.0f,
                            88.72283f, std::nextafter(88.72283f, inf), 88.8f, std::nextafter(88.8f, inf),
                            -103.9f, -104.0f, std::nextafter(-104.0f, -inf), -87.4f, FLT_TRUE_MIN,
                            -FLT_TRUE_MIN, FLT_MIN, FLT_MAX, -FLT_MAX, 20.0f, -20.0f, 1.0e-30f};
  std::vector<float> in;
  for (float s : specials) {
    for (int lane = 0; lane < 8; ++lane) {
      for (int l = 0; l < 8; ++l) in.push_back(l == lane ? s : 0.5f * static_cast<float>(l) - 2.0f);
    }
  }
  EXPECT_EQ(check(in), 0);
}

TEST(DetmathX8, ExpSubAndSwigluRowsEqualTheDefinitionOnEveryIsa) {
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> d(-12.0f, 12.0f);
  const Isa saved = active_isa();
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (!isa_supported(isa)) continue;
    ASSERT_TRUE(set_isa(isa));
    for (int64_t n : {1, 7, 8, 9, 23, 64, 301}) {
      std::vector<float> g(n), u(n), out(n);
      for (int64_t i = 0; i < n; ++i) {
        g[i] = d(rng);
        u[i] = d(rng);
      }
      if (n > 3) g[3] = std::numeric_limits<float>::quiet_NaN();  // min(NaN, c) keeps the NaN
      const float c = 7.0f, w = 0.3f;
      for (bool weighted : {false, true}) {
        swiglu_row(g.data(), u.data(), c, w, weighted, out.data(), n);
        std::vector<float> e(n);
        exp_sub_row(g.data(), 1.5f, e.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const float want = detmath::exp_f32(g[i] - 1.5f);
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(e[i]));
          } else {
            ASSERT_EQ(bits(e[i]), bits(want)) << isa_name(isa) << " exp_sub n=" << n << " i=" << i;
          }
        }
        std::vector<float> in_place = g;
        swiglu_row(in_place.data(), u.data(), c, w, weighted, in_place.data(), n);
        for (int64_t i = 0; i < n; ++i) {
          const float gv = std::min(g[i], c);
          const float uv = std::min(std::max(u[i], -c), c);
          const float want = weighted ? detmath::silu_f32(gv) * uv * w : detmath::silu_f32(gv) * uv;
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(out[i]) && std::isnan(in_place[i])) << isa_name(isa);
          } else {
            ASSERT_EQ(bits(out[i]), bits(want)) << isa_name(isa) << " n=" << n << " i=" << i;
            ASSERT_EQ(bits(in_place[i]), bits(want)) << isa_name(isa) << " n=" << n << " i=" << i;
          }
        }
      }
    }
  }
  set_isa(saved);
}

}  // namespace
}  // namespace ds4::backend::cpu
