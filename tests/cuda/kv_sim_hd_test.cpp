// tests/cuda/kv_sim_hd_test.cpp — backend/cuda/kv_sim_hd.h (the host+device round-trip steps
// of the CUDA attention kernels) against quant/kv_sim and quant/half, on the host.
//
// The device kernels run these very functions (warp-parallel only where the CPU's result is
// order-free: the block amax), so equality here pins the per-element arithmetic without a
// GPU; tests/cuda/attention_ops_test.cpp checks the kernels themselves on a GPU. Needs no GPU.
// Block scales follow detmath::ceil_log2_f32 (exact); inputs here keep amax/max away from the
// few values just above a power of two where libm's ceilf(log2f(.)) rounds down, and one test
// pins the exact definition there.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>
#include <vector>

#include "backend/cuda/kv_sim_hd.h"
#include "quant/half.h"
#include "quant/kv_sim.h"

namespace ds4::cuda {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Rows of 64-blocks with wide magnitudes, zero / −0 blocks, blocks below the FP8 minimum
// amax, exact grid ties, subnormals, NaN, values far outside the grid.
std::vector<float> test_rows(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (size_t b = 0; b < n / 32; ++b) {
    float* xb = x.data() + b * 32;
    const float mag = std::ldexp(1.0f, static_cast<int>(b % 61) - 30);
    for (int i = 0; i < 32; ++i) xb[i] = g(rng) * mag;
    switch (b % 11) {
      case 1: for (int i = 0; i < 32; ++i) xb[i] = (i & 1) ? -0.0f : 0.0f; break;
      case 2: for (int i = 0; i < 32; ++i) xb[i] = static_cast<float>(i - 16) * 0.125f; break;
      case 3: for (int i = 0; i < 32; ++i) xb[i] = g(rng) * 1e-40f; break;
      case 4: xb[6] = std::numeric_limits<float>::quiet_NaN(); break;
      case 5: xb[1] = 3.0e30f; xb[2] = -2.5e30f; break;
      case 6: for (int i = 0; i < 32; ++i) xb[i] = static_cast<float>(i % 7) * 0.75f - 2.0f; break;
      default: break;
    }
  }
  return x;
}

size_t mismatches(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (bits(got[i]) != bits(want[i]) && !(std::isnan(got[i]) && std::isnan(want[i]))) {
      if (bad < 5)
        ADD_FAILURE() << what << " [" << i << "]: hd " << got[i] << " (0x" << std::hex << bits(got[i])
                      << ") quant " << want[i] << " (0x" << bits(want[i]) << std::dec << ")";
      ++bad;
    }
  }
  return bad;
}

TEST(KvSimHd, Pow2fEqualsLdexpf) {
  for (int k = -170; k <= 140; ++k)
    EXPECT_EQ(bits(std::ldexp(1.0f, k)), bits(kvsim::pow2f(k))) << "k " << k;
}

TEST(KvSimHd, F16ToF32EqualsQuantForEveryHalf) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    ASSERT_EQ(bits(quant::f16_to_f32(v)), bits(kvsim::f16_to_f32(v))) << "half 0x" << std::hex << h;
  }
}

TEST(KvSimHd, F16RoundEqualsQuant) {
  // Every bit pattern whose low 9 bits are one of a few values (covers every exponent, the
  // rounding boundaries 0x0fff / 0x1000 / 0x1001 of the normal path and the subnormal range).
  size_t bad = 0;
  for (uint32_t hi = 0; hi < (1u << 23); ++hi) {
    for (uint32_t lo : {0x000u, 0x0ffu, 0x100u, 0x101u, 0x1ffu}) {
      const uint32_t u = (hi << 9) | lo;
      const float x = from_bits(u);
      const float want = quant::f16_round(x);
      const float got = kvsim::f16_round(x);
      if (bits(got) != bits(want)) {
        if (bad < 5) ADD_FAILURE() << "f16_round(0x" << std::hex << u << "): hd 0x" << bits(got) << " quant 0x" << bits(want);
        ++bad;
      }
    }
  }
  EXPECT_EQ(0u, bad);
}

