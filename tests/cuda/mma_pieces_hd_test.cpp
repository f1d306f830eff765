// tests/cuda/mma_pieces_hd_test.cpp — backend/cuda/mma_pieces_hd.h (how the routed experts'
// blocks feed the tensor-core kernel's int8 mma) against quant/dot's exact integer block sums,
// on the host.
//
// The tensor-core kernel (moe_rows.cu, --cuda-moe tc) runs these very functions, so equality
// here pins its decoding, k order, scales and mins without a GPU: per block, the mma's sum over
// the 8 groups and the 4 lane columns (lo against the activation quants at act_off0, hi at
// act_off1) must equal iq2_xxs_block_isum / q2_k_block_isums / q4_k_block_isums on random
// blocks (and saturated activations), and every element of a group must meet exactly one k
// slot. tests/cuda/moe_rows_test.cpp checks the kernel itself on a GPU. Needs no GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/mma_pieces_hd.h"
#include "backend/cuda/moe_r1.h"
#include "quant/quant.h"

namespace ds4::cuda {
namespace {

using gguf::GgmlType;

// Σ over 4 bytes of int8(a_i) · q_i.
int32_t dot4(uint32_t a, const int8_t* q) {
  int32_t s = 0;
  for (int i = 0; i < 4; ++i) s += static_cast<int32_t>(static_cast<int8_t>(a >> (8 * i))) * q[i];
  return s;
}

struct Sums {
  int32_t isum = 0, summs = 0;
};

// The block's integer parts as the mma kernel forms them (per group: Σ_t lo·act0 + hi·act1).
template <class PieceFn>
Sums mma_sums(PieceFn piece, bool permuted, bool group_scale, const quant::BlockQ8K& y, std::string* err) {
  Sums s;
  for (int G = 0; G < 8; ++G) {
    int32_t d = 0, m = 0, scale = 0;
    std::vector<int> seen(32, 0);
    for (int t = 0; t < 4; ++t) {
      const mma::MmaPiece pc = piece(G, t);
      if (t == 0) scale = pc.scale;
      if (pc.scale != scale) *err = "group " + std::to_string(G) + ": lanes disagree on the scale";
      const int o0 = mma::act_off0(permuted, t), o1 = mma::act_off1(permuted, t);
      for (int i = 0; i < 4; ++i) ++seen[o0 + i], ++seen[o1 + i];
      const int8_t* q = y.qs + 32 * G;
      d += dot4(pc.lo, q + o0) + dot4(pc.hi, q + o1);
      m += dot4(pc.min_lo, q + o0) + dot4(pc.min_hi, q + o1);
    }
    for (int e = 0; e < 32; ++e)
      if (seen[e] != 1) *err = "group " + std::to_string(G) + ": element " + std::to_string(e) + " covered " +
                               std::to_string(seen[e]) + " times";
    s.isum += group_scale ? scale * d : d;
    s.summs += m;
  }
  return s;
}

struct Case {
  GgmlType type;
  size_t block_bytes;
};

class MmaPieces : public ::testing::TestWithParam<Case> {};

TEST_P(MmaPieces, BlockSumsEqualQuantDot) {
  const Case c = GetParam();
  constexpr int kBlocks = 256;
  uint64_t tables[kIq2DecodeTables];
  iq2_decode_tables(tables);
  std::vector<uint8_t> w(kBlocks * c.block_bytes);
  std::vector<quant::BlockQ8K> y(kBlocks);
  std::vector<float> x(kBlocks * quant::kQKK);
  size_t checked = 0;
  for (int seed = 0; seed < 8; ++seed) {
    quant::fill_random_blocks(c.type, w.data(), kBlocks * quant::kQKK, 0.05f + 0.5f * seed, 40 + seed);
    std::mt19937 rng(seed);
    std::normal_distribution<float> gauss(0.0f, 1.0f + seed);
    for (float& v : x) v = gauss(rng);
    if (seed == 7)  // saturated activations: every quant at ±127
      for (size_t i = 0; i < x.size(); ++i) x[i] = (i % 3 == 0) ? -1.0f : 1.0f;
    quant::quantize_q8_k_act(x.data(), y.data(), static_cast<int64_t>(x.size()));
    for (int b = 0; b < kBlocks; ++b) {
      const uint8_t* p = w.data() + b * c.block_bytes;
      std::string err;
      int32_t want_isum = 0, want_summs = 0;
      Sums got;
      if (c.type == GgmlType::kIQ2_XXS) {
        want_isum = quant::iq2_xxs_block_isum(*reinterpret_cast<const quant::BlockIQ2XXS*>(p), y[b]);
        got = mma_sums([&](int G, int t) { return mma::iq2_xxs_piece(p, G, t, tables); }, true, true, y[b], &err);
      } else if (c.type == GgmlType::kQ2_K) {
        quant::q2_k_block_isums(*reinterpret_cast<const quant::BlockQ2K*>(p), y[b], &want_isum, &want_summs);
        got = mma_sums([&](int G, int t) { return mma::q2_k_piece(p, G, t); }, false, false, y[b], &err);
      } else {
        quant::q4_k_block_isums(*reinterpret_cast<const quant::BlockQ4K*>(p), y[b], &want_isum, &want_summs);
        got = mma_sums([&](int G, int t) { return mma::q4_k_piece(p, G, t); }, false, true, y[b], &err);
      }
      ASSERT_EQ(err, "") << gguf::type_name(c.type) << " seed " << seed << " block " << b;
      ASSERT_EQ(got.isum, want_isum) << gguf::type_name(c.type) << " seed " << seed << " block " << b;
      ASSERT_EQ(got.summs, want_summs) << gguf::type_name(c.type) << " seed " << seed << " block " << b;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 8u * kBlocks);
}

// Every lo / hi byte the K-quants produce must be a valid int8 operand of the mma as it stands
// (the mma reads bytes as signed): Q2_K's folded q·sc <= 45 and Q4_K's nibbles <= 15, mins <= 63.
TEST(MmaPiecesRange, KQuantWordsStayNonNegativeInt8) {
  for (const GgmlType t : {GgmlType::kQ2_K, GgmlType::kQ4_K}) {
    const size_t bb = t == GgmlType::kQ2_K ? sizeof(quant::BlockQ2K) : sizeof(quant::BlockQ4K);
    std::vector<uint8_t> w(64 * bb);
    std::mt19937 rng(3);
    for (uint8_t& v : w) v = static_cast<uint8_t>(rng());  // any bytes: the decoders take all
    for (int b = 0; b < 64; ++b) {
      for (int G = 0; G < 8; ++G) {
        for (int lane = 0; lane < 4; ++lane) {
          const mma::MmaPiece pc =
              t == GgmlType::kQ2_K ? mma::q2_k_piece(&w[b * bb], G, lane) : mma::q4_k_piece(&w[b * bb], G, lane);
          for (const uint32_t word : {pc.lo, pc.hi, pc.min_lo, pc.min_hi})
            for (int i = 0; i < 4; ++i) ASSERT_LT((word >> (8 * i)) & 0xffu, 128u) << gguf::type_name(t);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, MmaPieces,
                         ::testing::Values(Case{GgmlType::kIQ2_XXS, sizeof(quant::BlockIQ2XXS)},
                                           Case{GgmlType::kQ2_K, sizeof(quant::BlockQ2K)},
                                           Case{GgmlType::kQ4_K, sizeof(quant::BlockQ4K)}),
                         [](const ::testing::TestParamInfo<Case>& i) { return std::string(gguf::type_name(i.param.type)); });

}  // namespace
}  // namespace ds4::cuda
