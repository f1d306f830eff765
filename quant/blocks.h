// quant/blocks.h — the GGML block layouts ds4cpp reads and writes (ds4-architecture.md §7).
//
// Role: byte-exact structs for Q8_0, Q2_K, Q4_K, IQ2_XXS, Q8_K and the f32-scaled Q8_0
// activation block. Weight tensors are mmapped and reinterpreted as arrays of these structs,
// so each size is pinned by a static_assert and every field is little-endian as on disk
// (this project targets little-endian hosts only).
// Invariants: no padding; f16 fields are raw IEEE-half bit patterns (convert with
// quant/half.h); block element counts are kQK8_0 = 32 and kQKK = 256.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ds4::quant {

inline constexpr int kQK8_0 = 32;   // elements per Q8_0 block
inline constexpr int kQKK = 256;    // elements per K-quant / IQ2_XXS / Q8_K super-block

// Q8_0 weights (GGML type 8): w[i] = f16(d) · qs[i].
struct BlockQ8_0 {
  uint16_t d;          // f16 scale
  int8_t qs[kQK8_0];   // [32] quants
};
static_assert(sizeof(BlockQ8_0) == 34, "BlockQ8_0 must be 34 bytes");

// Q8_0 *activation* block (in memory only, never on disk): ds4 keeps the activation scale in
// f32 (§3.3), unlike the on-disk f16 of BlockQ8_0. x[i] ≈ d · qs[i].
struct BlockQ8_0Act {
  float d;             // f32 scale = amax / 127
  int8_t qs[kQK8_0];   // [32] quants
};
static_assert(sizeof(BlockQ8_0Act) == 36, "BlockQ8_0Act must be 36 bytes");

// Q2_K (GGML type 10), 256 weights. Element order (§7.3): for half n∈{0,1}, shift j∈{0..3},
// l∈{0..31}: element 128n+32j+l has quant (qs[32n+l] >> 2j) & 3 and sub-block
// sb = 8n+2j+(l>=16); w = f16(d)·(scales[sb]&15)·q − f16(dmin)·(scales[sb]>>4).
struct BlockQ2K {
  uint8_t scales[kQKK / 16];  // [16] low nibble scale, high nibble min
  uint8_t qs[kQKK / 4];       // [64] 2-bit quants
  uint16_t d;                 // f16 super-block scale for scales
  uint16_t dmin;              // f16 super-block scale for mins
};
static_assert(sizeof(BlockQ2K) == 84, "BlockQ2K must be 84 bytes");

// Q4_K (GGML type 12), 256 weights in 8 sub-blocks of 32 with 6-bit scale and min each.
// Unpack with q4_k_scale_min(); element order (§7.4): chunk c=0..3 uses qs[32c..32c+31];
// low nibble -> element 64c+l (sub-block 2c), high nibble -> 64c+32+l (sub-block 2c+1).
// w = (f16(d)·sc)·q − f16(dmin)·m.
struct BlockQ4K {
  uint16_t d;              // f16 scale for the 6-bit scales
  uint16_t dmin;           // f16 scale for the 6-bit mins
  uint8_t scales[12];      // 8 scales + 8 mins, 6 bits each, packed
  uint8_t qs[kQKK / 2];    // [128] 4-bit quants
};
static_assert(sizeof(BlockQ4K) == 144, "BlockQ4K must be 144 bytes");

// IQ2_XXS (GGML type 16), 256 weights in 8 groups of 32. Group g is the two little-endian
// u32 words a0 = qs[4g]|qs[4g+1]<<16 (4 grid indices, one byte per 8 weights) and
// a1 = qs[4g+2]|qs[4g+3]<<16 (bits 7k..7k+6: sign index of sub-chunk k; bits 28..31: ls).
// w = ((f16(d)·(0.5+ls))·0.25)·grid_byte·(±1)   (§7.5, see quant/iq2_tables.h).
struct BlockIQ2XXS {
  uint16_t d;              // f16 scale
  uint16_t qs[kQKK / 8];   // [32] = 8 groups × (a0, a1) as u16 pairs
};
static_assert(sizeof(BlockIQ2XXS) == 66, "BlockIQ2XXS must be 66 bytes");

// Q8_K (GGML type 15): the activation format for Q2_K / Q4_K / IQ2_XXS expert dots (§3.4).
// x[i] ≈ d · qs[i]; bsums[j] = Σ qs[16j .. 16j+15]. d is f32 and NEGATIVE when the
// block's largest-|x| element is positive (ds4's sign convention, kept bit for bit).
struct BlockQ8K {
  float d;                   // f32 scale
  int8_t qs[kQKK];           // [256] quants
  int16_t bsums[kQKK / 16];  // [16] sums of 16 consecutive quants
};
static_assert(sizeof(BlockQ8K) == 292, "BlockQ8K must be 292 bytes");

// Q4_K 6-bit scale/min of sub-block j (0..7) from the packed 12 bytes (§7.4).
inline void q4_k_scale_min(int j, const uint8_t* scales, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4));
  }
}

}  // namespace ds4::quant
