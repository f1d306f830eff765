// quant/iq2_tables.h — the constant tables of the IQ2_XXS format (ds4-architecture.md §7.5).
//
// Role: kIq2XxsGrid (256 grid points, 8 magnitudes each from {8, 25, 43}, byte b of entry
// = magnitude of weight b, LSB first) and kIq2Signs (128 sign patterns: bits 0..6 are free,
// bit 7 makes the popcount even, i.e. an even number of negative weights per 8). These are
// data of the public format; tests/quant cross-checks them bit for bit against the GGUF
// python package's IQ2_XXS dequantizer.
#pragma once

#include <cstdint>

namespace ds4::quant {

extern const uint64_t kIq2XxsGrid[256];  // [256] u64, 8 bytes of magnitudes each
extern const uint8_t kIq2Signs[128];     // [128] sign bytes: bit b set -> weight b negative

// The 8 signed weights (grid magnitude · ±1) of grid point `grid_index` under sign pattern
// kIq2Signs[sign_index & 127]. Exact small integers in [-43, 43].
inline void iq2_xxs_signed_values(uint8_t grid_index, uint32_t sign_index, int8_t out[8]) {
  const uint64_t g = kIq2XxsGrid[grid_index];
  const uint8_t s = kIq2Signs[sign_index & 127u];
  for (int b = 0; b < 8; ++b) {
    const int v = static_cast<int>((g >> (8 * b)) & 0xffu);
    out[b] = static_cast<int8_t>((s >> b) & 1u ? -v : v);
  }
}

}  // namespace ds4::quant
