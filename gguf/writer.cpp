// gguf/writer.cpp — GGUF v3 writer: encodes metadata and the tensor directory in memory, then
// streams tensor data with pwrite at aligned offsets; unwritten regions are file holes.
//
// Invariants: the layout (tensor offsets, data start, file size) is a pure function of the
// added keys/tensors and the alignment, computed the same way by file_size() and write();
// chunks passed to fill callbacks never exceed kChunkBytes; all-zero chunks are not written
// (they stay holes), so sparse synthetic models cost little disk.
#include "gguf/writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstring>

#include "gguf/gguf.h"

namespace ds4::gguf {

namespace {

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  out.insert(out.end(), b, b + n);
}
template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof v);
}
void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

template <typename T>
std::vector<uint8_t> scalar_raw(T v) {
  std::vector<uint8_t> raw;
  put(raw, v);
  return raw;
}

template <typename T>
std::vector<uint8_t> array_raw(std::span<const T> v) {
  std::vector<uint8_t> raw(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(raw.data(), v.data(), raw.size());
  return raw;
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

bool all_zero(const uint8_t* p, size_t n) {
  // Word-at-a-time scan; the tail byte by byte.
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    if (w != 0) return false;
  }
  for (; i < n; ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

Status pwrite_all(int fd, const uint8_t* p, uint64_t n, uint64_t off, const std::string& path) {
  while (n > 0) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(n, 1ull << 30));
    const ssize_t w = ::pwrite(fd, p, want, static_cast<off_t>(off));
    if (w < 0) {
      if (errno == EINTR) continue;
      return resource_error("write to '%s' at offset %" PRIu64 " failed: %s", path.c_str(), off,
                            std::strerror(errno));
    }
    p += w;
    n -= static_cast<uint64_t>(w);
    off += static_cast<uint64_t>(w);
  }
  return Status();
}

// Chunk length for streaming a tensor: whole rows when a row fits in kChunkBytes, else whole
// blocks.
uint64_t chunk_bytes_for(GgmlType type, int64_t ne0) {
  const uint64_t block = type_block_bytes(type);
  const uint64_t row = static_cast<uint64_t>(ne0) / type_block_elems(type) * block;
  if (row <= Writer::kChunkBytes) return Writer::kChunkBytes / row * row;
  return std::max<uint64_t>(block, Writer::kChunkBytes / block * block);
}

}  // namespace

// ---- metadata ----

Status Writer::add_kv(std::string key, ValueType type, ValueType array_type, uint64_t count,
                      std::vector<uint8_t> raw) {
  if (key.empty()) return invalid_argument("GGUF writer: empty metadata key");
  if (key == kAlignmentKey) {
    if (type != ValueType::kU32) {
      return invalid_argument("GGUF writer: '%s' must be u32, got %s", kAlignmentKey,
                              value_type_name(type));
    }
    uint32_t a;
    std::memcpy(&a, raw.data(), 4);
    if (a == 0 || !std::has_single_bit(a) || a > (1u << 30)) {
      return invalid_argument("GGUF writer: alignment %" PRIu32
                              " is not a power of two in [1, 2^30]", a);
    }
    alignment_ = a;
  }
  if (!kv_keys_.insert(key).second) {
    return invalid_argument("GGUF writer: duplicate metadata key '%s'", key.c_str());
  }
  kvs_.push_back(Kv{std::move(key), type, array_type, count, std::move(raw)});
  return Status();
}

#define DS4_GGUF_SET_SCALAR(fn, T, VT)                          \
  Status Writer::fn(std::string k, T v) {                       \
    return add_kv(std::move(k), VT, VT, 0, scalar_raw<T>(v));   \
  }
