// tests/unit/gguf/raw_gguf.h — hand-crafted GGUF byte streams for the malformed-file tests,
// the committed seed corpus (tests/gguf/corpus/, written by tests/gguf/make_corpus.cpp) and
// the fuzzer seeds.
//
// RawGguf appends little-endian fields one at a time, so a case can put any value anywhere
// (wrong magic, absurd counts, bad types). malformed_cases() is the one table of malformed
// files: each has a name (the corpus file is bad_<name>.gguf), the bytes, the error code the
// reader must return and substrings its message must contain. valid_cases() are small files
// that must parse (corpus ok_<name>.gguf).
#pragma once

#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"

namespace ds4::gguf::testing {

class RawGguf {
 public:
  RawGguf& u8(uint8_t v) { return put(v); }
  RawGguf& u32(uint32_t v) { return put(v); }
  RawGguf& u64(uint64_t v) { return put(v); }
  RawGguf& i64(int64_t v) { return put(v); }
  RawGguf& f32(float v) { return put(v); }
  RawGguf& str(std::string_view s) {
    u64(s.size());
    b_.insert(b_.end(), s.begin(), s.end());
    return *this;
  }
  RawGguf& zeros(size_t n) {
    b_.insert(b_.end(), n, 0);
    return *this;
  }
  RawGguf& pad_to(uint64_t a) {
    while (b_.size() % a) b_.push_back(0);
    return *this;
  }
  // magic, version, n_tensors, n_kv
  RawGguf& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = kVersion,
                  uint32_t magic = kMagic) {
    return u32(magic).u32(version).u64(n_tensors).u64(n_kv);
  }
  // key, type u32, value
  RawGguf& kv_u32(std::string_view key, uint32_t v) {
    return str(key).u32(static_cast<uint32_t>(ValueType::kU32)).u32(v);
  }
  RawGguf& kv_str(std::string_view key, std::string_view v) {
    return str(key).u32(static_cast<uint32_t>(ValueType::kString)).str(v);
  }
  // name, n_dims, ne..., type, offset
  RawGguf& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type,
                  uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  const std::vector<uint8_t>& bytes() const { return b_; }
  std::vector<uint8_t> take() { return std::move(b_); }
  size_t size() const { return b_.size(); }

 private:
  template <typename T>
  RawGguf& put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof v);
    b_.insert(b_.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  std::vector<uint8_t> b_;
};

constexpr uint32_t T_F32 = 0, T_F16 = 1, T_Q8_0 = 8, T_Q4_K = 12;
constexpr uint32_t V_U8 = 0, V_U32 = 4, V_BOOL = 7, V_STRING = 8, V_ARRAY = 9, V_U64 = 10;

struct MalformedCase {
  std::string name;
  std::vector<uint8_t> bytes;
  ErrorCode code;
  std::vector<std::string> expect;  // substrings of the error message
};

// gtest prints parameters with PrintTo; the name is what identifies a case.
inline void PrintTo(const MalformedCase& c, std::ostream* os) { *os << c.name; }

struct ValidCase {
  std::string name;
  std::vector<uint8_t> bytes;
};

// A well-formed file with two metadata entries and two tensors: the base many cases mutate.
inline std::vector<uint8_t> small_valid_file() {
  RawGguf r;
  r.header(2, 2).kv_str("general.architecture", "test").kv_u32("test.n", 7);
  r.tensor("a", {4}, T_F32, 0).tensor("b", {32, 2}, T_Q8_0, 32);
  r.pad_to(32);
  for (int i = 0; i < 4; ++i) r.f32(static_cast<float>(i));
  r.zeros(16);           // pad to 32
  r.zeros(2 * 34);       // b: 2 q8_0 blocks
  return r.take();
}

