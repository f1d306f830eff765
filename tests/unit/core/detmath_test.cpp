// tests/unit/core/detmath_test.cpp — core/detmath.h and core/rope.h's rope_pair against
// double-precision libm: exp_f32 / softplus_f32 / sigmoid_f32 / sincos_f32 within 1 ulp of the
// double result rounded to float over millions of random arguments in their ranges (the count
// that differ at all is printed), their special values (NaN, ±inf, ±0, the overflow and
// underflow edges, subnormal results), ceil_log2_f32 exact at powers of two and their float
// neighbours, and rope_pair close to a long-double evaluation of the same formula.
#include "core/detmath.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

#include "core/rope.h"

namespace ds4 {
namespace {

using namespace ds4::detmath;  // NOLINT: test of this namespace

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

// Distance in units in the last place between two finite floats of the same sign (or zeros):
// the difference of their ordered bit patterns.
int64_t ulp_distance(float a, float b) {
  auto ordered = [](float f) {
    const int64_t u = bits(f);
    return (u & 0x80000000u) ? -(u & 0x7fffffff) : u;
  };
  const int64_t d = ordered(a) - ordered(b);
  return d < 0 ? -d : d;
}

struct UlpStats {
  int64_t n = 0, differ = 0, max_ulp = 0;
  float worst_x = 0.0f;
  void add(float x, float got, float want) {
    ++n;
    const int64_t d = ulp_distance(got, want);
    if (d != 0) ++differ;
    if (d > max_ulp) {
      max_ulp = d;
      worst_x = x;
    }
  }
  void report(const char* what) const {
    std::printf("[ detmath ] %s: %lld samples, %lld differ from double libm rounded, max %lld ulp (x=%a)\n", what,
                static_cast<long long>(n), static_cast<long long>(differ), static_cast<long long>(max_ulp),
                static_cast<double>(worst_x));
  }
};

TEST(DetmathExp, WithinOneUlpOfDoubleLibmOverItsRange) {
  std::mt19937_64 rng(29);
  UlpStats st;
  // The whole finite, non-zero range, including the subnormal results below -87.3.
  std::uniform_real_distribution<float> wide(-104.0f, 88.72f);
  std::uniform_real_distribution<float> small(-1.0f, 1.0f);
  for (int k = 0; k < 3'000'000; ++k) {
    const float x = (k & 3) == 3 ? small(rng) : wide(rng);
    st.add(x, exp_f32(x), static_cast<float>(std::exp(static_cast<double>(x))));
  }
  st.report("exp_f32");
  EXPECT_LE(st.max_ulp, 1);
}

TEST(DetmathExp, SpecialValuesAndEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(exp_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(exp_f32(inf), inf);
  EXPECT_EQ(bits(exp_f32(-inf)), bits(0.0f));
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-0.0f), 1.0f);
  EXPECT_EQ(exp_f32(1.0f), static_cast<float>(std::exp(1.0)));
  // Overflow edge: the largest x with a finite e^x, and its successor.
  const float x_max = 88.72283f;
  ASSERT_TRUE(std::isfinite(static_cast<float>(std::exp(static_cast<double>(x_max)))));
  const float x_over = std::nextafter(x_max, inf);
  ASSERT_FALSE(std::isfinite(static_cast<float>(std::exp(static_cast<double>(x_over)))));
  EXPECT_EQ(exp_f32(x_max), static_cast<float>(std::exp(static_cast<double>(x_max))));
  EXPECT_EQ(exp_f32(x_over), inf);
  EXPECT_EQ(exp_f32(88.8f), inf);
  EXPECT_EQ(exp_f32(200.0f), inf);
  // Underflow: the subnormal results and the last non-zero one, every float in a band.
  UlpStats st;
  for (float x = -103.98f; x < -87.0f; x = std::nextafter(x, 0.0f)) {
    const float want = static_cast<float>(std::exp(static_cast<double>(x)));
    st.add(x, exp_f32(x), want);
  }
  st.report("exp_f32 subnormal band");
  EXPECT_LE(st.max_ulp, 1);
  EXPECT_EQ(exp_f32(-103.9f), FLT_TRUE_MIN);  // e^-103.9 ~ 1.07 · 2^-149
  EXPECT_EQ(bits(exp_f32(-104.5f)), bits(0.0f));
  EXPECT_EQ(bits(exp_f32(-1000.0f)), bits(0.0f));
  EXPECT_LT(exp_f32(-87.4f), FLT_MIN);  // a subnormal result
  EXPECT_GT(exp_f32(-87.4f), 0.0f);
}

TEST(DetmathSoftplus, WithinOneUlpOfDoubleLibmAndItsBranches) {
  std::mt19937_64 rng(30);
  UlpStats st;
  std::uniform_real_distribution<float> d(-30.0f, 30.0f);
  std::uniform_real_distribution<float> near(-4.0f, 4.0f);
  for (int k = 0; k < 2'000'000; ++k) {
    const float x = (k & 1) ? near(rng) : d(rng);
    // The true softplus in double: above 20 it is x, below -20 e^x, both within half an ulp.
    const float want = static_cast<float>(std::log1p(std::exp(static_cast<double>(x))));
    st.add(x, softplus_f32(x), want);
  }
  st.report("softplus_f32");
  EXPECT_LE(st.max_ulp, 1);
  EXPECT_EQ(softplus_f32(25.0f), 25.0f);
  EXPECT_EQ(softplus_f32(-25.0f), exp_f32(-25.0f));
  EXPECT_EQ(softplus_f32(0.0f), static_cast<float>(std::log(2.0)));
  EXPECT_TRUE(std::isnan(softplus_f32(std::numeric_limits<float>::quiet_NaN())));
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(softplus_f32(inf), inf);
  EXPECT_EQ(bits(softplus_f32(-inf)), bits(0.0f));
}

TEST(DetmathSigmoid, WithinOneUlpOfDoubleAndSiluIsXTimesIt) {
  std::mt19937_64 rng(31);
  UlpStats st;
  std::uniform_real_distribution<float> d(-20.0f, 20.0f);
  for (int k = 0; k < 1'000'000; ++k) {
    const float x = d(rng);
    const float got = sigmoid_f32(x);
    // sigmoid_f32 rounds three times in float (e, 1 + e, the division): a couple of ulps.
    const float want = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(x))));
    st.add(x, got, want);
    ASSERT_EQ(bits(silu_f32(x)), bits(x * got)) << x;
  }
  st.report("sigmoid_f32");
  EXPECT_LE(st.max_ulp, 3);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sigmoid_f32(0.0f), 0.5f);
  EXPECT_EQ(sigmoid_f32(inf), 1.0f);
  EXPECT_EQ(bits(sigmoid_f32(-inf)), bits(0.0f));
  EXPECT_EQ(sigmoid_f32(200.0f), 1.0f);
  EXPECT_TRUE(std::isnan(sigmoid_f32(std::numeric_limits<float>::quiet_NaN())));
}

