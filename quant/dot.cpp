// quant/dot.cpp — reference dot products (quant/dot.h states each operation sequence).
//
// Written as plain scalar loops in exactly the documented order; the file is compiled with
// -ffp-contract=off like every TU, so no multiply-add is fused.
#include "quant/dot.h"

#include <cstring>

#include "quant/half.h"
#include "quant/iq2_tables.h"

namespace ds4::quant {

namespace {

template <typename Load>
float dot_64lane(const Load& f, const float* x, int64_t n) {
  float p[kDotLanes];
  for (int j = 0; j < kDotLanes; ++j) p[j] = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float t = f(i) * x[i];
    p[i % kDotLanes] = p[i % kDotLanes] + t;
  }
  for (int h = kDotLanes / 2; h >= 1; h /= 2) {
    for (int j = 0; j < h; ++j) p[j] = p[j] + p[j + h];
  }
  return p[0];
}

}  // namespace

float dot_f32(const float* w, const float* x, int64_t n) {
  return dot_64lane([w](int64_t i) { return w[i]; }, x, n);
}

float dot_f16(const uint16_t* w, const float* x, int64_t n) {
  return dot_64lane([w](int64_t i) { return f16_to_f32(w[i]); }, x, n);
}

float dot_bf16(const uint16_t* w, const float* x, int64_t n) {
  return dot_64lane([w](int64_t i) { return bf16_to_f32(w[i]); }, x, n);
}

double sumsq_f64(const float* x, int64_t n) {
  double p[kDotLanes];
  for (int j = 0; j < kDotLanes; ++j) p[j] = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double q = static_cast<double>(x[i]) * static_cast<double>(x[i]);
    p[i % kDotLanes] = p[i % kDotLanes] + q;
  }
  for (int h = kDotLanes / 2; h >= 1; h /= 2) {
    for (int j = 0; j < h; ++j) p[j] = p[j] + p[j + h];
  }
  return p[0];
}

int32_t q8_0_block_isum(const BlockQ8_0& w, const BlockQ8_0Act& x) {
  int32_t isum = 0;
  for (int i = 0; i < kQK8_0; ++i) isum += static_cast<int32_t>(w.qs[i]) * x.qs[i];
  return isum;
}

float dot_q8_0(const BlockQ8_0* w, const BlockQ8_0Act* x, int64_t n_blocks) {
  float acc = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int32_t isum = q8_0_block_isum(w[b], x[b]);
    const float s = f16_to_f32(w[b].d) * x[b].d;
    const float t = s * static_cast<float>(isum);
    acc = acc + t;
  }
  return acc;
}

int32_t iq2_xxs_block_isum(const BlockIQ2XXS& w, const BlockQ8K& y) {
  int32_t bsum = 0;
  const int8_t* q8 = y.qs;
  for (int g = 0; g < kQKK / 32; ++g) {
    uint32_t aux[2];
    std::memcpy(aux, w.qs + 4 * g, sizeof aux);
    const int32_t ls = static_cast<int32_t>(2 * (aux[1] >> 28) + 1);
    int32_t sumi = 0;
    for (int k = 0; k < 4; ++k) {
      const uint64_t grid = kIq2XxsGrid[(aux[0] >> (8 * k)) & 0xffu];
      const uint8_t signs = kIq2Signs[(aux[1] >> (7 * k)) & 127u];
      for (int b = 0; b < 8; ++b) {
        const int32_t mag = static_cast<int32_t>((grid >> (8 * b)) & 0xffu);
        const int32_t v = ((signs >> b) & 1u) ? -mag : mag;
        sumi += v * q8[b];
      }
      q8 += 8;
    }
    bsum += sumi * ls;
  }
  return bsum;
}

float dot_iq2_xxs_q8_k(const BlockIQ2XXS* w, const BlockQ8K* y, int64_t n_blocks) {
  float sumf = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const float d = f16_to_f32(w[b].d) * y[b].d;
    const int32_t bsum = iq2_xxs_block_isum(w[b], y[b]);
    const float t = d * static_cast<float>(bsum);
    sumf = sumf + t;
  }
  return 0.125f * sumf;
}

void q2_k_block_isums(const BlockQ2K& w, const BlockQ8K& y, int32_t* isum_out,
                      int32_t* summs_out) {
  int32_t summs = 0;
  for (int j = 0; j < kQKK / 16; ++j) summs += static_cast<int32_t>(y.bsums[j]) * (w.scales[j] >> 4);
  int32_t isum = 0;
  for (int n = 0; n < 2; ++n) {
    for (int j = 0; j < 4; ++j) {
      for (int h = 0; h < 2; ++h) {  // l in [16h, 16h+16) -> sub-block 8n+2j+h
        const int sb = 8 * n + 2 * j + h;
        int32_t s = 0;
        for (int l = 16 * h; l < 16 * h + 16; ++l) {
          const int32_t q = (w.qs[32 * n + l] >> (2 * j)) & 3;
          s += q * y.qs[128 * n + 32 * j + l];
        }
        isum += (w.scales[sb] & 15) * s;
      }
    }
  }
  *isum_out = isum;
  *summs_out = summs;
}

float dot_q2_k_q8_k(const BlockQ2K* w, const BlockQ8K* y, int64_t n_blocks) {
  float sumf = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int32_t isum, summs;
    q2_k_block_isums(w[b], y[b], &isum, &summs);
    const float dall = y[b].d * f16_to_f32(w[b].d);
    const float dmin = y[b].d * f16_to_f32(w[b].dmin);
    const float a = dall * static_cast<float>(isum);
    const float c = dmin * static_cast<float>(summs);
    sumf = sumf + (a - c);
  }
  return sumf;
}

void q4_k_block_isums(const BlockQ4K& w, const BlockQ8K& y, int32_t* isum_out,
                      int32_t* summs_out) {
  int32_t isum = 0, summs = 0;
  for (int j = 0; j < kQKK / 32; ++j) {
    uint8_t sc, m;
    q4_k_scale_min(j, w.scales, &sc, &m);
    summs += m * (static_cast<int32_t>(y.bsums[2 * j]) + y.bsums[2 * j + 1]);
    const uint8_t* qs = w.qs + 32 * (j >> 1);
    const int shift = 4 * (j & 1);
    int32_t s = 0;
    for (int l = 0; l < 32; ++l) s += ((qs[l] >> shift) & 15) * y.qs[32 * j + l];
    isum += sc * s;
  }
  *isum_out = isum;
  *summs_out = summs;
}

float dot_q4_k_q8_k(const BlockQ4K* w, const BlockQ8K* y, int64_t n_blocks) {
  float sumf = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    int32_t isum, summs;
    q4_k_block_isums(w[b], y[b], &isum, &summs);
    const float d = y[b].d * f16_to_f32(w[b].d);
    const float dmin = y[b].d * f16_to_f32(w[b].dmin);
    const float a = d * static_cast<float>(isum);
    const float c = dmin * static_cast<float>(summs);
    sumf = sumf + (a - c);
  }
  return sumf;
}

}  // namespace ds4::quant