DS4_GGUF_SET_SCALAR(set_u8, uint8_t, ValueType::kU8)
DS4_GGUF_SET_SCALAR(set_i8, int8_t, ValueType::kI8)
DS4_GGUF_SET_SCALAR(set_u16, uint16_t, ValueType::kU16)
DS4_GGUF_SET_SCALAR(set_i16, int16_t, ValueType::kI16)
DS4_GGUF_SET_SCALAR(set_u32, uint32_t, ValueType::kU32)
DS4_GGUF_SET_SCALAR(set_i32, int32_t, ValueType::kI32)
DS4_GGUF_SET_SCALAR(set_u64, uint64_t, ValueType::kU64)
DS4_GGUF_SET_SCALAR(set_i64, int64_t, ValueType::kI64)
DS4_GGUF_SET_SCALAR(set_f32, float, ValueType::kF32)
DS4_GGUF_SET_SCALAR(set_f64, double, ValueType::kF64)
#undef DS4_GGUF_SET_SCALAR

Status Writer::set_bool(std::string k, bool v) {
  return add_kv(std::move(k), ValueType::kBool, ValueType::kBool, 0,
                scalar_raw<uint8_t>(v ? 1 : 0));
}
Status Writer::set_string(std::string k, std::string_view v) {
  std::vector<uint8_t> raw;
  put_string(raw, v);
  return add_kv(std::move(k), ValueType::kString, ValueType::kString, 0, std::move(raw));
}

#define DS4_GGUF_SET_ARRAY(fn, T, VT)                                                 \
  Status Writer::fn(std::string k, std::span<const T> v) {                            \
    return add_kv(std::move(k), ValueType::kArray, VT, v.size(), array_raw<T>(v));    \
  }
DS4_GGUF_SET_ARRAY(set_array_u8, uint8_t, ValueType::kU8)
DS4_GGUF_SET_ARRAY(set_array_i8, int8_t, ValueType::kI8)
DS4_GGUF_SET_ARRAY(set_array_u16, uint16_t, ValueType::kU16)
DS4_GGUF_SET_ARRAY(set_array_i16, int16_t, ValueType::kI16)
DS4_GGUF_SET_ARRAY(set_array_u32, uint32_t, ValueType::kU32)
DS4_GGUF_SET_ARRAY(set_array_i32, int32_t, ValueType::kI32)
DS4_GGUF_SET_ARRAY(set_array_u64, uint64_t, ValueType::kU64)
DS4_GGUF_SET_ARRAY(set_array_i64, int64_t, ValueType::kI64)
DS4_GGUF_SET_ARRAY(set_array_f32, float, ValueType::kF32)
DS4_GGUF_SET_ARRAY(set_array_f64, double, ValueType::kF64)
#undef DS4_GGUF_SET_ARRAY

Status Writer::set_array_bool(std::string k, std::span<const bool> v) {
  std::vector<uint8_t> raw(v.size());
  for (size_t i = 0; i < v.size(); ++i) raw[i] = v[i] ? 1 : 0;
  return add_kv(std::move(k), ValueType::kArray, ValueType::kBool, v.size(), std::move(raw));
}

Status Writer::set_array_string(std::string k, std::span<const std::string_view> v) {
  size_t total = 0;
  for (std::string_view s : v) total += 8 + s.size();
  std::vector<uint8_t> raw;
  raw.reserve(total);
  for (std::string_view s : v) put_string(raw, s);
  return add_kv(std::move(k), ValueType::kArray, ValueType::kString, v.size(), std::move(raw));
}

Status Writer::set_array_string(std::string k, std::span<const std::string> v) {
  std::vector<std::string_view> views(v.begin(), v.end());
  return set_array_string(std::move(k), std::span<const std::string_view>(views));
}

Status Writer::set_alignment(uint32_t alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment) || alignment > (1u << 30)) {
    return invalid_argument("GGUF writer: alignment %" PRIu32
                            " is not a power of two in [1, 2^30]", alignment);
  }
  for (Kv& kv : kvs_) {
    if (kv.key == kAlignmentKey) {  // already present (always u32): update in place
      std::memcpy(kv.raw.data(), &alignment, 4);
      alignment_ = alignment;
      return Status();
    }
  }
  return set_u32(kAlignmentKey, alignment);
}

// ---- tensors ----