void sincos_band(const char* what, float lo, float hi, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  UlpStats s_st, c_st;
  for (int k = 0; k < n; ++k) {
    const float x = d(rng);
    float s, c;
    sincos_f32(x, &s, &c);
    s_st.add(x, s, static_cast<float>(std::sin(static_cast<double>(x))));
    c_st.add(x, c, static_cast<float>(std::cos(static_cast<double>(x))));
  }
  std::printf("[ detmath ] sincos_f32 on [%g, %g]:\n", static_cast<double>(lo), static_cast<double>(hi));
  s_st.report(what);
  c_st.report(what);
  EXPECT_LE(s_st.max_ulp, 1) << what;
  EXPECT_LE(c_st.max_ulp, 1) << what;
}

TEST(DetmathSincos, WithinOneUlpOfDoubleLibmOverRopeAngles) {
  // Small angles (the YaRN-interpolated tail pairs), a few turns, and positions up to 1e6
  // (pair 0's angle is the position itself).
  sincos_band("small", -1.0f, 1.0f, 1'000'000, 40);
  sincos_band("turns", -50.0f, 50.0f, 1'000'000, 41);
  sincos_band("positions", 0.0f, 1.0e6f, 1'000'000, 42);
  // Every integer position up to 2^16 (θ of pair 0 at that position).
  UlpStats st;
  for (int p = 0; p <= 65536; ++p) {
    float s, c;
    sincos_f32(static_cast<float>(p), &s, &c);
    st.add(static_cast<float>(p), s, static_cast<float>(std::sin(static_cast<double>(p))));
    st.add(static_cast<float>(p), c, static_cast<float>(std::cos(static_cast<double>(p))));
  }
  st.report("sincos_f32 integer positions");
  EXPECT_LE(st.max_ulp, 1);
}

TEST(DetmathSincos, SpecialValues) {
  float s, c;
  sincos_f32(0.0f, &s, &c);
  EXPECT_EQ(bits(s), bits(0.0f));
  EXPECT_EQ(c, 1.0f);
  sincos_f32(-0.0f, &s, &c);  // sin keeps the sign of zero, like IEEE's sin
  EXPECT_EQ(bits(s), bits(-0.0f));
  EXPECT_EQ(c, 1.0f);
  for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                    -std::numeric_limits<float>::infinity()}) {
    sincos_f32(bad, &s, &c);
    EXPECT_TRUE(std::isnan(s)) << bad;
    EXPECT_TRUE(std::isnan(c)) << bad;
  }
  sincos_f32(FLT_TRUE_MIN, &s, &c);  // sin x = x for a subnormal x
  EXPECT_EQ(s, FLT_TRUE_MIN);
  EXPECT_EQ(c, 1.0f);
  sincos_f32(1.0e-20f, &s, &c);
  EXPECT_EQ(s, 1.0e-20f);
  // sin is odd and cos even, bit for bit.
  for (float x : {0.5f, 1.0f, 3.14159265f, 100.0f, 12345.678f}) {
    float s1, c1, s2, c2;
    sincos_f32(x, &s1, &c1);
    sincos_f32(-x, &s2, &c2);
    EXPECT_EQ(bits(s1), bits(-s2)) << x;
    EXPECT_EQ(bits(c1), bits(c2)) << x;
  }
}

