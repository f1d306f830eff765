// quant/quantize.cpp — weight quantizers for F16, BF16, Q8_0, Q8_K, Q2_K, Q4_K (IQ2_XXS is
// in quantize_iq2.cpp) and the quantize_row dispatch.
//
// K-quants (our own scheme, not GGML's): each sub-block gets an affine fit x ≈ s·q − m with
// q ∈ [0, nmax], m >= 0, found by trying a small set of inverse scales, assigning q by
// rounding and solving the 2×2 least-squares problem for (s, −m) given q; the best (lowest
// squared error) fit wins. The super-block then stores d = max s / smax and
// dmin = max m / smax (f16), each sub-block's integer scale/min is the nearest multiple, and
// q is re-assigned against the quantized scales. Deterministic; no heap allocation.
#include <cmath>
#include <cstring>

#include "quant/quant.h"

namespace ds4::quant {

namespace {

inline int nearest_int(float v) { return static_cast<int>(lrintf(v)); }

// Fit x[0..n) ≈ s·q − m, q ∈ [0, nmax], s >= 0, m >= 0. Returns s and m.
void fit_scale_min(const float* x, int n, int nmax, float* s_out, float* m_out) {
  float xmin = x[0], xmax = x[0];
  for (int i = 1; i < n; ++i) {
    xmin = std::fmin(xmin, x[i]);
    xmax = std::fmax(xmax, x[i]);
  }
  if (xmin > 0.0f) xmin = 0.0f;  // the offset can only be <= 0 (m >= 0)
  if (xmax <= xmin) {
    *s_out = 0.0f;
    *m_out = -xmin;
    return;
  }
  float best_err = INFINITY, best_s = (xmax - xmin) / static_cast<float>(nmax), best_m = -xmin;
  uint8_t q[32];
  // Candidate inverse scales: (nmax + delta) / range, delta in [-0.6, 1.2].
  for (int k = 0; k <= 18; ++k) {
    const float iscale = (static_cast<float>(nmax) - 0.6f + 0.1f * static_cast<float>(k)) /
                         (xmax - xmin);
    double sw = 0, sq = 0, sqq = 0, sx = 0, sqx = 0;
    for (int i = 0; i < n; ++i) {
      int l = nearest_int(iscale * (x[i] - xmin));
      l = l < 0 ? 0 : (l > nmax ? nmax : l);
      q[i] = static_cast<uint8_t>(l);
      sw += 1;
      sq += l;
      sqq += static_cast<double>(l) * l;
      sx += x[i];
      sqx += static_cast<double>(l) * x[i];
    }
    // Least squares for x ≈ s·q + b.
    const double det = sw * sqq - sq * sq;
    double s, b;
    if (det > 0) {
      s = (sw * sqx - sq * sx) / det;
      b = (sqq * sx - sq * sqx) / det;
    } else {
      s = 0;
      b = sx / sw;
    }
    if (b > 0) {  // offset must be <= 0: refit s alone with b = 0
      b = 0;
      s = sqq > 0 ? sqx / sqq : 0;
    }
    if (s < 0) s = 0;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double e = s * q[i] + b - x[i];
      err += e * e;
    }
    if (err < best_err) {
      best_err = static_cast<float>(err);
      best_s = static_cast<float>(s);
      best_m = static_cast<float>(-b);
    }
  }
  *s_out = best_s;
  *m_out = best_m;
}

// Quantized scales of a super-block: ls[j], lm[j] in [0, smax] with d·ls ≈ s, dmin·lm ≈ m.
void quantize_scales(const float* s, const float* m, int nsub, int smax, uint16_t* d16,
                     uint16_t* dmin16, uint8_t* ls, uint8_t* lm) {
  float max_s = 0.0f, max_m = 0.0f;
  for (int j = 0; j < nsub; ++j) {
    max_s = std::fmax(max_s, s[j]);
    max_m = std::fmax(max_m, m[j]);
  }
  *d16 = f32_to_f16(max_s / static_cast<float>(smax));
  *dmin16 = f32_to_f16(max_m / static_cast<float>(smax));
  const float d = f16_to_f32(*d16), dmin = f16_to_f32(*dmin16);
  for (int j = 0; j < nsub; ++j) {
    int a = d > 0.0f ? nearest_int(s[j] / d) : 0;
    int b = dmin > 0.0f ? nearest_int(m[j] / dmin) : 0;
    ls[j] = static_cast<uint8_t>(a < 0 ? 0 : (a > smax ? smax : a));
    lm[j] = static_cast<uint8_t>(b < 0 ? 0 : (b > smax ? smax : b));
  }
}

inline int requant(float x, float s, float m, int nmax) {
  if (s <= 0.0f) return 0;
  const int l = nearest_int((x + m) / s);
  return l < 0 ? 0 : (l > nmax ? nmax : l);
}

}  // namespace

