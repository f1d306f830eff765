// quant/dequant.cpp — type dispatch, row dequantization and the activation quantizers.
//
// Dequantization reproduces the GGUF python package's float32 arithmetic exactly (the same
// products in the same order), which tests/quant verifies bit for bit on random blocks.
#include <cmath>
#include <cstring>

#include "quant/quant.h"

namespace ds4::quant {

namespace {

bool supported(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
    case GgmlType::kF16:
    case GgmlType::kBF16:
    case GgmlType::kQ8_0:
    case GgmlType::kQ8_K:
    case GgmlType::kQ2_K:
    case GgmlType::kQ4_K:
    case GgmlType::kIQ2_XXS:
      return true;
    default:
      return false;
  }
}

void check_row(GgmlType t, int64_t n) {
  DS4_CHECK_MSG(supported(t), "quant: unsupported GGML type");
  DS4_CHECK_MSG(n >= 0 && n % gguf::type_block_elems(t) == 0,
                "quant: row length not a multiple of the block size");
}

}  // namespace

bool can_dequantize(GgmlType t) { return supported(t); }
bool can_quantize(GgmlType t) { return supported(t); }

Status validate_row(GgmlType t, int64_t n) {
  if (!supported(t)) {
    return unsupported("quant: GGML type %s (%u) is not supported (expected one of f32, f16, "
                       "bf16, q8_0, q8_K, q2_K, q4_K, iq2_xxs)",
                       gguf::type_name(t), static_cast<unsigned>(t));
  }
  const int64_t be = gguf::type_block_elems(t);
  if (n < 0 || n % be != 0) {
    return invalid_argument("quant: row of %lld elements is not a multiple of the %s block size %lld",
                            static_cast<long long>(n), gguf::type_name(t),
                            static_cast<long long>(be));
  }
  return Status::ok_status();
}

size_t row_bytes(GgmlType t, int64_t n) {
  DS4_CHECK(gguf::type_known(t));
  const int64_t be = gguf::type_block_elems(t);
  DS4_CHECK(n >= 0 && n % be == 0);
  return static_cast<size_t>(n / be) * gguf::type_block_bytes(t);
}

// ---- Dequantization -----------------------------------------------------------------------

void dequantize_row_q8_0(const BlockQ8_0* src, float* dst, int64_t n) {
  DS4_CHECK(n % kQK8_0 == 0);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float d = f16_to_f32(src[b].d);
    for (int i = 0; i < kQK8_0; ++i) dst[b * kQK8_0 + i] = static_cast<float>(src[b].qs[i]) * d;
  }
}

void dequantize_row_q8_k(const BlockQ8K* src, float* dst, int64_t n) {
  DS4_CHECK(n % kQKK == 0);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    for (int i = 0; i < kQKK; ++i) dst[b * kQKK + i] = src[b].d * static_cast<float>(src[b].qs[i]);
  }
}

void dequantize_row_q2_k(const BlockQ2K* src, float* dst, int64_t n) {
  DS4_CHECK(n % kQKK == 0);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ2K& blk = src[b];
    const float d = f16_to_f32(blk.d);
    const float dmin = f16_to_f32(blk.dmin);
    float* y = dst + b * kQKK;
    for (int half = 0; half < 2; ++half) {
      for (int j = 0; j < 4; ++j) {
        for (int l = 0; l < 32; ++l) {
          const int sb = 8 * half + 2 * j + (l >= 16 ? 1 : 0);
          const float dl = d * static_cast<float>(blk.scales[sb] & 15);
          const float ml = dmin * static_cast<float>(blk.scales[sb] >> 4);
          const int q = (blk.qs[32 * half + l] >> (2 * j)) & 3;
          y[128 * half + 32 * j + l] = dl * static_cast<float>(q) - ml;
        }
      }
    }
  }
}

void dequantize_row_q4_k(const BlockQ4K* src, float* dst, int64_t n) {
  DS4_CHECK(n % kQKK == 0);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockQ4K& blk = src[b];
    const float d = f16_to_f32(blk.d);
    const float dmin = f16_to_f32(blk.dmin);
    float* y = dst + b * kQKK;
    for (int j = 0; j < 8; ++j) {
      uint8_t sc, m;
      q4_k_scale_min(j, blk.scales, &sc, &m);
      const float dl = d * static_cast<float>(sc);
      const float ml = dmin * static_cast<float>(m);
      const uint8_t* qs = blk.qs + 32 * (j >> 1);
      const int shift = 4 * (j & 1);
      for (int l = 0; l < 32; ++l) {
        y[32 * j + l] = dl * static_cast<float>((qs[l] >> shift) & 15) - ml;
      }
    }
  }
}