TEST(KvSimHd, F32ToF16EqualsQuant) {
  // The f16 stores' write: the same bits as quant::f32_to_f16 on the patterns above (every
  // exponent, both rounding boundaries, subnormals, ±inf, NaNs), and so a round trip through
  // the store gives f16_round's value.
  size_t bad = 0;
  for (uint32_t hi = 0; hi < (1u << 23); ++hi) {
    for (uint32_t lo : {0x000u, 0x0ffu, 0x100u, 0x101u, 0x1ffu}) {
      const float x = from_bits((hi << 9) | lo);
      const uint16_t want = quant::f32_to_f16(x);
      const uint16_t got = kvsim::f32_to_f16(x);
      if (got != want || bits(kvsim::f16_to_f32(got)) != bits(quant::f16_round(x))) {
        if (bad < 5)
          ADD_FAILURE() << "f32_to_f16(0x" << std::hex << bits(x) << "): hd 0x" << got << " quant 0x" << want;
        ++bad;
      }
    }
  }
  EXPECT_EQ(0u, bad);
}

TEST(KvSimHd, Fp8RowEqualsQuant) {
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    const std::vector<float> x = test_rows(512 * 16, seed);
    std::vector<float> want = x, got = x;
    quant::fp8_e4m3_roundtrip(want.data(), static_cast<int>(want.size()));
    kvsim::fp8_roundtrip_row(got.data(), static_cast<int>(got.size()));
    EXPECT_EQ(0u, mismatches(got, want, "fp8_e4m3_roundtrip")) << "seed " << seed;
  }
}

TEST(KvSimHd, IndexerQatRowEqualsQuant) {
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    const std::vector<float> x = test_rows(128 * 64, seed + 100);
    std::vector<float> want = x, got = x;
    for (size_t off = 0; off < x.size(); off += 128) {
      quant::indexer_qat_row(want.data() + off);
      kvsim::indexer_qat_row(got.data() + off);
    }
    EXPECT_EQ(0u, mismatches(got, want, "indexer_qat_row")) << "seed " << seed;
  }
}

// The FP4 store of the indexer rows: kvsim's codes and exponent bytes (the compressor
// kernel's) are quant's, byte for byte, and so are the values each (code, byte) stands for
// (the indexer kernel's decode).
TEST(KvSimHd, Fp4StoreEqualsQuant) {
  const float inf = std::numeric_limits<float>::infinity();
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    std::vector<float> x = test_rows(128 * 64, seed + 200);
    for (size_t i = 0; i < x.size(); i += 997) x[i] = (i & 1) ? -inf : inf;  // inf scales
    for (size_t i = 4096; i < 4096 + 32; ++i) x[i] = 3.0e38f * ((i & 1) ? -1.0f : 1.0f);
    // The FP4 part alone (the specials reach it unmixed), block by block.
    std::vector<uint8_t> want(quant::fp4_row_bytes(128)), got(want.size());
    size_t bad = 0;
    for (size_t off = 0; off < x.size(); off += 128) {
      std::vector<float> w(x.begin() + off, x.begin() + off + 128);
      quant::fp4_e2m1_roundtrip_row_store(w.data(), 128, want.data());
      for (int b = 0; b < 4; ++b) {
        float m = 0.0f;
        for (int i = 0; i < 32; ++i) m = kvsim::amax_step(m, x[off + 32 * b + i]);
        const int k = kvsim::block_exp(m, kvsim::kE2M1Max, kvsim::kFp4MinAmax);
        got[64 + b] = static_cast<uint8_t>(k + 127);
        for (int i = 0; i < 32; i += 2) {
          got[16 * b + i / 2] = static_cast<uint8_t>(kvsim::fp4_code(x[off + 32 * b + i], kvsim::pow2f(k)) |
                                                     (kvsim::fp4_code(x[off + 32 * b + i + 1], kvsim::pow2f(k)) << 4));
        }
      }
      bad += want != got;
    }
    EXPECT_EQ(0u, bad) << "fp4 codes, seed " << seed;
    // The indexer row (Hadamard + FP4) with its store.
    std::vector<float> vq = x, vk = x;
    bad = 0;
    for (size_t off = 0; off < x.size(); off += 128) {
      quant::indexer_qat_row_store(vq.data() + off, 128, want.data());
      kvsim::indexer_qat_row_store(vk.data() + off, got.data(), 64);
      bad += want != got;
    }
    EXPECT_EQ(0u, bad) << "indexer_qat_row_store, seed " << seed;
    EXPECT_EQ(0u, mismatches(vk, vq, "indexer_qat_row_store values")) << "seed " << seed;
  }
  for (uint32_t e = 0; e < 256; ++e) {
    for (uint32_t c = 0; c < 16; ++c) {
      ASSERT_EQ(bits(kvsim::fp4_stored_value(c, e)), bits(quant::fp4_stored_value(static_cast<int>(c), static_cast<int>(e))))
          << "code " << c << ", exponent byte " << e;
    }
  }
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(kvsim::e2m1_magnitude(i), quant::e2m1_value(static_cast<int>(i)));
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(kvsim::e2m1_index(quant::e2m1_value(static_cast<int>(i))), i);
}

