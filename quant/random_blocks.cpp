// quant/random_blocks.cpp — random but valid blocks for huge synthetic models.
//
// Quant bits are uniform random; scales are chosen so the dequantized values have RMS close
// to the requested magnitude (closed-form second moments of the uniform codes, computed
// below per format) and a mean near zero (dmin balances the mean of d·sc·q for K-quants).
// f16 scales are clamped into the normal finite range. Deterministic in the seed.
#include <cmath>
#include <cstring>

#include "quant/quant.h"

namespace ds4::quant {

namespace {

struct SplitMix64 {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * 0x1p-24f; }  // [0, 1)
  float gauss() {
    const float u1 = 1.0f - uniform(), u2 = uniform();
    return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.2831853f * u2);
  }
  void bytes(uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(next() >> 56);
  }
};

uint16_t f16_scale(float v) {
  const float lo = 0x1p-14f, hi = 65504.0f;
  return f32_to_f16(v < lo ? lo : (v > hi ? hi : v));
}

// E[grid_byte²] over the 256 grid points (the quants are uniform over grid indices).
float iq2_grid_mean_square() {
  double s = 0;
  for (int g = 0; g < 256; ++g) {
    for (int i = 0; i < 8; ++i) {
      const double v = static_cast<double>((kIq2XxsGrid[g] >> (8 * i)) & 0xffu);
      s += v * v;
    }
  }
  return static_cast<float>(s / 2048.0);
}

}  // namespace

void fill_random_blocks(GgmlType t, void* dst, int64_t n, float magnitude, uint64_t seed) {
  DS4_CHECK_MSG(can_quantize(t), "quant: unsupported GGML type for fill_random_blocks");
  DS4_CHECK(n >= 0 && n % gguf::type_block_elems(t) == 0);
  SplitMix64 rng{seed};
  switch (t) {
    case GgmlType::kF32: {
      float* p = static_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) p[i] = rng.gauss() * magnitude;
      return;
    }
    case GgmlType::kF16:
    case GgmlType::kBF16: {
      uint16_t* p = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        const float v = rng.gauss() * magnitude;
        p[i] = t == GgmlType::kF16 ? f32_to_f16(v) : f32_to_bf16(v);
      }
      return;
    }
    case GgmlType::kQ8_0: {
      // qs uniform in [-127, 127]: RMS = sqrt(127·128/3) ≈ 73.6.
      BlockQ8_0* p = static_cast<BlockQ8_0*>(dst);
      const float d = magnitude / 73.6f;
      for (int64_t b = 0; b < n / kQK8_0; ++b) {
        p[b].d = f16_scale(d);
        for (int i = 0; i < kQK8_0; ++i) {
          p[b].qs[i] = static_cast<int8_t>(static_cast<int>(rng.next() % 255u) - 127);
        }
      }
      return;
    }
    case GgmlType::kQ8_K: {
      BlockQ8K* p = static_cast<BlockQ8K*>(dst);
      const float d = magnitude / 73.6f;
      for (int64_t b = 0; b < n / kQKK; ++b) {
        p[b].d = d;
        for (int i = 0; i < kQKK; ++i) {
          p[b].qs[i] = static_cast<int8_t>(static_cast<int>(rng.next() % 255u) - 127);
        }
        for (int j = 0; j < kQKK / 16; ++j) {
          int s = 0;
          for (int i = 0; i < 16; ++i) s += p[b].qs[16 * j + i];
          p[b].bsums[j] = static_cast<int16_t>(s);
        }
      }
      return;
    }
    case GgmlType::kQ2_K: {
      // sc, m uniform 0..15, q uniform 0..3; dmin = 1.5·d zeroes the mean and
      // E[(sc·q − 1.5m)²] = 192.5.
      BlockQ2K* p = static_cast<BlockQ2K*>(dst);
      const float d = magnitude / std::sqrt(192.5f);
      for (int64_t b = 0; b < n / kQKK; ++b) {
        rng.bytes(p[b].scales, sizeof p[b].scales);
        rng.bytes(p[b].qs, sizeof p[b].qs);
        p[b].d = f16_scale(d);
        p[b].dmin = f16_scale(1.5f * d);
      }
      return;
    }
    case GgmlType::kQ4_K: {
      // sc, m uniform 0..63, q uniform 0..15; dmin = 7.5·d zeroes the mean and
      // E[(sc·q − 7.5m)²] ≈ 66727.
      BlockQ4K* p = static_cast<BlockQ4K*>(dst);
      const float d = magnitude / std::sqrt(66727.0f);
      for (int64_t b = 0; b < n / kQKK; ++b) {
        rng.bytes(p[b].scales, sizeof p[b].scales);
        rng.bytes(p[b].qs, sizeof p[b].qs);
        p[b].d = f16_scale(d);
        p[b].dmin = f16_scale(7.5f * d);
      }
      return;
    }
    case GgmlType::kIQ2_XXS: {
      // w = d·(2ls+1)/8·g·±1 with ls uniform 0..15: E[((2ls+1)/8)²] = 341/64.
      BlockIQ2XXS* p = static_cast<BlockIQ2XXS*>(dst);
      const float d = magnitude / std::sqrt(341.0f / 64.0f * iq2_grid_mean_square());
      for (int64_t b = 0; b < n / kQKK; ++b) {
        p[b].d = f16_scale(d);
        rng.bytes(reinterpret_cast<uint8_t*>(p[b].qs), sizeof p[b].qs);
      }
      return;
    }
    default:
      DS4_CHECK_MSG(false, "quant: unsupported GGML type for fill_random_blocks");
  }
}

}  // namespace ds4::quant
