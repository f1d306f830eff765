// gguf/types.h — GGML tensor types and GGUF metadata value types.
//
// Role: the one table of GGML tensor types (numbering identical to GGML's, so files made by
// other tools read correctly) with each type's block geometry, and the GGUF metadata value
// type enum. Knows nothing about DS4 tensor names.
// Invariants: a "known" type has block_elems >= 1 and block_bytes >= 1; a tensor of type t
// occupies (n_elements / block_elems) * block_bytes bytes, and its ne[0] must be a multiple
// of block_elems (rows are whole blocks). Numbers with no entry (removed or future GGML
// types) are "unknown": every helper reports them instead of guessing a size.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/status.h"

namespace ds4::gguf {

// GGML tensor element types, numbered exactly as in GGML (values are stored in GGUF files).
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  // 4, 5: Q4_2 / Q4_3, removed from GGML — unknown.
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ8_1 = 9,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,
  kIQ2_XXS = 16,
  kIQ2_XS = 17,
  kIQ3_XXS = 18,
  kIQ1_S = 19,
  kIQ4_NL = 20,
  kIQ3_S = 21,
  kIQ2_S = 22,
  kIQ4_XS = 23,
  kI8 = 24,
  kI16 = 25,
  kI32 = 26,
  kI64 = 27,
  kF64 = 28,
  kIQ1_M = 29,
  kBF16 = 30,
  // 31..33: Q4_0_4_4 / Q4_0_4_8 / Q4_0_8_8, removed from GGML — unknown.
  kTQ1_0 = 34,
  kTQ2_0 = 35,
  // 36..38: IQ4_NL_4_4 / _4_8 / _8_8, removed from GGML — unknown.
  kMXFP4 = 39,
};

// One past the largest type number in the table.
inline constexpr uint32_t kGgmlTypeCount = 40;

struct GgmlTypeTraits {
  const char* name;      // GGML's lower-case name ("q8_0"); "unknown" when !known
  uint32_t block_elems;  // elements per block (1 for plain types); 0 when !known
  uint32_t block_bytes;  // bytes per block; 0 when !known
  bool known;
};

namespace detail {
constexpr std::array<GgmlTypeTraits, kGgmlTypeCount> make_type_table() {
  std::array<GgmlTypeTraits, kGgmlTypeCount> t{};
  for (auto& e : t) e = {"unknown", 0, 0, false};
  auto set = [&](GgmlType ty, const char* n, uint32_t be, uint32_t bb) {
    t[static_cast<uint32_t>(ty)] = {n, be, bb, true};
  };
  set(GgmlType::kF32, "f32", 1, 4);
  set(GgmlType::kF16, "f16", 1, 2);
  set(GgmlType::kQ4_0, "q4_0", 32, 18);
  set(GgmlType::kQ4_1, "q4_1", 32, 20);
  set(GgmlType::kQ5_0, "q5_0", 32, 22);
  set(GgmlType::kQ5_1, "q5_1", 32, 24);
  set(GgmlType::kQ8_0, "q8_0", 32, 34);
  set(GgmlType::kQ8_1, "q8_1", 32, 36);
  set(GgmlType::kQ2_K, "q2_K", 256, 84);
  set(GgmlType::kQ3_K, "q3_K", 256, 110);
  set(GgmlType::kQ4_K, "q4_K", 256, 144);
  set(GgmlType::kQ5_K, "q5_K", 256, 176);
  set(GgmlType::kQ6_K, "q6_K", 256, 210);
  set(GgmlType::kQ8_K, "q8_K", 256, 292);
  set(GgmlType::kIQ2_XXS, "iq2_xxs", 256, 66);
  set(GgmlType::kIQ2_XS, "iq2_xs", 256, 74);
  set(GgmlType::kIQ3_XXS, "iq3_xxs", 256, 98);
  set(GgmlType::kIQ1_S, "iq1_s", 256, 50);
  set(GgmlType::kIQ4_NL, "iq4_nl", 32, 18);
  set(GgmlType::kIQ3_S, "iq3_s", 256, 110);
  set(GgmlType::kIQ2_S, "iq2_s", 256, 82);
  set(GgmlType::kIQ4_XS, "iq4_xs", 256, 136);
  set(GgmlType::kI8, "i8", 1, 1);
  set(GgmlType::kI16, "i16", 1, 2);
  set(GgmlType::kI32, "i32", 1, 4);
  set(GgmlType::kI64, "i64", 1, 8);
  set(GgmlType::kF64, "f64", 1, 8);
  set(GgmlType::kIQ1_M, "iq1_m", 256, 56);
  set(GgmlType::kBF16, "bf16", 1, 2);
  set(GgmlType::kTQ1_0, "tq1_0", 256, 54);
  set(GgmlType::kTQ2_0, "tq2_0", 256, 66);
  set(GgmlType::kMXFP4, "mxfp4", 32, 17);
  return t;
}
}  // namespace detail

namespace detail {
inline constexpr GgmlTypeTraits kUnknownType = {"unknown", 0, 0, false};
}  // namespace detail

inline constexpr std::array<GgmlTypeTraits, kGgmlTypeCount> kGgmlTypeTable =
    detail::make_type_table();

// Traits of t; the "unknown" entry for numbers outside the table.
constexpr const GgmlTypeTraits& type_traits(GgmlType t) {
  const uint32_t i = static_cast<uint32_t>(t);
  return i < kGgmlTypeCount ? kGgmlTypeTable[i] : detail::kUnknownType;
}
constexpr bool type_known(GgmlType t) { return type_traits(t).known; }
constexpr const char* type_name(GgmlType t) { return type_traits(t).name; }
constexpr uint32_t type_block_elems(GgmlType t) { return type_traits(t).block_elems; }
constexpr uint32_t type_block_bytes(GgmlType t) { return type_traits(t).block_bytes; }

// Bytes of a tensor of type `type` with dims ne (ne[0] innermost, 1..4 dims). Errors
// (kUnsupported for unknown types, kCorrupt otherwise) on: unknown type, a dim <= 0, more than
// 4 dims, ne[0] not a multiple of the block size, element count or byte size overflowing
// int64. The message names the offending dim and values but not the tensor (callers add it).
Expected<uint64_t> tensor_nbytes(GgmlType type, std::span<const int64_t> ne);

// GGUF metadata value types (stored as u32 in the file).
enum class ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
inline constexpr uint32_t kValueTypeCount = 13;

// "u32", "string", "array", ...; "invalid" for numbers >= kValueTypeCount.
const char* value_type_name(ValueType t);
// Fixed byte size of a scalar value type (1,2,4,8); 0 for string, array and invalid types.
uint32_t value_type_size(ValueType t);

}  // namespace ds4::gguf

namespace ds4 {
using gguf::GgmlType;  // convenience: quant/ and model/ spell it ds4::GgmlType too
}  // namespace ds4
