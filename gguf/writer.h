// gguf/writer.h — GGUF v3 writer with streamed tensor data and file holes.
//
// Role: builds GGUF files for tests, the synthetic-model generator (ds4-gguf generate) and
// quantization tools. Metadata keys keep insertion order; duplicate keys and tensor names are
// rejected when added. Tensor data comes from (a) a byte span (copied when added), (b) a
// streaming callback that fills the tensor chunk by chunk, so an 80+ GB logical file never
// sits in memory, (c) kHole: the region is left as a file hole that reads as zeros and costs
// no disk, or (d) a callback restricted to a list of byte ranges, the rest being holes (for
// 3-D expert tensors where only some experts are filled).
//
// Invariants of the written file: version 3; general.alignment written when != 32; the data
// section starts at a multiple of the alignment; each tensor starts at an aligned offset in
// insertion order; padding is zero (holes); the file appears atomically (temp file in the
// same folder, then rename), and a failed write leaves no temp file behind.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/status.h"
#include "gguf/types.h"

namespace ds4::gguf {

// Fills `out` with the tensor bytes [byte_offset, byte_offset + out.size()) (offsets relative
// to the tensor start). Chunks are visited in increasing order and are at most
// Writer::kChunkBytes long. The chunk length is a whole number of rows when a row (ne[0]
// elements) fits in kChunkBytes, else a whole number of blocks; chunks start at the tensor
// start (or, for add_tensor_ranges, at each range start) plus multiples of that length, so
// they start on row/block boundaries whenever the ranges do. Chunks the callback leaves
// all-zero are not written (they stay holes). Called on the thread that runs write().
using FillFn = std::function<void(uint64_t byte_offset, std::span<uint8_t> out)>;

enum class TensorFill { kHole };

// A byte range inside one tensor's data.
struct ByteRange {
  uint64_t offset = 0;
  uint64_t size = 0;
};

class Writer {
 public:
  static constexpr uint64_t kChunkBytes = 8ull << 20;

  Writer() = default;

  // Scalars. Each returns kInvalidArgument for a duplicate or empty key.
  Status set_u8(std::string key, uint8_t v);
  Status set_i8(std::string key, int8_t v);
  Status set_u16(std::string key, uint16_t v);
  Status set_i16(std::string key, int16_t v);
  Status set_u32(std::string key, uint32_t v);  // "general.alignment" also sets the alignment
  Status set_i32(std::string key, int32_t v);
  Status set_u64(std::string key, uint64_t v);
  Status set_i64(std::string key, int64_t v);
  Status set_f32(std::string key, float v);
  Status set_f64(std::string key, double v);
  Status set_bool(std::string key, bool v);
  Status set_string(std::string key, std::string_view v);

  // Arrays (may be empty).
  Status set_array_u8(std::string key, std::span<const uint8_t> v);
  Status set_array_i8(std::string key, std::span<const int8_t> v);
  Status set_array_u16(std::string key, std::span<const uint16_t> v);
  Status set_array_i16(std::string key, std::span<const int16_t> v);
  Status set_array_u32(std::string key, std::span<const uint32_t> v);
  Status set_array_i32(std::string key, std::span<const int32_t> v);
  Status set_array_u64(std::string key, std::span<const uint64_t> v);
  Status set_array_i64(std::string key, std::span<const int64_t> v);
  Status set_array_f32(std::string key, std::span<const float> v);
  Status set_array_f64(std::string key, std::span<const double> v);
  Status set_array_bool(std::string key, std::span<const bool> v);
  Status set_array_string(std::string key, std::span<const std::string> v);
  Status set_array_string(std::string key, std::span<const std::string_view> v);

  // Sets general.alignment (u32); must be a power of two in [1, 1 GiB]. Default 32 (then the
  // key is not written unless set explicitly).
  Status set_alignment(uint32_t alignment);
  uint32_t alignment() const { return alignment_; }

  // Tensors, in file order. ne: 1..4 dims, ne[0] innermost, each > 0, ne[0] a multiple of
  // the type's block size. Errors name the tensor.
  // (a) bytes, copied now; data.size() must equal the tensor's byte size.
  Status add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                    std::span<const uint8_t> data);
  // (b) streamed: `fill` is called during write() (see FillFn for chunking).
  Status add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, FillFn fill);
  // (c) hole: reads back as zeros, costs no disk blocks.
  Status add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, TensorFill hole);
  // (d) only `ranges` (tensor-relative bytes; any order, must not overlap, must lie inside
  // the tensor) are filled via `fill` (same chunking rules, byte_offset tensor-relative);
  // the rest is holes. Use outer_slices() for "experts {3, 7} of a [.., .., n_expert] tensor".
  Status add_tensor_ranges(std::string name, GgmlType type, std::vector<int64_t> ne,
                           std::vector<ByteRange> ranges, FillFn fill);

  // Byte ranges of the given indices along the outermost used dim of a tensor whose bytes are
  // `nbytes` and whose outermost dim has `n_outer` entries (e.g. expert e of a 3-D expert
  // tensor is bytes [e * nbytes / n_outer, (e + 1) * nbytes / n_outer)).
  static std::vector<ByteRange> outer_slices(uint64_t nbytes, int64_t n_outer,
                                             std::span<const int64_t> indices);

  size_t n_tensors() const { return tensors_.size(); }
  size_t n_kv() const { return kvs_.size(); }
  // Total file size write() will produce (header, directory, padding and data).
  uint64_t file_size() const;

  // Writes everything to `path` (temp file + rename). Can be called more than once.
  Status write(const std::string& path) const;

 private:
  struct Kv {
    std::string key;
    ValueType type = ValueType::kU8;
    ValueType array_type = ValueType::kU8;
    uint64_t count = 0;            // arrays only
    std::vector<uint8_t> raw;  // encoded value exactly as in the file (after the type u32)
  };
  struct Tensor {
    std::string name;
    GgmlType type = GgmlType::kF32;
    std::vector<int64_t> ne;
    uint64_t nbytes = 0;
    std::vector<uint8_t> bytes;        // kind (a)
    FillFn fill;                       // kinds (b) and (d)
    std::vector<ByteRange> ranges;     // kind (d) (sorted), or one full range for (b)
    bool hole = false;                 // kind (c)
  };

  Status add_kv(std::string key, ValueType type, ValueType array_type, uint64_t count,
                std::vector<uint8_t> raw);
  Status add_tensor_impl(Tensor t);
  uint64_t header_bytes() const;
  uint64_t data_offset() const;

  std::vector<Kv> kvs_;
  std::unordered_set<std::string> kv_keys_;
  std::vector<Tensor> tensors_;
  std::unordered_set<std::string> tensor_names_;
  uint32_t alignment_ = 32;
};

}  // namespace ds4::gguf