TEST(DetmathCeilLog2, ExactAtPowersOfTwoAndTheirNeighbours) {
  const float inf = std::numeric_limits<float>::infinity();
  for (int e = -149; e <= 127; ++e) {
    const float v = std::ldexp(1.0f, e);
    ASSERT_EQ(ceil_log2_f32(v), e) << "2^" << e;
    ASSERT_EQ(ceil_log2_f32(std::nextafter(v, inf)), e + 1) << "above 2^" << e;
    // Below 2^e: e, except below 2^-148, where the neighbour is 2^-149 itself.
    if (e > -148) {
      ASSERT_EQ(ceil_log2_f32(std::nextafter(v, 0.0f)), e) << "below 2^" << e;
    }
  }
  EXPECT_EQ(ceil_log2_f32(FLT_MAX), 128);
  EXPECT_EQ(ceil_log2_f32(inf), 128);
  EXPECT_EQ(ceil_log2_f32(std::numeric_limits<float>::quiet_NaN()), 128);
  EXPECT_EQ(ceil_log2_f32(3.0f), 2);
  EXPECT_EQ(ceil_log2_f32(0.75f), 0);
  // Random positive floats against the double log2 (exact enough to decide every float but
  // the powers of two, which it gets exactly).
  std::mt19937_64 rng(50);
  std::uniform_int_distribution<uint32_t> any(1u, 0x7f7fffffu);
  for (int k = 0; k < 1'000'000; ++k) {
    const uint32_t u = any(rng);
    float v;
    std::memcpy(&v, &u, sizeof v);
    ASSERT_EQ(ceil_log2_f32(v), static_cast<int>(std::ceil(std::log2(static_cast<double>(v))))) << v;
  }
}

// rope_pair against the same formula in long double (the float products of θ_extrap, the
// YaRN mix and the final scaling all round in float, so the bound grows with the pair index
// and the angle): a loose check that the angles are the intended ones.
void check_rope(const RopeParams& rp, int n_rot) {
  const RopeAngles a = rope_angles(rp, n_rot);
  const long double ts = std::pow(static_cast<long double>(rp.freq_base), -2.0L / n_rot);
  EXPECT_NEAR(static_cast<double>(a.theta_scale), static_cast<double>(ts), 2e-7 * static_cast<double>(ts));
  double worst = 0.0;
  for (int64_t pos : {0LL, 1LL, 7LL, 100LL, 4095LL, 65535LL, 1000000LL}) {
    for (int i = 0; i < n_rot / 2; ++i) {
      float c, s;
      rope_pair(a, pos, i, &c, &s);
      const long double extrap = static_cast<long double>(pos) * std::pow(static_cast<long double>(a.theta_scale), i);
      long double theta = extrap * a.freq_scale;
      if (a.ext_factor != 0.0f) {
        long double y = (i - static_cast<long double>(a.corr_lo)) /
                        std::max(0.001L, static_cast<long double>(a.corr_hi) - a.corr_lo);
        y = std::min(1.0L, std::max(0.0L, y));
        const long double mix = (1.0L - y) * a.ext_factor;
        theta = theta * (1.0L - mix) + extrap * mix;
      }
      const long double cr = std::cos(theta) * a.mscale;
      const long double sr = std::sin(theta) * a.mscale;
      // Each float step of θ costs half an ulp of θ (i products, the mix, the scaling); sin
      // and cos one more ulp of the result each.
      const double bound = static_cast<double>(a.mscale) *
                           (std::fabs(static_cast<double>(theta)) * (i + 6) * 6.0e-8 + 3.0e-7);
      const double ec = std::fabs(static_cast<double>(c - cr));
      const double es = std::fabs(static_cast<double>(s - sr));
      ASSERT_LE(ec, bound) << "pos " << pos << " pair " << i;
      ASSERT_LE(es, bound) << "pos " << pos << " pair " << i;
      worst = std::max(worst, std::max(ec, es) / bound);
    }
  }
  std::printf("[ detmath ] rope_pair n_rot %d ext %g: worst error %.3f of the bound\n", n_rot,
              static_cast<double>(rp.ext_factor), worst);
}

TEST(DetmathRope, PairMatchesLongDoubleFormula) {
  RopeParams dense;  // freq_base 10000, no YaRN
  check_rope(dense, 64);
  RopeParams yarn;
  yarn.freq_base = 160000.0f;
  yarn.freq_scale = 1.0f / 16.0f;
  yarn.ext_factor = 1.0f;
  yarn.attn_factor = 1.0f / (1.0f + 0.1f * std::log(16.0f));
  yarn.n_ctx_orig = 65536;
  check_rope(yarn, 64);
  const RopeAngles a = rope_angles(yarn, 64);
  EXPECT_GT(a.corr_hi, a.corr_lo);
  EXPECT_LE(a.corr_hi, 63.0f);
  // mscale: attn_factor · (1 + 0.1 ln 16) is 1 up to rounding.
  EXPECT_NEAR(static_cast<double>(a.mscale), 1.0, 1e-6);
}

}  // namespace
}  // namespace ds4