Status Writer::add_tensor_impl(Tensor t) {
  if (t.name.empty()) return invalid_argument("GGUF writer: empty tensor name");
  Expected<uint64_t> nb = tensor_nbytes(t.type, t.ne);
  if (!nb.ok()) {
    return Status(nb.status().code(),
                  "GGUF writer: tensor '" + t.name + "': " + nb.status().message());
  }
  t.nbytes = *nb;
  if (!t.bytes.empty() && t.bytes.size() != t.nbytes) {
    return invalid_argument("GGUF writer: tensor '%s': %zu data bytes given, %s %s needs %" PRIu64,
                            t.name.c_str(), t.bytes.size(), type_name(t.type),
                            t.ne.size() == 1 ? "vector" : "tensor", t.nbytes);
  }
  std::sort(t.ranges.begin(), t.ranges.end(),
            [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  uint64_t end = 0;
  for (const ByteRange& r : t.ranges) {
    if (r.offset > t.nbytes || r.size > t.nbytes - r.offset) {
      return invalid_argument("GGUF writer: tensor '%s': range [%" PRIu64 ", +%" PRIu64
                              ") outside its %" PRIu64 " bytes",
                              t.name.c_str(), r.offset, r.size, t.nbytes);
    }
    if (r.offset < end) {
      return invalid_argument("GGUF writer: tensor '%s': ranges overlap at byte %" PRIu64,
                              t.name.c_str(), r.offset);
    }
    end = r.offset + r.size;
  }
  if (!tensor_names_.insert(t.name).second) {
    return invalid_argument("GGUF writer: duplicate tensor name '%s'", t.name.c_str());
  }
  tensors_.push_back(std::move(t));
  return Status();
}

Status Writer::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                          std::span<const uint8_t> data) {
  Tensor t;
  t.name = std::move(name);
  t.type = type;
  t.ne = std::move(ne);
  if (data.empty()) {
    return invalid_argument("GGUF writer: tensor '%s': empty data span", t.name.c_str());
  }
  t.bytes.assign(data.begin(), data.end());
  return add_tensor_impl(std::move(t));
}

Status Writer::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                          FillFn fill) {
  if (!fill) return invalid_argument("GGUF writer: tensor '%s': null fill callback", name.c_str());
  Tensor t;
  t.name = std::move(name);
  t.type = type;
  t.ne = std::move(ne);
  t.fill = std::move(fill);
  // One range over the whole tensor; its size is known only after validation.
  t.ranges.push_back(ByteRange{0, 0});
  Status s = add_tensor_impl(std::move(t));
  if (s.ok()) tensors_.back().ranges[0].size = tensors_.back().nbytes;
  return s;
}

Status Writer::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                          TensorFill /*hole*/) {
  Tensor t;
  t.name = std::move(name);
  t.type = type;
  t.ne = std::move(ne);
  t.hole = true;
  return add_tensor_impl(std::move(t));
}

Status Writer::add_tensor_ranges(std::string name, GgmlType type, std::vector<int64_t> ne,
                                 std::vector<ByteRange> ranges, FillFn fill) {
  if (!fill && !ranges.empty()) {
    return invalid_argument("GGUF writer: tensor '%s': null fill callback", name.c_str());
  }
  Tensor t;
  t.name = std::move(name);
  t.type = type;
  t.ne = std::move(ne);
  t.fill = std::move(fill);
  t.ranges = std::move(ranges);
  t.hole = t.ranges.empty();
  return add_tensor_impl(std::move(t));
}

std::vector<ByteRange> Writer::outer_slices(uint64_t nbytes, int64_t n_outer,
                                            std::span<const int64_t> indices) {
  std::vector<ByteRange> out;
  if (n_outer <= 0) return out;
  const uint64_t slice = nbytes / static_cast<uint64_t>(n_outer);
  for (int64_t i : indices) {
    if (i < 0 || i >= n_outer) continue;  // out-of-range indices are ignored
    out.push_back(ByteRange{static_cast<uint64_t>(i) * slice, slice});
  }
  return out;
}