inline std::vector<MalformedCase> malformed_cases() {
  std::vector<MalformedCase> c;
  const ErrorCode C = ErrorCode::kCorrupt, U = ErrorCode::kUnsupported;
  auto add = [&](std::string name, RawGguf r, ErrorCode code, std::vector<std::string> expect) {
    c.push_back({std::move(name), r.take(), code, std::move(expect)});
  };
  // One tensor "t" of type `type` and dims `ne` at `offset`, with data of `data_bytes`.
  auto one_tensor = [](std::vector<uint64_t> ne, uint32_t type, uint64_t offset,
                       size_t data_bytes) {
    RawGguf r;
    r.header(1, 0).tensor("t", std::move(ne), type, offset).pad_to(32).zeros(data_bytes);
    return r;
  };

  add("empty", RawGguf(), C, {"too small"});
  add("short_magic", RawGguf().u8('G').u8('G'), C, {"too small"});
  add("bad_magic", RawGguf().header(0, 0, 3, 0x46554746), C, {"bad magic", "0x46554746"});
  add("version_2", RawGguf().header(0, 0, 2), U, {"version 2", "expected 3"});
  add("version_huge", RawGguf().header(0, 0, 0xffffffffu), U, {"version 4294967295"});
  add("version_big_endian", RawGguf().header(0, 0, 0x03000000u), U, {"big-endian"});
  add("truncated_header", RawGguf().u32(kMagic).u32(3).u64(0), C,
      {"truncated", "metadata count"});
  add("absurd_n_kv", RawGguf().header(0, 1ull << 60).zeros(64), C, {"n_kv", "absurd"});
  add("absurd_n_tensors", RawGguf().header(1ull << 40, 0).zeros(64), C,
      {"n_tensors", "absurd"});
  add("absurd_key_length", RawGguf().header(0, 1).u64(1ull << 62).zeros(16), C,
      {"key of metadata entry 0", "string length 4611686018427387904"});
  add("truncated_key", RawGguf().header(0, 1).str("abc").u32(V_U8), C,
      {"truncated", "scalar value"});
  add("invalid_value_type", RawGguf().header(0, 1).str("k.x").u32(13).u32(0), C,
      {"'k.x'", "invalid value type 13"});
  add("invalid_array_item_type",
      RawGguf().header(0, 1).str("k.arr").u32(V_ARRAY).u32(77).u64(0), C,
      {"'k.arr'", "invalid array item type 77"});
  add("nested_array",
      RawGguf().header(0, 1).str("k.nest").u32(V_ARRAY).u32(V_ARRAY).u64(1).u32(V_U8).u64(0),
      U, {"'k.nest'", "nested array"});
  add("absurd_array_count",
      RawGguf().header(0, 1).str("k.arr").u32(V_ARRAY).u32(V_U32).u64(1ull << 62).zeros(8), C,
      {"'k.arr'", "array count 4611686018427387904", "absurd"});
  add("absurd_string_array_count",
      RawGguf().header(0, 1).str("tok").u32(V_ARRAY).u32(V_STRING).u64(1ull << 40).zeros(8), C,
      {"'tok'", "array count 1099511627776"});
  add("string_array_item_too_long",
      RawGguf().header(0, 1).str("tok").u32(V_ARRAY).u32(V_STRING).u64(2).str("ok").u64(99),
      C, {"string array item", "string length 99"});
  add("absurd_string_value", RawGguf().header(0, 1).str("s").u32(V_STRING).u64(1000).zeros(4),
      C, {"string value", "string length 1000"});
  add("bad_bool", RawGguf().header(0, 1).str("flag").u32(V_BOOL).u8(2), C,
      {"'flag'", "bool value 2"});
  add("duplicate_key", RawGguf().header(0, 2).kv_u32("a.b", 1).kv_u32("a.b", 2), C,
      {"duplicate metadata key 'a.b'"});
  add("alignment_zero", RawGguf().header(0, 1).kv_u32(kAlignmentKey, 0), C,
      {"general.alignment", "= 0", "power of two"});
  add("alignment_not_pow2", RawGguf().header(0, 1).kv_u32(kAlignmentKey, 48), C,
      {"general.alignment", "= 48", "power of two"});
  add("alignment_wrong_type",
      RawGguf().header(0, 1).str(kAlignmentKey).u32(V_U64).u64(32), C,
      {"general.alignment", "type u64", "expected u32"});
  add("ndim_0", RawGguf().header(1, 0).str("t").u32(0).u32(T_F32).u64(0).zeros(16), C,
      {"'t'", "n_dims = 0"});
  add("ndim_5", one_tensor({1, 1, 1, 1, 1}, T_F32, 0, 32), U, {"'t'", "n_dims = 5"});
  add("ndim_huge", RawGguf().header(1, 0).str("t").u32(100000).zeros(64), C,
      {"'t'", "n_dims = 100000"});
  add("ne_zero", one_tensor({4, 0}, T_F32, 0, 32), C, {"'t'", "ne[1] = 0"});
  add("ne_negative", one_tensor({~0ull, 1}, T_F32, 0, 32), C, {"'t'", "ne[0] = -1"});
  add("ne_product_overflow", one_tensor({1ull << 32, 1ull << 32}, T_F32, 0, 32), C,
      {"'t'", "overflows"});
  add("nbytes_overflow", one_tensor({1ull << 62}, T_F32, 0, 32), C, {"'t'", "overflows"});
  add("unknown_type_4", one_tensor({32}, 4, 0, 32), U, {"'t'", "unknown ggml type 4"});
  add("unknown_type_huge", one_tensor({32}, 123456, 0, 32), U,
      {"'t'", "unknown ggml type 123456"});
  add("ne0_not_block_multiple", one_tensor({33}, T_Q8_0, 0, 64), C,
      {"'t'", "ne[0] = 33", "block size 32"});
  add("offset_unaligned", one_tensor({4}, T_F32, 16, 64), C,
      {"'t'", "offset 16", "alignment 32"});
  add("offset_out_of_range", one_tensor({4}, T_F32, 1ull << 20, 32), C,
      {"'t'", "past the end"});
  add("offset_near_u64_max", one_tensor({4}, T_F32, ~0ull - 31, 32), C,
      {"'t'", "past the end"});
  add("data_truncated", one_tensor({16}, T_F32, 0, 63), C,
      {"'t'", "64 bytes", "past the end"});
  {
    RawGguf r;
    r.header(2, 0).tensor("x", {16}, T_F32, 0).tensor("y", {8}, T_F32, 32).pad_to(32).zeros(96);
    add("overlapping_tensors", std::move(r), C, {"'x'", "'y'", "overlap"});
  }
  {
    RawGguf r;
    r.header(2, 0).tensor("w", {8}, T_F32, 0).tensor("w", {8}, T_F32, 32).pad_to(32).zeros(64);
    add("duplicate_tensor_name", std::move(r), C, {"duplicate tensor name 'w'"});
  }
  {
    RawGguf r;
    r.header(1, 0).str("t").u32(3).u64(4).u64(4).u8(0).u8(0).u8(0);  // ne[2] cut short
    add("truncated_directory", std::move(r), C, {"truncated", "tensor ne"});
  }
  {
    // A valid file cut in the middle of the second tensor's data.
    std::vector<uint8_t> b = small_valid_file();
    b.resize(b.size() - 10);
    RawGguf r;
    for (uint8_t x : b) r.u8(x);
    add("cut_in_data", std::move(r), C, {"'b'", "past the end"});
  }
  return c;
}

inline std::vector<ValidCase> valid_cases() {
  std::vector<ValidCase> v;
  v.push_back({"header_only", RawGguf().header(0, 0).take()});
  v.push_back({"small", small_valid_file()});
  {
    RawGguf r;
    r.header(1, 2).kv_u32(kAlignmentKey, 64).str("empty").u32(V_ARRAY).u32(V_STRING).u64(0);
    r.tensor("t", {256, 1}, T_Q4_K, 0).pad_to(64).zeros(144 + 48);
    v.push_back({"alignment_64_q4k", r.take()});
  }
  {
    // Tensors listed out of data order, with a gap between them.
    RawGguf r;
    r.header(2, 0).tensor("late", {8}, T_F16, 64).tensor("early", {4}, T_F32, 0).pad_to(32);
    r.zeros(96);
    v.push_back({"unordered_tensors", r.take()});
  }
  return v;
}

}  // namespace ds4::gguf::testing
