// core/detmath.h — the transcendental functions of the forward pass, defined once for every
// backend (ds4-architecture.md §3.9; CUDA backend issue item 4).
//
// Role: exp, softplus, sigmoid, SiLU and the sine / cosine of RoPE angles as explicit
// sequences of IEEE double operations (+, -, ·, /, exact scalings), compiled for the host and,
// under nvcc, for the device (DS4_HD). libm's expf / sinf and CUDA's expf / sinf are different
// approximations, so a backend that called its own would differ from the CPU oracle in the last
// bit of some results; these give the same bits on every machine and backend.
// Invariants:
//  * Only correctly rounded IEEE operations (no FMA: the project builds with -ffp-contract=off
//    and nvcc --fmad=false), no table, no library call, no dependence on the rounding mode
//    beyond round-to-nearest (the default everywhere).
//  * Accuracy: the double results carry a relative error of about 1e-16, so the float results
//    are the correctly rounded value except when the exact value lies within ~1e-8 ulp of a
//    rounding midpoint (then either neighbour, but the same one everywhere).
//  * NaN in, NaN out (sin/cos of ±inf too); exp overflows to +inf above 88.8 and underflows to +0 below -104.
#pragma once

#include <cmath>
#if !defined(__CUDA_ARCH__)
#include <bit>
#endif

#if defined(__CUDACC__)
#define DS4_HD __host__ __device__ inline
#else
#define DS4_HD inline
#endif

