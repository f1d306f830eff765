// backend/cuda/mma_pieces_hd.h — how the routed experts' quantized blocks feed an int8 tensor-core
// mma (m16n8k32), as host+device (DS4_HD) functions: moe_rows.cu's tensor-core kernel runs
// them, and tests/cuda/mma_pieces_hd_test.cpp checks them against quant/dot's exact block sums
// on the host (no GPU needed).
//
// Role: for weight row block p (one super-block of 256), 32-element group G (0..7) and mma
// lane column t (0..3), an MmaPiece holds the two int8 words lane t supplies for the row: lo
// for the mma's k slots 4t..4t+3 and hi for 16+4t..16+4t+3. The activation words of the same
// lane are the Q8_K quants at group offsets act_off0 / act_off1 (4 each). The mma's k order is
// free (its sum is exact): the K-quants keep the natural order (slot k = element k), IQ2_XXS
// permutes it (slot 16·r + 4·t + i = element 8·t + 4·r + i), so its lane decodes ONE grid entry
// (elements 8t..8t+7), not halves of two. Per format (quant/dot.h's integer parts):
//   IQ2_XXS: isum = Σ_G scale_G · mma_G (each group's mma from 0); no mins.
//   Q2_K:    the 4-bit scales are folded into lo / hi (q·sc <= 45 fits int8), scale = 1, so
//            isum = Σ_G mma_G; mins words (4 equal bytes, the sub-block's min) give
//            summs = Σ_G mma(min_lo / min_hi, same activations) (Σ m·q8 over a sub-block = m·bsum).
//   Q4_K:    isum = Σ_G scale_G · mma_G; summs as Q2_K's.
// Invariants: integer arithmetic only; the loads are aligned on the device for staged blocks
// (IQ2_XXS 2 bytes, Q2_K 4 bytes from an even block start, Q4_K 4 bytes) and memcpy on the host;
// includes no CUDA header (host translation units include it too).
#pragma once

#include <cstdint>
#include <cstring>

#include "core/detmath.h"

namespace ds4::cuda::mma {

struct MmaPiece {
  uint32_t lo, hi;          // int8 × 4 each: k slots 4t..4t+3, 16+4t..16+4t+3
  int32_t scale;            // the group's integer scale (1 where folded into lo / hi)
  uint32_t min_lo, min_hi;  // int8 × 4 (equal bytes): the mins of lo's / hi's sub-block (0: none)
};

// An aligned little-endian word of a staged block (memcpy on the host).
template <class T>
DS4_HD uint32_t load_word(const uint8_t* p) {
#if defined(__CUDA_ARCH__)
  return *reinterpret_cast<const T*>(p);
#else
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
#endif
}
DS4_HD uint32_t load_u16(const uint8_t* p) { return load_word<uint16_t>(p); }
DS4_HD uint32_t load_u32(const uint8_t* p) { return load_word<uint32_t>(p); }

// Byte-wise negation of g where the mask byte is 0xff: (g ^ 0xff) + 1 = 256 - g, no carry out
// of a byte because every IQ2_XXS grid magnitude is >= 8 (never 0).
DS4_HD uint32_t negate_bytes(uint32_t g, uint32_t mask) { return (g ^ mask) + (mask & 0x01010101u); }

// IQ2_XXS (66 bytes: f16 d, then per group 4 grid indices and a u32 of 4 × 7 sign bits + a
// 4-bit scale). tables: moe_r1.h's iq2_decode_tables (quant::kIq2XxsGrid, then for sign pattern
// si the byte masks of quant::kIq2Signs[si]: byte b = 0xff where bit b is set).
DS4_HD MmaPiece iq2_xxs_piece(const uint8_t* p, int G, int t, const uint64_t* tables) {
  const uint8_t* q = p + 2 + 8 * G;
  const uint32_t aux1 = load_u16(q + 4) | (load_u16(q + 6) << 16);
  const uint64_t g = tables[q[t]];
  const uint64_t m = tables[256 + ((aux1 >> (7 * t)) & 127u)];
  MmaPiece r;
  r.lo = negate_bytes(static_cast<uint32_t>(g), static_cast<uint32_t>(m));
  r.hi = negate_bytes(static_cast<uint32_t>(g >> 32), static_cast<uint32_t>(m >> 32));
  r.scale = static_cast<int32_t>(2 * (aux1 >> 28) + 1);
  r.min_lo = r.min_hi = 0;
  return r;
}

// Q2_K (84 bytes: 16 scale bytes (low nibble scale, high nibble min), 64 quant bytes, f16 d,
// f16 dmin). Group G = 4n + j: elements 32G + l are bits 2j of qs[32n + l]; lo (l = 4t..4t+3)
// lies in sub-block 2G, hi (l + 16) in 2G + 1.
DS4_HD MmaPiece q2_k_piece(const uint8_t* p, int G, int t) {
  const uint8_t* qs = p + 16 + 32 * (G >> 2) + 4 * t;
  const int sh = 2 * (G & 3);
  const uint32_t ss = load_u16(p + 2 * G);  // the scale bytes of sub-blocks 2G, 2G + 1
  const uint32_t s0 = ss & 0xffu, s1 = ss >> 8;
  MmaPiece r;
  r.lo = ((load_u32(qs) >> sh) & 0x03030303u) * (s0 & 15u);
  r.hi = ((load_u32(qs + 16) >> sh) & 0x03030303u) * (s1 & 15u);
  r.scale = 1;
  r.min_lo = 0x01010101u * (s0 >> 4);
  r.min_hi = 0x01010101u * (s1 >> 4);
  return r;
}

// Q4_K (144 bytes: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins, 128 quant bytes). Group
// G = sub-block G: elements 32G + l are nibble G % 2 of qs[32(G / 2) + l] (quant::BlockQ4K);
// its scale and min as quant::q4_k_scale_min unpacks them.
DS4_HD MmaPiece q4_k_piece(const uint8_t* p, int G, int t) {
  const uint8_t* qs = p + 16 + 32 * (G >> 1) + 4 * t;
  const int sh = 4 * (G & 1);
  const uint8_t* s = p + 4;
  uint32_t sc, mn;
  if (G < 4) {
    sc = s[G] & 63u;
    mn = s[G + 4] & 63u;
  } else {
    sc = (s[G + 4] & 15u) | ((s[G - 4] >> 6) << 4);
    mn = (s[G + 4] >> 4) | ((s[G] >> 6) << 4);
  }
  MmaPiece r;
  r.lo = (load_u32(qs) >> sh) & 0x0f0f0f0fu;
  r.hi = (load_u32(qs + 16) >> sh) & 0x0f0f0f0fu;
  r.scale = static_cast<int32_t>(sc);
  r.min_lo = r.min_hi = 0x01010101u * mn;
  return r;
}

// The activation quants lane t pairs with lo / hi: offsets in the group's 32 (IQ2_XXS: its
// permuted order; the K-quants: the natural one).
DS4_HD int act_off0(bool permuted, int t) { return permuted ? 8 * t : 4 * t; }
DS4_HD int act_off1(bool permuted, int t) { return permuted ? 8 * t + 4 : 16 + 4 * t; }

}  // namespace ds4::cuda::mma
