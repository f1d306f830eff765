// gguf/types.cpp — tensor byte-size computation and metadata value-type names.
// Invariant: tensor_nbytes never overflows silently; every error names the offending value.
#include "gguf/types.h"

#include <cinttypes>

namespace ds4::gguf {

Expected<uint64_t> tensor_nbytes(GgmlType type, std::span<const int64_t> ne) {
  const GgmlTypeTraits& tr = type_traits(type);
  if (!tr.known) {
    return unsupported("unknown ggml type %" PRIu32 " (known: 0..%" PRIu32 " except removed ones)",
                       static_cast<uint32_t>(type), kGgmlTypeCount - 1);
  }
  if (ne.empty() || ne.size() > 4) {
    return corrupt("%zu dims, expected 1..4", ne.size());
  }
  int64_t n = 1;
  for (size_t i = 0; i < ne.size(); ++i) {
    if (ne[i] <= 0) return corrupt("ne[%zu] = %" PRId64 ", expected > 0", i, ne[i]);
    if (__builtin_mul_overflow(n, ne[i], &n)) {
      return corrupt("element count overflows int64 at ne[%zu] = %" PRId64, i, ne[i]);
    }
  }
  if (ne[0] % tr.block_elems != 0) {
    return corrupt("ne[0] = %" PRId64 " is not a multiple of the %s block size %" PRIu32, ne[0],
                   tr.name, tr.block_elems);
  }
  const uint64_t blocks = static_cast<uint64_t>(n) / tr.block_elems;
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(tr.block_bytes), &bytes) ||
      bytes > static_cast<uint64_t>(INT64_MAX)) {
    return corrupt("byte size of %" PRId64 " %s elements overflows int64", n, tr.name);
  }
  return bytes;
}

const char* value_type_name(ValueType t) {
  static const char* const kNames[kValueTypeCount] = {"u8",  "i8",     "u16",   "i16", "u32",
                                                      "i32", "f32",    "bool",  "string",
                                                      "array", "u64",  "i64",   "f64"};
  const uint32_t i = static_cast<uint32_t>(t);
  return i < kValueTypeCount ? kNames[i] : "invalid";
}

uint32_t value_type_size(ValueType t) {
  switch (t) {
    case ValueType::kU8:
    case ValueType::kI8:
    case ValueType::kBool: return 1;
    case ValueType::kU16:
    case ValueType::kI16: return 2;
    case ValueType::kU32:
    case ValueType::kI32:
    case ValueType::kF32: return 4;
    case ValueType::kU64:
    case ValueType::kI64:
    case ValueType::kF64: return 8;
    default: return 0;
  }
}

}  // namespace ds4::gguf
