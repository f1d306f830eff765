// quant/kv_sim.h — low-precision round-trip simulations of the DS4 graph (§3.6, §3.7).
//
// Role: the FP8-E4M3 round trip applied to the non-RoPE part of every KV row, and the
// indexer QAT (Hadamard-128 then FP4-E2M1 round trip). Values stay f32; only their precision
// changes. Exactly per ds4-architecture.md: power-of-two block scales 2^ceil(log2(amax / vmax))
// (the exact ceil, core/detmath.h's ceil_log2_f32, not libm's rounded log2f), clamp, nearest
// representable magnitude by absolute difference with exact ties to the EVEN table index, x = (sign·value)·scale with
// sign = (v < 0 ? -1 : +1) (so -0.0 comes back as +0.0).
// The indexer rows are stored in FP4 form (fp4_row_bytes below) and the compressed KV rows in
// FP8 form (fp8_row_bytes): the codes and block exponents of those round trips, written by the
// same pass, which decode to exactly the f16 rows' values.
// Invariants: in-place, no allocation (but fp4_value_table's one table); results depend only on the row itself.
#pragma once

#include <cstdint>

namespace ds4::quant {

inline constexpr int kFp8BlockSize = 64;       // KV FP8 block (scale per 64 values)
inline constexpr float kE4M3Max = 448.0f;      // largest finite E4M3FN magnitude
inline constexpr int kE4M3Count = 127;         // table indices 0..126 (127 = NaN, unused)
inline constexpr int kFp4BlockSize = 32;       // indexer FP4 block
inline constexpr float kE2M1Max = 6.0f;
inline constexpr int kHadamardDim = 128;
inline constexpr float kHadamardScale = 0.08838834764831845f;  // 1/sqrt(128) in f32
inline constexpr float kFp4MinAmax = 7.052966104933725e-38f;
inline constexpr float kFp8MinAmax = 1.0e-4f;

// E4M3FN magnitude of table index i (0..126): e = i>>3, m = i&7;
// m·2^-9 if e == 0 else (1 + m/8)·2^(e-7). Monotonic in i.
float e4m3_value(int i);
// Nearest E4M3FN value to v (sign kept as (v<0 ? -1 : 1)·value), |v| clamped to 448 first;
// exact ties go to the even index.
float e4m3_nearest(float v);
// FP8 round trip of x[0 .. n_leading) in blocks of 64 (n_leading % 64 == 0; ds4 passes
// head_dim − n_rot = 448 for the 512-wide KV rows). Elements past n_leading are untouched.
void fp8_e4m3_roundtrip(float* x, int n_leading);

// FP8 store of a compressed KV row of head_dim values whose last n_rot are the RoPE dims
// (lead = head_dim − n_rot, lead % 64 == 0), fp8_row_bytes(head_dim, n_rot) bytes:
//   [0, lead)                 element i's code: (sign < 0) << 7 | E4M3 index (0..126);
//   [lead, lead + lead/64)    block b's exponent byte: k + 127 of its scale 2^k (105 .. 255 for
//                             the round trip's scales, amax >= 1e-4; 255 = the inf scale of a
//                             block holding ±inf);
//   a zero byte when that ends odd (fp8_rope_offset is even: the f16 dims stay 2-aligned);
//   [fp8_rope_offset(lead), + 2·n_rot)  the RoPE dims as f16 bits (quant::f32_to_f16).
// Lossless for the compressed rows' f16 form: element i < lead decodes to
// f16_round((sign·e4m3_value(index))·ldexpf(1, byte − 127)), exactly the f16 row's value (the
// round trip's own expression, then the f16 store's rounding); a RoPE dim to its f16 value.
// All-zero bytes decode to +0.0. Flash (512, 64): 584 bytes instead of 1,024 as f16.
constexpr int fp8_rope_offset(int lead) { return (lead + lead / kFp8BlockSize + 1) & ~1; }
constexpr int fp8_row_bytes(int head_dim, int n_rot) { return fp8_rope_offset(head_dim - n_rot) + 2 * n_rot; }
// fp8_e4m3_roundtrip(x, head_dim − n_rot) (the same values, bit for bit) that also writes the
// row's FP8 store (the RoPE dims of x, untouched, as f16).
void fp8_kv_row_store(float* x, int head_dim, int n_rot, uint8_t* store);
// The stored value of code (0..255) under exponent byte exp_byte (0..255), as above. Index 127
// (E4M3FN's NaN, never written) decodes as the formula's 480·2^k.
float fp8_stored_value(int code, int exp_byte);
// The head_dim values of a store (store 2-byte aligned, as every row of an array of stores is).
void fp8_row_decode(const uint8_t* store, int head_dim, int n_rot, float* out);

// E2M1 magnitudes {0, .5, 1, 1.5, 2, 3, 4, 6} by index 0..7.
float e2m1_value(int i);
// Nearest E2M1 value to v (|v| clamped to 6), ties to the even index, sign as above.
float e2m1_nearest(float v);
// FP4 round trip of x[0..n) in blocks of 32 (n % 32 == 0).
void fp4_e2m1_roundtrip_row(float* x, int n);

// FP4 store of an indexer row of n values (n % 32 == 0), fp4_row_bytes(n) bytes: n/2 code
// bytes (element 2j in the low nibble of byte j, 2j+1 in the high one; code = (sign < 0) << 3
// | E2M1 index) then n/32 exponent bytes (block b's scale 2^k as k + 127: 1 .. 255, 255 for
// the inf scale of a block holding ±inf). Lossless for the indexer's f16 rows: the value of
// (code, byte) is f16_round((sign·e2m1_value(index))·ldexpf(1, byte − 127)), exactly the f16
// row value of that element (the round trip's own expression, then the f16 store's rounding).
// All-zero bytes decode to +0.0.
constexpr int fp4_row_bytes(int n) { return n / 2 + n / kFp4BlockSize; }
// fp4_e2m1_roundtrip_row(x, n) (the same values, bit for bit) that also writes the store.
void fp4_e2m1_roundtrip_row_store(float* x, int n, uint8_t* store);
// The stored value of code (0..15) under exponent byte exp_byte (0..255), as above.
float fp4_stored_value(int code, int exp_byte);
// [256 exponent bytes][16 codes] of fp4_stored_value, built once (thread-safe).
const float* fp4_value_table();
// The n values of a store (table = fp4_value_table()).
void fp4_row_decode(const uint8_t* store, int n, float* out, const float* table);

// Unnormalized fast Walsh–Hadamard transform over 128 values (strides 1, 2, ..., 64; each
// butterfly writes (a+b, a−b)), then every value multiplied by kHadamardScale.
// Applying it twice returns x up to rounding (H·H = I with this scale).
void hadamard128_inplace(float* x);

// Indexer QAT of one 128-wide row: hadamard128_inplace then fp4_e2m1_roundtrip_row(x, 128).
void indexer_qat_row(float* x128);
// Indexer QAT of a row of n (multiple of 128) values, each 128 as indexer_qat_row, writing
// the FP4 store of the whole row too (fp4_row_bytes(n) bytes).
void indexer_qat_row_store(float* x, int n, uint8_t* store);

}  // namespace ds4::quant