// ---- layout and output ----

uint64_t Writer::header_bytes() const {
  uint64_t n = 4 + 4 + 8 + 8;
  for (const Kv& kv : kvs_) {
    n += 8 + kv.key.size() + 4;
    if (kv.type == ValueType::kArray) n += 4 + 8;
    n += kv.raw.size();
  }
  for (const Tensor& t : tensors_) n += 8 + t.name.size() + 4 + 8 * t.ne.size() + 4 + 8;
  return n;
}

uint64_t Writer::data_offset() const { return align_up(header_bytes(), alignment_); }

uint64_t Writer::file_size() const {
  uint64_t off = 0;
  for (const Tensor& t : tensors_) off = align_up(off, alignment_) + t.nbytes;
  return data_offset() + align_up(off, alignment_);
}

Status Writer::write(const std::string& path) const {
  // Layout.
  std::vector<uint64_t> offsets(tensors_.size());
  uint64_t off = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    off = align_up(off, alignment_);
    offsets[i] = off;
    off += tensors_[i].nbytes;
  }
  const uint64_t data_off = data_offset();
  const uint64_t total = data_off + align_up(off, alignment_);

  // Header, metadata and directory, encoded in memory (small next to the data).
  std::vector<uint8_t> head;
  head.reserve(header_bytes());
  put<uint32_t>(head, kMagic);
  put<uint32_t>(head, kVersion);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kvs_.size());
  for (const Kv& kv : kvs_) {
    put_string(head, kv.key);
    put<uint32_t>(head, static_cast<uint32_t>(kv.type));
    if (kv.type == ValueType::kArray) {
      put<uint32_t>(head, static_cast<uint32_t>(kv.array_type));
      put<uint64_t>(head, kv.count);
    }
    put_bytes(head, kv.raw.data(), kv.raw.size());
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(head, static_cast<uint64_t>(d));
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, offsets[i]);
  }
  DS4_CHECK(head.size() == header_bytes());

  static std::atomic<uint64_t> counter{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
                          std::to_string(counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return resource_error("cannot create '%s': %s", tmp.c_str(), std::strerror(errno));
  }
  auto fail = [&](Status s) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return s;
  };
  Status s = pwrite_all(fd, head.data(), head.size(), 0, tmp);
  if (!s.ok()) return fail(s);

  std::vector<uint8_t> buf;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    const uint64_t base = data_off + offsets[i];
    if (!t.bytes.empty()) {
      s = pwrite_all(fd, t.bytes.data(), t.bytes.size(), base, tmp);
      if (!s.ok()) return fail(s);
      continue;
    }
    if (t.hole || !t.fill) continue;
    const uint64_t chunk = chunk_bytes_for(t.type, t.ne[0]);
    for (const ByteRange& r : t.ranges) {
      for (uint64_t pos = r.offset; pos < r.offset + r.size; pos += chunk) {
        const uint64_t n = std::min<uint64_t>(chunk, r.offset + r.size - pos);
        buf.assign(static_cast<size_t>(n), 0);
        t.fill(pos, std::span<uint8_t>(buf.data(), buf.size()));
        if (all_zero(buf.data(), buf.size())) continue;  // leave a hole
        s = pwrite_all(fd, buf.data(), n, base + pos, tmp);
        if (!s.ok()) return fail(s);
      }
    }
  }
  // Extends the file to its full size; everything not written reads as zeros (holes).
  if (::ftruncate(fd, static_cast<off_t>(total)) != 0) {
    return fail(resource_error("cannot size '%s' to %" PRIu64 " bytes: %s", tmp.c_str(), total,
                               std::strerror(errno)));
  }
  if (::close(fd) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return resource_error("closing '%s' failed: %s", tmp.c_str(), std::strerror(e));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int e = errno;
    ::unlink(tmp.c_str());
    return resource_error("cannot rename '%s' to '%s': %s", tmp.c_str(), path.c_str(),
                          std::strerror(e));
  }
  return Status();
}

}  // namespace ds4::gguf
