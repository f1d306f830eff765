// gguf/gguf.h — GGUF v3 reader: mmap (or caller buffer), validated metadata and tensor index.
//
// Role: every model file a user gives us goes through File::open. The parser is a
// bounds-checked cursor over the bytes; any malformed input (truncation, bad magic/version,
// absurd counts or lengths, bad value types, nested arrays, bad dims/types, misaligned,
// out-of-range or overlapping tensor data, duplicate names/keys, bad alignment) yields ONE
// Status (kCorrupt, or kUnsupported for well-formed but unsupported content) that names the
// key/tensor, the byte offset and expected vs actual. Nothing aborts, nothing reads out of
// bounds, and no allocation is sized by a file count beyond what the remaining bytes allow.
//
// Invariants after a successful parse:
//  - tensor data is never copied: TensorInfo::data points into the mapping / caller buffer,
//    and [data, data + nbytes) lies inside the file; tensor ranges do not overlap;
//  - TensorInfo::offset is a multiple of alignment(); data_offset() is too;
//  - strings (keys, names, string values) are views/copies of valid in-file bytes (not
//    checked for UTF-8: GGUF says UTF-8 but the tokenizer decides what to do with bytes);
//  - pointers and string_views returned by accessors live as long as the File (and, for
//    from_bytes, as long as the caller's buffer).
//
// Choices (documented for the malformed-file tests):
//  - n_dims must be 1..4 (GGML_MAX_DIMS); 0 is kCorrupt, 5..8 kUnsupported, > 8 kCorrupt.
//  - arrays of arrays are rejected (kUnsupported): GGML's own reader does not accept them.
//  - general.alignment, if present, must be u32, a power of two, and <= 1 GiB.
//  - tensors need not be packed in order; only alignment, range and non-overlap are checked.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "gguf/types.h"

namespace ds4::gguf {

inline constexpr uint32_t kMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint32_t kVersion = 3;
inline constexpr uint32_t kDefaultAlignment = 32;
inline constexpr uint32_t kMaxDims = 4;
inline constexpr const char* kAlignmentKey = "general.alignment";

// One metadata entry. Values are not decoded up front: `data` points at the raw little-endian
// payload inside the file, and the typed getters below decode on demand.
struct KeyValue {
  std::string key;
  ValueType type = ValueType::kU8;
  ValueType array_type = ValueType::kU8;  // item type when type == kArray (else == type)
  uint64_t array_count = 0;               // items when type == kArray (else 0)
  const uint8_t* data = nullptr;          // scalar: its bytes; string: its bytes (no length);
                                          // array of scalars: the packed items
  uint64_t data_bytes = 0;                // bytes at `data` (for string arrays: all items,
                                          // including their u64 length prefixes)
  std::string_view str;                   // type == kString: the value
  std::vector<std::string_view> strings;  // type == kArray && array_type == kString: items
  uint64_t file_offset = 0;               // byte offset of this entry's key in the file

  bool is_array() const { return type == ValueType::kArray; }
  // "u32", "string", "array[string]" — for messages.
  std::string type_string() const;
};

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  uint32_t n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ne[0] innermost; unused dims are 1
  uint64_t offset = 0;                     // relative to data start (File::data_offset())
  uint64_t nbytes = 0;
  const uint8_t* data = nullptr;           // base() + data_offset() + offset

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  // Bytes of one row (ne[0] elements).
  uint64_t row_bytes() const;
  std::span<const uint8_t> bytes() const { return {data, static_cast<size_t>(nbytes)}; }
  // "[4096, 129280]"
  std::string shape_string() const;
};

class File {
 public:
  // mmaps `path` read-only (MAP_PRIVATE) and parses it. Tensor data is never copied.
  static Expected<std::unique_ptr<File>> open(const std::string& path);
  // Parses a caller-owned buffer, which must outlive the File (fuzzer, tests).
  static Expected<std::unique_ptr<File>> from_bytes(std::span<const uint8_t> bytes);

  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  const std::string& path() const { return path_; }  // "" for from_bytes
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }
  const uint8_t* base() const { return base_; }

  // ---- metadata ----
  const std::vector<KeyValue>& metadata() const { return kvs_; }
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const KeyValue* find(std::string_view key) const;

  // Typed getters: kNotFound when the key is absent; kCorrupt naming the key, expected and
  // actual type (or the value that does not fit) when it cannot be converted losslessly.
  // Integer getters accept any integer type whose value fits; get_f32 accepts f32 and f64
  // (narrowed); get_f64 accepts f32/f64. Array getters apply the same rule to every item.
  Expected<uint8_t> get_u8(std::string_view key) const;
  Expected<uint32_t> get_u32(std::string_view key) const;
  Expected<uint64_t> get_u64(std::string_view key) const;
  Expected<int32_t> get_i32(std::string_view key) const;
  Expected<int64_t> get_i64(std::string_view key) const;
  Expected<float> get_f32(std::string_view key) const;
  Expected<double> get_f64(std::string_view key) const;
  Expected<bool> get_bool(std::string_view key) const;
  Expected<std::string> get_string(std::string_view key) const;
  Expected<std::vector<uint32_t>> get_array_u32(std::string_view key) const;
  Expected<std::vector<int32_t>> get_array_i32(std::string_view key) const;
  Expected<std::vector<int64_t>> get_array_i64(std::string_view key) const;
  Expected<std::vector<float>> get_array_f32(std::string_view key) const;
  Expected<std::vector<std::string>> get_array_string(std::string_view key) const;
  // Zero-copy variant for big vocabularies: views into the file, valid while the File lives.
  Expected<std::span<const std::string_view>> get_array_string_views(std::string_view key) const;

  // Optional variants: the default when the key is absent, an error when it is present with
  // an unconvertible type.
  Expected<uint32_t> get_u32_or(std::string_view key, uint32_t def) const;
  Expected<uint64_t> get_u64_or(std::string_view key, uint64_t def) const;
  Expected<int32_t> get_i32_or(std::string_view key, int32_t def) const;
  Expected<float> get_f32_or(std::string_view key, float def) const;
  Expected<bool> get_bool_or(std::string_view key, bool def) const;
  Expected<std::string> get_string_or(std::string_view key, std::string def) const;

  // ---- tensors (file order) ----
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;

 private:
  File() = default;
  friend class Parser;

  std::string path_;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  void* map_ = nullptr;  // non-null when we own an mmap of size_ bytes
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
  // Keys are views of in-file bytes (stable for the File's life).
  std::unordered_map<std::string_view, uint32_t> kv_index_;
  std::unordered_map<std::string_view, uint32_t> tensor_index_;
};

}  // namespace ds4::gguf