void dequantize_row_iq2_xxs(const BlockIQ2XXS* src, float* dst, int64_t n) {
  DS4_CHECK(n % kQKK == 0);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const BlockIQ2XXS& blk = src[b];
    const float d = f16_to_f32(blk.d);
    float* y = dst + b * kQKK;
    for (int g = 0; g < 8; ++g) {
      uint32_t aux[2];
      std::memcpy(aux, blk.qs + 4 * g, sizeof aux);
      const float db = (d * (0.5f + static_cast<float>(aux[1] >> 28))) * 0.25f;
      for (int k = 0; k < 4; ++k) {
        const uint64_t grid = kIq2XxsGrid[(aux[0] >> (8 * k)) & 0xffu];
        const uint8_t signs = kIq2Signs[(aux[1] >> (7 * k)) & 127u];
        for (int i = 0; i < 8; ++i) {
          const float mag = static_cast<float>((grid >> (8 * i)) & 0xffu);
          const float sign = ((signs >> i) & 1u) ? -1.0f : 1.0f;
          y[32 * g + 8 * k + i] = (db * mag) * sign;
        }
      }
    }
  }
}

void dequantize_row(GgmlType t, const void* src, float* dst, int64_t n) {
  check_row(t, n);
  switch (t) {
    case GgmlType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::kF16:
      f16_to_f32_row(static_cast<const uint16_t*>(src), dst, n);
      return;
    case GgmlType::kBF16:
      bf16_to_f32_row(static_cast<const uint16_t*>(src), dst, n);
      return;
    case GgmlType::kQ8_0:
      dequantize_row_q8_0(static_cast<const BlockQ8_0*>(src), dst, n);
      return;
    case GgmlType::kQ8_K:
      dequantize_row_q8_k(static_cast<const BlockQ8K*>(src), dst, n);
      return;
    case GgmlType::kQ2_K:
      dequantize_row_q2_k(static_cast<const BlockQ2K*>(src), dst, n);
      return;
    case GgmlType::kQ4_K:
      dequantize_row_q4_k(static_cast<const BlockQ4K*>(src), dst, n);
      return;
    case GgmlType::kIQ2_XXS:
      dequantize_row_iq2_xxs(static_cast<const BlockIQ2XXS*>(src), dst, n);
      return;
    default:
      DS4_CHECK_MSG(false, "quant: unsupported GGML type");
  }
}

// ---- Activation quantizers (§3.3, §3.4) ----------------------------------------------------

void quantize_q8_0_act(const float* x, BlockQ8_0Act* out, int64_t n) {
  DS4_CHECK(n >= 0 && n % kQK8_0 == 0);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* xb = x + b * kQK8_0;
    float amax = 0.0f;
    for (int i = 0; i < kQK8_0; ++i) {
      const float av = std::fabs(xb[i]);
      if (av > amax) amax = av;
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    out[b].d = d;
    for (int i = 0; i < kQK8_0; ++i) {
      long q = lrintf(xb[i] * id);
      if (q > 127) q = 127;
      if (q < -128) q = -128;
      out[b].qs[i] = static_cast<int8_t>(q);
    }
  }
}

void quantize_q8_k_act(const float* x, BlockQ8K* out, int64_t n) {
  DS4_CHECK(n >= 0 && n % kQKK == 0);
  for (int64_t b = 0; b < n / kQKK; ++b) {
    const float* xb = x + b * kQKK;
    BlockQ8K& y = out[b];
    float max = 0.0f, amax = 0.0f;
    for (int i = 0; i < kQKK; ++i) {
      const float av = std::fabs(xb[i]);
      if (av > amax) {
        amax = av;
        max = xb[i];
      }
    }
    if (amax == 0.0f) {
      y.d = 0.0f;
      std::memset(y.qs, 0, sizeof y.qs);
      std::memset(y.bsums, 0, sizeof y.bsums);
      continue;
    }
    const float iscale = -127.0f / max;
    for (int i = 0; i < kQKK; ++i) {
      long q = lrintf(iscale * xb[i]);
      if (q > 127) q = 127;
      if (q < -128) q = -128;
      y.qs[i] = static_cast<int8_t>(q);
    }
    for (int j = 0; j < kQKK / 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += y.qs[16 * j + i];
      y.bsums[j] = static_cast<int16_t>(sum);
    }
    y.d = 1.0f / iscale;
  }
}

}  // namespace ds4::quant