void quantize_row_q8_0(const float* src, BlockQ8_0* dst, int64_t n) {
  DS4_CHECK(n >= 0 && n % kQK8_0 == 0);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* x = src + b * kQK8_0;
    float amax = 0.0f;
    for (int i = 0; i < kQK8_0; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    dst[b].d = f32_to_f16(d);
    for (int i = 0; i < kQK8_0; ++i) dst[b].qs[i] = static_cast<int8_t>(roundf(x[i] * id));
  }
}

void quantize_row_q2_k(const float* src, BlockQ2K* dst, int64_t n) {
  DS4_CHECK(n >= 0 && n % kQKK == 0);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float* x = src + b * kQKK;
    BlockQ2K& y = dst[b];
    float s[16], m[16];
    for (int j = 0; j < 16; ++j) fit_scale_min(x + 16 * j, 16, 3, &s[j], &m[j]);
    uint8_t ls[16], lm[16];
    quantize_scales(s, m, 16, 15, &y.d, &y.dmin, ls, lm);
    const float d = f16_to_f32(y.d), dmin = f16_to_f32(y.dmin);
    for (int j = 0; j < 16; ++j) y.scales[j] = static_cast<uint8_t>(ls[j] | (lm[j] << 4));
    std::memset(y.qs, 0, sizeof y.qs);
    for (int half = 0; half < 2; ++half) {
      for (int j = 0; j < 4; ++j) {
        for (int l = 0; l < 32; ++l) {
          const int e = 128 * half + 32 * j + l;
          const int sb = e / 16;  // == 8·half + 2j + (l >= 16)
          const int q = requant(x[e], d * ls[sb], dmin * lm[sb], 3);
          y.qs[32 * half + l] = static_cast<uint8_t>(y.qs[32 * half + l] | (q << (2 * j)));
        }
      }
    }
  }
}

void quantize_row_q4_k(const float* src, BlockQ4K* dst, int64_t n) {
  DS4_CHECK(n >= 0 && n % kQKK == 0);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float* x = src + b * kQKK;
    BlockQ4K& y = dst[b];
    float s[8], m[8];
    for (int j = 0; j < 8; ++j) fit_scale_min(x + 32 * j, 32, 15, &s[j], &m[j]);
    uint8_t ls[8], lm[8];
    quantize_scales(s, m, 8, 63, &y.d, &y.dmin, ls, lm);
    std::memset(y.scales, 0, sizeof y.scales);
    for (int j = 0; j < 8; ++j) {
      if (j < 4) {
        y.scales[j] = ls[j];
        y.scales[j + 4] = lm[j];
      } else {
        y.scales[j + 4] = static_cast<uint8_t>((ls[j] & 15) | ((lm[j] & 15) << 4));
        y.scales[j - 4] = static_cast<uint8_t>(y.scales[j - 4] | ((ls[j] >> 4) << 6));
        y.scales[j] = static_cast<uint8_t>(y.scales[j] | ((lm[j] >> 4) << 6));
      }
    }
    const float d = f16_to_f32(y.d), dmin = f16_to_f32(y.dmin);
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, mm;
      q4_k_scale_min(j, y.scales, &sc, &mm);
      const float sj = d * sc, mj = dmin * mm;
      uint8_t* qs = y.qs + 32 * (j >> 1);
      for (int l = 0; l < 32; ++l) {
        const int q = requant(x[32 * j + l], sj, mj, 15);
        if (j & 1) {
          qs[l] = static_cast<uint8_t>(qs[l] | (q << 4));
        } else {
          qs[l] = static_cast<uint8_t>(q);
        }
      }
    }
  }
}

void quantize_row(GgmlType t, const float* src, void* dst, int64_t n) {
  DS4_CHECK_MSG(can_quantize(t), "quant: unsupported GGML type for quantize_row");
  DS4_CHECK(n >= 0 && n % gguf::type_block_elems(t) == 0);
  switch (t) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16:
      f32_to_f16_row(src, static_cast<uint16_t*>(dst), n);
      return;
    case GgmlType::kBF16:
      f32_to_bf16_row(src, static_cast<uint16_t*>(dst), n);
      return;
    case GgmlType::kQ8_0:
      quantize_row_q8_0(src, static_cast<BlockQ8_0*>(dst), n);
      return;
    case GgmlType::kQ8_K:
      quantize_q8_k_act(src, static_cast<BlockQ8K*>(dst), n);
      return;
    case GgmlType::kQ2_K:
      quantize_row_q2_k(src, static_cast<BlockQ2K*>(dst), n);
      return;
    case GgmlType::kQ4_K:
      quantize_row_q4_k(src, static_cast<BlockQ4K*>(dst), n);
      return;
    case GgmlType::kIQ2_XXS:
      quantize_row_iq2_xxs(src, static_cast<BlockIQ2XXS*>(dst), n);
      return;
    default:
      DS4_CHECK_MSG(false, "quant: unsupported GGML type for quantize_row");
  }
}

}  // namespace ds4::quant