namespace ds4::detmath {

// Rounds a double of magnitude < 2^51 to the nearest integer (ties to even), as a double: the
// add-and-subtract of 1.5·2^52 (exact in IEEE double, not reassociated without fast math).
DS4_HD double round_to_int(double t) {
  constexpr double kShift = 0x1.8p52;
  return (t + kShift) - kShift;
}

// 2^k for integer k in [-1022, 1023], exactly (the IEEE bit pattern of the power of two).
DS4_HD double pow2i(int k) {
  const unsigned long long bits = static_cast<unsigned long long>(k + 1023) << 52;
#if defined(__CUDA_ARCH__)
  return __longlong_as_double(static_cast<long long>(bits));
#else
  return std::bit_cast<double>(bits);
#endif
}

// exp(x) for |x| <= 708: x = k·ln2 + r with |r| <= ln2/2 (ln2 in two parts, k·kLn2Hi exact
// for |k| < 2^21), e^r by its Taylor series to degree 13 (Horner), then ·2^k (exact).
DS4_HD double exp_f64(double x) {
  constexpr double kLog2e = 0x1.71547652b82fep+0;
  constexpr double kLn2Hi = 0x1.62e42ff000000p-1;   // 32 significant bits
  constexpr double kLn2Lo = -0x1.718432a1b0e26p-35;  // ln2 - kLn2Hi
  const double k = round_to_int(x * kLog2e);
  const double r = (x - k * kLn2Hi) - k * kLn2Lo;
  double p = 1.0 / 6227020800.0;  // 1/13!
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  return p * pow2i(static_cast<int>(k));
}

// e^x rounded to float.
DS4_HD float exp_f32(float x) {
  if (x != x) return x;
  if (x > 88.8f) return static_cast<float>(1.0e300);  // +inf after the conversion
  if (x < -104.0f) return 0.0f;
  return static_cast<float>(exp_f64(static_cast<double>(x)));
}

// Natural log of y > 0 (finite, normal): y = m·2^e with m in [sqrt(1/2), sqrt(2)),
// log m = 2·atanh(s), s = (m - 1)/(m + 1), |s| <= 0.172, by its odd series to s^23.
DS4_HD double log_f64(double y) {
  constexpr double kLn2Hi = 0x1.62e42ff000000p-1;
  constexpr double kLn2Lo = -0x1.718432a1b0e26p-35;
  int e = 0;
  double m = y;
  // Exact scaling into [1, 2): y is finite and > 0 (callers guarantee it).
  while (m >= 2.0) {
    m = m * 0.5;
    ++e;
  }
  while (m < 1.0) {
    m = m * 2.0;
    --e;
  }
  if (m > 0x1.6a09e667f3bcdp+0) {  // sqrt(2)
    m = m * 0.5;
    ++e;
  }
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double q = 1.0 / 23.0;
  q = q * s2 + 1.0 / 21.0;
  q = q * s2 + 1.0 / 19.0;
  q = q * s2 + 1.0 / 17.0;
  q = q * s2 + 1.0 / 15.0;
  q = q * s2 + 1.0 / 13.0;
  q = q * s2 + 1.0 / 11.0;
  q = q * s2 + 1.0 / 9.0;
  q = q * s2 + 1.0 / 7.0;
  q = q * s2 + 1.0 / 5.0;
  q = q * s2 + 1.0 / 3.0;
  q = q * s2 + 1.0;
  const double log_m = 2.0 * s * q;
  const double ed = static_cast<double>(e);
  return ed * kLn2Hi + (ed * kLn2Lo + log_m);
}

// log(1 + t) for t >= 0: small t by its series, otherwise log(u) corrected for the rounding of
// u = 1 + t (log1p(t) = log(u) - ((u - 1) - t)/u to first order).
DS4_HD double log1p_f64(double t) {
  if (t < 0x1p-12) {
    // t - t²/2 + t³/3 - t⁴/4 + t⁵/5: the next term is below 2^-60 · t.
    double q = t * (1.0 / 5.0);
    q = t * (0.25 - q);
    q = t * (1.0 / 3.0 - q);
    q = t * (0.5 - q);
    return t * (1.0 - q);
  }
  const double u = 1.0 + t;
  return log_f64(u) - ((u - 1.0) - t) / u;
}

// §3.9 softplus_stable: x above 20 is x, below -20 is e^x, otherwise log(1 + e^x) (in double,
// one rounding to float at the end).
DS4_HD float softplus_f32(float x) {
  if (x > 20.0f) return x;
  if (x < -20.0f) return exp_f32(x);
  return static_cast<float>(log1p_f64(exp_f64(static_cast<double>(x))));
}

// §3.9 sigmoid_stable: x >= 0 gives 1 / (1 + e^-x), otherwise e^x / (1 + e^x), in float from
// the one exp (argument chosen before it, result chosen after it: no data-dependent branch
// around the exp).
DS4_HD float sigmoid_f32(float x) {
  const bool nonneg = x >= 0.0f;
  const float e = exp_f32(nonneg ? -x : x);
  const float d = 1.0f + e;
  const float pos = 1.0f / d;
  const float neg = e / d;
  return nonneg ? pos : neg;
}

DS4_HD float silu_f32(float x) { return x * sigmoid_f32(x); }

// sin and cos of a float angle, each rounded to float: x = k·π/2 + r (π/2 in three parts, the
// first two of 33 bits, so k·part is exact for |k| < 2^20, i.e. |x| < 1.6e6), |r| <= π/4,
// Taylor series of sin (to r^17) and cos (to r^18), then the quadrant k mod 4.
DS4_HD void sincos_f32(float angle, float* s_out, float* c_out) {
  constexpr double k2OverPi = 0x1.45f306dc9c883p-1;
  constexpr double kPio2A = 0x1.921fb54400000p+0;
  constexpr double kPio2B = 0x1.0b4611a600000p-34;
  constexpr double kPio2C = 0x1.3198a2e037073p-69;
  const double x = static_cast<double>(angle);
  if (!(x - x == 0.0)) {  // NaN or ±inf: NaN (inf - inf is NaN)
    *s_out = static_cast<float>(x - x);
    *c_out = static_cast<float>(x - x);
    return;
  }
  if (x == 0.0) {  // ±0: sin keeps the sign
    *s_out = angle;
    *c_out = 1.0f;
    return;
  }
  const double k = round_to_int(x * k2OverPi);
  const double r = ((x - k * kPio2A) - k * kPio2B) - k * kPio2C;
  const double r2 = r * r;
  // sin r = r + r·r²·S(r²), S = -1/3! + r²/5! - ... + r¹⁴/17!;
  // cos r = 1 - r²·C(r²),    C = 1/2! - r²/4! + ... + r¹⁶/18!.
  double sp = 1.0 / 355687428096000.0;  // 1/17!
  sp = sp * r2 - 1.0 / 1307674368000.0;
  sp = sp * r2 + 1.0 / 6227020800.0;
  sp = sp * r2 - 1.0 / 39916800.0;
  sp = sp * r2 + 1.0 / 362880.0;
  sp = sp * r2 - 1.0 / 5040.0;
  sp = sp * r2 + 1.0 / 120.0;
  sp = sp * r2 - 1.0 / 6.0;
  double cp = 1.0 / 6402373705728000.0;  // 1/18!
  cp = cp * r2 - 1.0 / 20922789888000.0;
  cp = cp * r2 + 1.0 / 87178291200.0;
  cp = cp * r2 - 1.0 / 479001600.0;
  cp = cp * r2 + 1.0 / 3628800.0;
  cp = cp * r2 - 1.0 / 40320.0;
  cp = cp * r2 + 1.0 / 720.0;
  cp = cp * r2 - 1.0 / 24.0;
  cp = cp * r2 + 0.5;
  const double sin_r = r + r * (r2 * sp);
  const double cos_r = 1.0 - r2 * cp;
  const long long q = static_cast<long long>(k) & 3;
  double sv, cv;
  if (q == 0) {
    sv = sin_r;
    cv = cos_r;
  } else if (q == 1) {
    sv = cos_r;
    cv = -sin_r;
  } else if (q == 2) {
    sv = -sin_r;
    cv = -cos_r;
  } else {
    sv = -cos_r;
    cv = sin_r;
  }
  *s_out = static_cast<float>(sv);
  *c_out = static_cast<float>(cv);
}

// ceil(log2(v)) for finite v > 0, exactly: v = m·2^e with m in [0.5, 1) gives e - 1 when
// m == 0.5 (v a power of two) and e otherwise. (libm's log2f rounds first, so its ceil can miss
// by one just above a power of two, and differently on each library.) Non-finite v gives 128.
DS4_HD int ceil_log2_f32(float v) {
  if (!(v <= 3.4028234663852886e38f)) return 128;
  int e = 0;
  const float m = frexpf(v, &e);
  return m == 0.5f ? e - 1 : e;
}

}  // namespace ds4::detmath