// The FP8 store of the compressed rows: kvsim's codes, exponent bytes, pad byte and f16 RoPE
// dims (the compressor kernel's, per element: fp8_code under pow2f(block_exp)) are quant's byte
// for byte, with the same round-trip values left in the row; every (code, byte) stands for the
// same value (the attention kernels' decode, attn::load_key on an FP8 row).
TEST(KvSimHd, Fp8StoreEqualsQuant) {
  const float inf = std::numeric_limits<float>::infinity();
  for (const auto& [D, n_rot] : {std::pair{512, 64}, std::pair{128, 64}, std::pair{192, 0}}) {
    const int rb = quant::fp8_row_bytes(D, n_rot);
    ASSERT_EQ(rb, kvsim::fp8_row_bytes(D, n_rot));
    ASSERT_EQ(quant::fp8_rope_offset(D - n_rot), kvsim::fp8_rope_offset(D - n_rot));
    for (uint32_t seed = 1; seed <= 8; ++seed) {
      std::vector<float> x = test_rows(static_cast<size_t>(D) * 32, seed + 300);
      for (size_t i = 0; i < x.size(); i += 997) x[i] = (i & 1) ? -inf : inf;  // inf scales, inf RoPE dims
      for (size_t i = 1024; i < 1024 + 64; ++i) x[i] = 3.0e38f * ((i & 1) ? -1.0f : 1.0f);
      std::vector<uint8_t> want(static_cast<size_t>(rb)), got(want.size());
      std::vector<float> vq = x, vk = x;
      size_t bad = 0;
      for (size_t off = 0; off < x.size(); off += static_cast<size_t>(D)) {
        std::fill(want.begin(), want.end(), static_cast<uint8_t>(0x5a));
        std::fill(got.begin(), got.end(), static_cast<uint8_t>(0xa5));
        quant::fp8_kv_row_store(vq.data() + off, D, n_rot, want.data());
        kvsim::fp8_kv_row_store(vk.data() + off, D, n_rot, got.data());
        bad += want != got;
      }
      EXPECT_EQ(0u, bad) << "fp8_kv_row_store bytes, D " << D << ", seed " << seed;
      EXPECT_EQ(0u, mismatches(vk, vq, "fp8_kv_row_store values")) << "D " << D << ", seed " << seed;
    }
  }
  for (uint32_t e = 0; e < 256; ++e) {
    for (uint32_t c = 0; c < 256; ++c) {
      ASSERT_EQ(bits(kvsim::fp8_stored_value(c, e)), bits(quant::fp8_stored_value(static_cast<int>(c), static_cast<int>(e))))
          << "code " << c << ", exponent byte " << e;
    }
  }
  for (uint32_t i = 0; i < 127; ++i) {
    EXPECT_EQ(bits(kvsim::e4m3_magnitude(i)), bits(quant::e4m3_value(static_cast<int>(i)))) << i;
    EXPECT_EQ(kvsim::e4m3_index(quant::e4m3_value(static_cast<int>(i))), i);
  }
}

// The block scale is 2^ceil(log2(amax / max)) exactly: a power of two maps to itself, the
// next float above it to the next power (where ceilf(log2f(.)) would round down).
TEST(KvSimHd, BlockScaleIsExactAtPowersOfTwo) {
  for (int k = -20; k <= 20; ++k) {
    const float amax = std::ldexp(448.0f, k);
    EXPECT_EQ(std::ldexp(1.0f, k), kvsim::block_scale(amax, 448.0f, 1e-4f)) << "k " << k;
    const float above = std::nextafter(amax, std::numeric_limits<float>::infinity());
    EXPECT_EQ(std::ldexp(1.0f, k + 1), kvsim::block_scale(above, 448.0f, 1e-4f)) << "k " << k;
  }
  EXPECT_EQ(std::ldexp(1.0f, -22), kvsim::block_scale(0.0f, 448.0f, 1e-4f));  // the amax floor
  EXPECT_TRUE(std::isinf(kvsim::block_scale(std::numeric_limits<float>::infinity(), 6.0f, 7.052966104933725e-38f)));
}

}  // namespace
}  // namespace ds4::cuda
