// gguf/gguf.cpp — GGUF v3 parser (bounds-checked cursor), mmap lifetime, typed getters.
//
// Invariants: every read goes through Cursor, which checks the remaining byte count before
// touching memory; every allocation sized by a file count is bounded by the bytes left (each
// item needs a known minimum number of bytes); the first problem found ends the parse with
// one Status naming the key/tensor, the byte offset and expected vs actual.
#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cinttypes>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

namespace ds4::gguf {

static_assert(std::endian::native == std::endian::little,
              "GGUF is little-endian; this reader decodes with memcpy on a little-endian host");

namespace {

// Minimum bytes one metadata entry / tensor-directory entry can occupy; used to bound counts.
constexpr uint64_t kMinKvBytes = 8 /*key len*/ + 4 /*type*/ + 1 /*u8 value*/;
constexpr uint64_t kMinTensorBytes = 8 /*name len*/ + 4 /*n_dims*/ + 8 /*ne*/ + 4 + 8;
constexpr uint32_t kMaxAlignment = 1u << 30;
// Up-front reservations are capped: counts are already bounded by the bytes left, but in an
// 80 GB file that bound is huge, so beyond the cap containers grow only as entries actually
// parse (each consuming file bytes).
constexpr uint64_t kReserveCap = 1u << 20;

// Quote a file-provided string for an error message: at most 80 bytes, non-printables escaped.
std::string quoted(std::string_view s) {
  std::string out = "'";
  const size_t n = std::min<size_t>(s.size(), 80);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > n) out += "...";
  out += "'";
  return out;
}

Status with_prefix(const Status& s, const std::string& prefix) {
  return Status(s.code(), prefix + s.message());
}

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Parser
// ---------------------------------------------------------------------------------------

class Parser {
 public:
  Parser(File& f) : f_(f), p_(f.base_), size_(f.size_) {}

  Status run() {
    DS4_RETURN_IF_ERROR(parse_header());
    DS4_RETURN_IF_ERROR(parse_metadata());
    DS4_RETURN_IF_ERROR(parse_alignment());
    DS4_RETURN_IF_ERROR(parse_tensor_directory());
    return check_tensor_data();
  }

 private:
  uint64_t left() const { return size_ - pos_; }

  Status truncated(const char* what, uint64_t need) const {
    return corrupt("truncated at offset %" PRIu64 " reading %s: need %" PRIu64
                   " bytes, %" PRIu64 " left (file size %" PRIu64 ")",
                   pos_, what, need, left(), size_);
  }

  template <typename T>
  Status read(T* out, const char* what) {
    if (left() < sizeof(T)) return truncated(what, sizeof(T));
    *out = load<T>(p_ + pos_);
    pos_ += sizeof(T);
    return Status();
  }

  // u64 length + bytes; returns a view into the buffer.
  Status read_string(std::string_view* out, const char* what) {
    const uint64_t at = pos_;
    uint64_t len = 0;
    DS4_RETURN_IF_ERROR(read(&len, what));
    if (len > left()) {
      return corrupt("%s at offset %" PRIu64 ": string length %" PRIu64
                     " exceeds the %" PRIu64 " bytes left in the file",
                     what, at, len, left());
    }
    *out = std::string_view(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(len));
    pos_ += len;
    return Status();
  }

  Status parse_header() {
    uint32_t magic = 0;
    if (size_ < 4) {
      return corrupt("file too small (%" PRIu64 " bytes) to be GGUF: no magic", size_);
    }
    DS4_RETURN_IF_ERROR(read(&magic, "magic"));
    if (magic != kMagic) {
      return corrupt("bad magic 0x%08" PRIx32 " at offset 0, expected 0x%08" PRIx32
                     " ('GGUF'): not a GGUF file",
                     magic, kMagic);
    }
    DS4_RETURN_IF_ERROR(read(&f_.version_, "version"));
    if (f_.version_ != kVersion) {
      if (f_.version_ == 0x03000000u) {
        return unsupported("GGUF version field reads 0x03000000: big-endian GGUF is not "
                           "supported, expected little-endian version 3");
      }
      return unsupported("GGUF version %" PRIu32 " at offset 4, expected %" PRIu32,
                         f_.version_, kVersion);
    }
    DS4_RETURN_IF_ERROR(read(&n_tensors_, "tensor count"));
    DS4_RETURN_IF_ERROR(read(&n_kv_, "metadata count"));
    // Each entry needs a minimum number of bytes, so counts the file cannot hold are corrupt
    // (and never drive an allocation).
    if (n_kv_ > left() / kMinKvBytes) {
      return corrupt("n_kv = %" PRIu64 " (offset 16) is absurd: the %" PRIu64
                     " bytes left hold at most %" PRIu64 " metadata entries",
                     n_kv_, left(), left() / kMinKvBytes);
    }
    const uint64_t after_kv = left() - n_kv_ * kMinKvBytes;
    if (n_tensors_ > after_kv / kMinTensorBytes) {
      return corrupt("n_tensors = %" PRIu64 " (offset 8) is absurd: the %" PRIu64
                     " bytes left hold at most %" PRIu64 " tensor entries",
                     n_tensors_, left(), after_kv / kMinTensorBytes);
    }
    return Status();
  }

  Status parse_metadata() {
    f_.kvs_.reserve(std::min(n_kv_, kReserveCap));
    f_.kv_index_.reserve(std::min(n_kv_, kReserveCap));
    for (uint64_t i = 0; i < n_kv_; ++i) {
      KeyValue& kv = f_.kvs_.emplace_back();
      kv.file_offset = pos_;
      std::string_view key;
      char what[64];
      std::snprintf(what, sizeof what, "key of metadata entry %" PRIu64, i);
      DS4_RETURN_IF_ERROR(read_string(&key, what));
      auto [it, inserted] = f_.kv_index_.emplace(key, static_cast<uint32_t>(i));
      if (!inserted) {
        return corrupt("duplicate metadata key %s at offset %" PRIu64
                       " (first defined at offset %" PRIu64 ")",
                       quoted(key).c_str(), kv.file_offset, f_.kvs_[it->second].file_offset);
      }
      kv.key.assign(key);
      DS4_RETURN_IF_ERROR(parse_value(kv));
    }
    return Status();
  }

  Status read_value_type(ValueType* out, const KeyValue& kv, const char* what) {
    const uint64_t at = pos_;
    uint32_t t = 0;
    DS4_RETURN_IF_ERROR(read(&t, what));
    if (t >= kValueTypeCount) {
      return corrupt("metadata key %s: invalid %s %" PRIu32 " at offset %" PRIu64
                     ", expected 0..%" PRIu32,
                     quoted(kv.key).c_str(), what, t, at, kValueTypeCount - 1);
    }
    *out = static_cast<ValueType>(t);
    return Status();
  }

  Status check_bools(const KeyValue& kv, const uint8_t* p, uint64_t n, uint64_t at) {
    for (uint64_t j = 0; j < n; ++j) {
      if (p[j] > 1) {
        return corrupt("metadata key %s: bool value %u at offset %" PRIu64 " is not 0 or 1",
                       quoted(kv.key).c_str(), p[j], at + j);
      }
    }
    return Status();
  }

  Status parse_value(KeyValue& kv) {
    DS4_RETURN_IF_ERROR(read_value_type(&kv.type, kv, "value type"));
    kv.array_type = kv.type;
    const uint64_t at = pos_;
    if (kv.type == ValueType::kString) {
      DS4_RETURN_IF_ERROR(read_string(&kv.str, "string value"));
      kv.data = reinterpret_cast<const uint8_t*>(kv.str.data());
      kv.data_bytes = kv.str.size();
      return Status();
    }
    if (kv.type != ValueType::kArray) {
      const uint32_t sz = value_type_size(kv.type);
      if (left() < sz) return truncated("scalar value", sz);
      kv.data = p_ + pos_;
      kv.data_bytes = sz;
      if (kv.type == ValueType::kBool) DS4_RETURN_IF_ERROR(check_bools(kv, kv.data, 1, at));
      pos_ += sz;
      return Status();
    }
    // Array: item type, count, items.
    DS4_RETURN_IF_ERROR(read_value_type(&kv.array_type, kv, "array item type"));
    if (kv.array_type == ValueType::kArray) {
      return unsupported("metadata key %s: nested array (array of arrays) at offset %" PRIu64
                         " is not supported",
                         quoted(kv.key).c_str(), at);
    }
    const uint64_t count_at = pos_;
    DS4_RETURN_IF_ERROR(read(&kv.array_count, "array count"));
    const uint64_t items_at = pos_;
    kv.data = p_ + pos_;
    if (kv.array_type == ValueType::kString) {
      if (kv.array_count > left() / 8) {
        return corrupt("metadata key %s: array count %" PRIu64 " at offset %" PRIu64
                       " is absurd: the %" PRIu64 " bytes left hold at most %" PRIu64
                       " strings",
                       quoted(kv.key).c_str(), kv.array_count, count_at, left(), left() / 8);
      }
      kv.strings.reserve(std::min(kv.array_count, kReserveCap));
      for (uint64_t j = 0; j < kv.array_count; ++j) {
        std::string_view s;
        DS4_RETURN_IF_ERROR(read_string(&s, "string array item"));
        kv.strings.push_back(s);
      }
      kv.data_bytes = pos_ - items_at;
      return Status();
    }
    const uint32_t sz = value_type_size(kv.array_type);
    if (kv.array_count > left() / sz) {
      return corrupt("metadata key %s: array count %" PRIu64 " of %s at offset %" PRIu64
                     " is absurd: needs %s bytes, %" PRIu64 " left",
                     quoted(kv.key).c_str(), kv.array_count, value_type_name(kv.array_type),
                     count_at,
                     kv.array_count > UINT64_MAX / sz
                         ? "more than 2^64"
                         : std::to_string(kv.array_count * sz).c_str(),
                     left());
    }
    kv.data_bytes = kv.array_count * sz;
    if (kv.array_type == ValueType::kBool) {
      DS4_RETURN_IF_ERROR(check_bools(kv, kv.data, kv.array_count, items_at));
    }
    pos_ += kv.data_bytes;
    return Status();
  }

  Status parse_alignment() {
    const KeyValue* kv = f_.find(kAlignmentKey);
    if (kv == nullptr) return Status();
    if (kv->type != ValueType::kU32) {
      return corrupt("metadata key '%s' has type %s, expected u32", kAlignmentKey,
                     kv->type_string().c_str());
    }
    const uint32_t a = load<uint32_t>(kv->data);
    if (a == 0 || !std::has_single_bit(a) || a > kMaxAlignment) {
      return corrupt("metadata key '%s' = %" PRIu32
                     ", expected a power of two in [1, %" PRIu32 "]",
                     kAlignmentKey, a, kMaxAlignment);
    }
    f_.alignment_ = a;
    return Status();
  }

  Status parse_tensor_directory() {
    f_.tensors_.reserve(std::min(n_tensors_, kReserveCap));
    f_.tensor_index_.reserve(std::min(n_tensors_, kReserveCap));
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      TensorInfo& t = f_.tensors_.emplace_back();
      const uint64_t entry_at = pos_;
      std::string_view name;
      char what[64];
      std::snprintf(what, sizeof what, "name of tensor %" PRIu64, i);
      DS4_RETURN_IF_ERROR(read_string(&name, what));
      auto [it, inserted] = f_.tensor_index_.emplace(name, static_cast<uint32_t>(i));
      if (!inserted) {
        return corrupt("duplicate tensor name %s (entries %" PRIu32 " and %" PRIu64
                       ", offset %" PRIu64 ")",
                       quoted(name).c_str(), it->second, i, entry_at);
      }
      t.name.assign(name);
      const std::string qn = quoted(name);
      const uint64_t dims_at = pos_;
      DS4_RETURN_IF_ERROR(read(&t.n_dims, "tensor n_dims"));
      if (t.n_dims == 0 || t.n_dims > 8) {
        return corrupt("tensor %s: n_dims = %" PRIu32 " at offset %" PRIu64
                       ", expected 1..%" PRIu32,
                       qn.c_str(), t.n_dims, dims_at, kMaxDims);
      }
      if (t.n_dims > kMaxDims) {
        return unsupported("tensor %s: n_dims = %" PRIu32 " at offset %" PRIu64
                           ", at most %" PRIu32 " dims are supported",
                           qn.c_str(), t.n_dims, dims_at, kMaxDims);
      }
      for (uint32_t d = 0; d < t.n_dims; ++d) {
        const uint64_t ne_at = pos_;
        uint64_t v = 0;
        DS4_RETURN_IF_ERROR(read(&v, "tensor ne"));
        if (v == 0 || v > static_cast<uint64_t>(INT64_MAX)) {
          return corrupt("tensor %s: ne[%" PRIu32 "] = %" PRId64 " at offset %" PRIu64
                         ", expected > 0",
                         qn.c_str(), d, static_cast<int64_t>(v), ne_at);
        }
        t.ne[d] = static_cast<int64_t>(v);
      }
      uint32_t type = 0;
      const uint64_t type_at = pos_;
      DS4_RETURN_IF_ERROR(read(&type, "tensor type"));
      t.type = static_cast<GgmlType>(type);
      if (!type_known(t.type)) {
        return unsupported("tensor %s: unknown ggml type %" PRIu32 " at offset %" PRIu64,
                           qn.c_str(), type, type_at);
      }
      DS4_RETURN_IF_ERROR(read(&t.offset, "tensor data offset"));
      Expected<uint64_t> nb =
          tensor_nbytes(t.type, std::span<const int64_t>(t.ne.data(), t.n_dims));
      if (!nb.ok()) return with_prefix(nb.status(), "tensor " + qn + ": ");
      t.nbytes = *nb;
    }
    // Data section starts at the directory end rounded up to the alignment.
    const uint64_t a = f_.alignment_;
    f_.data_offset_ = (pos_ + a - 1) / a * a;  // pos_ <= size_ < 2^63: no overflow
    return Status();
  }

  Status check_tensor_data() {
    const uint64_t a = f_.alignment_;
    const uint64_t data_off = f_.data_offset_;
    for (TensorInfo& t : f_.tensors_) {
      if (t.offset % a != 0) {
        return corrupt("tensor %s: data offset %" PRIu64 " is not a multiple of the alignment %"
                       PRIu64,
                       quoted(t.name).c_str(), t.offset, a);
      }
      const uint64_t avail = size_ > data_off ? size_ - data_off : 0;
      if (t.offset > avail || t.nbytes > avail - t.offset) {
        return corrupt("tensor %s (%s %s, %" PRIu64 " bytes): data at file offset %" PRIu64
                       " + %" PRIu64 " extends past the end of the file (size %" PRIu64 ")",
                       quoted(t.name).c_str(), type_name(t.type), t.shape_string().c_str(),
                       t.nbytes, data_off, t.offset, size_);
      }
      t.data = p_ + data_off + t.offset;
    }
    // Overlap: sort by offset, compare neighbours.
    std::vector<uint32_t> order(f_.tensors_.size());
    std::iota(order.begin(), order.end(), 0u);
    const auto& ts = f_.tensors_;
    std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
      return ts[x].offset != ts[y].offset ? ts[x].offset < ts[y].offset : x < y;
    });
    for (size_t k = 1; k < order.size(); ++k) {
      const TensorInfo& prev = ts[order[k - 1]];
      const TensorInfo& cur = ts[order[k]];
      if (prev.offset + prev.nbytes > cur.offset) {
        return corrupt("tensors %s (data [%" PRIu64 ", %" PRIu64 ")) and %s (data [%" PRIu64
                       ", %" PRIu64 ")) overlap",
                       quoted(prev.name).c_str(), prev.offset, prev.offset + prev.nbytes,
                       quoted(cur.name).c_str(), cur.offset, cur.offset + cur.nbytes);
      }
    }
    return Status();
  }

  File& f_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
};

// ---------------------------------------------------------------------------------------
// KeyValue / TensorInfo helpers
// ---------------------------------------------------------------------------------------

std::string KeyValue::type_string() const {
  if (type == ValueType::kArray) {
    return std::string("array[") + value_type_name(array_type) + "]";
  }
  return value_type_name(type);
}

uint64_t TensorInfo::row_bytes() const {
  const uint32_t be = type_block_elems(type);
  return be == 0 ? 0 : static_cast<uint64_t>(ne[0]) / be * type_block_bytes(type);
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (uint32_t d = 0; d < n_dims && d < 4; ++d) {
    if (d) s += ", ";
    s += std::to_string(ne[d]);
  }
  return s + "]";
}

// ---------------------------------------------------------------------------------------
// File: open / from_bytes / lifetime
// ---------------------------------------------------------------------------------------

Expected<std::unique_ptr<File>> File::from_bytes(std::span<const uint8_t> bytes) {
  std::unique_ptr<File> f(new File());
  f->base_ = bytes.data();
  f->size_ = bytes.size();
  Parser parser(*f);
  DS4_RETURN_IF_ERROR(parser.run());
  return f;
}

Expected<std::unique_ptr<File>> File::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return not_found("GGUF file '%s' does not exist", path.c_str());
    return resource_error("cannot open GGUF file '%s': %s", path.c_str(), std::strerror(e));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    return resource_error("cannot stat '%s': %s", path.c_str(), std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalid_argument("'%s' is not a regular file", path.c_str());
  }
  std::unique_ptr<File> f(new File());
  f->path_ = path;
  f->size_ = static_cast<uint64_t>(st.st_size);
  if (f->size_ == 0) {
    ::close(fd);
    return corrupt("'%s': empty file (0 bytes), not GGUF", path.c_str());
  }
  void* m = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);  // the mapping keeps the file referenced
  if (m == MAP_FAILED) {
    return resource_error("cannot mmap '%s' (%" PRIu64 " bytes): %s", path.c_str(), f->size_,
                          std::strerror(e));
  }
  f->map_ = m;
  f->base_ = static_cast<const uint8_t*>(m);
  Parser parser(*f);
  Status s = parser.run();
  if (!s.ok()) return with_prefix(s, "'" + path + "': ");
  return f;
}

File::~File() {
  if (map_ != nullptr) ::munmap(map_, size_);
}

const KeyValue* File::find(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second];
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

// ---------------------------------------------------------------------------------------
// Typed getters
// ---------------------------------------------------------------------------------------

namespace {

// One decoded scalar.
struct Scalar {
  enum Kind { kUnsigned, kSigned, kFloat, kBool } kind;
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0;
};

Scalar decode(ValueType t, const uint8_t* p) {
  Scalar s{Scalar::kUnsigned};
  switch (t) {
    case ValueType::kU8: s.u = load<uint8_t>(p); break;
    case ValueType::kU16: s.u = load<uint16_t>(p); break;
    case ValueType::kU32: s.u = load<uint32_t>(p); break;
    case ValueType::kU64: s.u = load<uint64_t>(p); break;
    case ValueType::kI8: s.kind = Scalar::kSigned; s.i = load<int8_t>(p); break;
    case ValueType::kI16: s.kind = Scalar::kSigned; s.i = load<int16_t>(p); break;
    case ValueType::kI32: s.kind = Scalar::kSigned; s.i = load<int32_t>(p); break;
    case ValueType::kI64: s.kind = Scalar::kSigned; s.i = load<int64_t>(p); break;
    case ValueType::kF32: s.kind = Scalar::kFloat; s.f = load<float>(p); break;
    case ValueType::kF64: s.kind = Scalar::kFloat; s.f = load<double>(p); break;
    case ValueType::kBool: s.kind = Scalar::kBool; s.u = load<uint8_t>(p) != 0; break;
    default: break;  // not reached: callers pass scalar types only
  }
  return s;
}

template <typename T>
constexpr const char* target_name() {
  if constexpr (std::is_same_v<T, uint8_t>) return "u8";
  else if constexpr (std::is_same_v<T, uint32_t>) return "u32";
  else if constexpr (std::is_same_v<T, uint64_t>) return "u64";
  else if constexpr (std::is_same_v<T, int32_t>) return "i32";
  else if constexpr (std::is_same_v<T, int64_t>) return "i64";
  else if constexpr (std::is_same_v<T, float>) return "f32";
  else if constexpr (std::is_same_v<T, double>) return "f64";
  else return "bool";
}

bool is_int_type(ValueType t) {
  switch (t) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kU16: case ValueType::kI16:
    case ValueType::kU32: case ValueType::kI32: case ValueType::kU64: case ValueType::kI64:
      return true;
    default: return false;
  }
}

// Whether a stored type can be read as T at all (value range is checked per value).
template <typename T>
bool type_compatible(ValueType t) {
  if constexpr (std::is_same_v<T, bool>) return t == ValueType::kBool;
  else if constexpr (std::is_floating_point_v<T>)
    return t == ValueType::kF32 || t == ValueType::kF64;
  else return is_int_type(t);
}

// Converts s to T when the value is representable; nullopt otherwise.
template <typename T>
std::optional<T> convert(const Scalar& s) {
  if constexpr (std::is_same_v<T, bool>) {
    return s.u != 0;
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(s.f);
  } else {
    using L = std::numeric_limits<T>;
    if (s.kind == Scalar::kUnsigned) {
      if (s.u > static_cast<uint64_t>(L::max())) return std::nullopt;
      return static_cast<T>(s.u);
    }
    if constexpr (std::is_unsigned_v<T>) {
      if (s.i < 0 || static_cast<uint64_t>(s.i) > static_cast<uint64_t>(L::max())) {
        return std::nullopt;
      }
    } else {
      if (s.i < static_cast<int64_t>(L::min()) || s.i > static_cast<int64_t>(L::max())) {
        return std::nullopt;
      }
    }
    return static_cast<T>(s.i);
  }
}

std::string scalar_string(const Scalar& s) {
  switch (s.kind) {
    case Scalar::kUnsigned: return std::to_string(s.u);
    case Scalar::kSigned: return std::to_string(s.i);
    case Scalar::kFloat: return std::to_string(s.f);
    case Scalar::kBool: return s.u ? "true" : "false";
  }
  return "?";
}

Status key_not_found(std::string_view key) {
  return not_found("metadata key %s not found", quoted(key).c_str());
}

Status wrong_type(const KeyValue& kv, const char* expected) {
  return corrupt("metadata key %s has type %s, expected %s", quoted(kv.key).c_str(),
                 kv.type_string().c_str(), expected);
}

template <typename T>
Expected<T> get_scalar(const File& f, std::string_view key) {
  const KeyValue* kv = f.find(key);
  if (kv == nullptr) return key_not_found(key);
  if (kv->is_array() || !type_compatible<T>(kv->type)) return wrong_type(*kv, target_name<T>());
  const Scalar s = decode(kv->type, kv->data);
  std::optional<T> v = convert<T>(s);
  if (!v) {
    return corrupt("metadata key %s: %s value %s does not fit %s", quoted(kv->key).c_str(),
                   value_type_name(kv->type), scalar_string(s).c_str(), target_name<T>());
  }
  return *v;
}

template <typename T>
Expected<std::vector<T>> get_array(const File& f, std::string_view key) {
  const KeyValue* kv = f.find(key);
  if (kv == nullptr) return key_not_found(key);
  std::string expected = std::string("array[") + target_name<T>() + "]";
  if (!kv->is_array() || !type_compatible<T>(kv->array_type)) {
    return wrong_type(*kv, expected.c_str());
  }
  const uint32_t sz = value_type_size(kv->array_type);
  std::vector<T> out;
  out.reserve(kv->array_count);
  for (uint64_t j = 0; j < kv->array_count; ++j) {
    const Scalar s = decode(kv->array_type, kv->data + j * sz);
    std::optional<T> v = convert<T>(s);
    if (!v) {
      return corrupt("metadata key %s: item %" PRIu64 " = %s (%s) does not fit %s",
                     quoted(kv->key).c_str(), j, scalar_string(s).c_str(),
                     value_type_name(kv->array_type), target_name<T>());
    }
    out.push_back(*v);
  }
  return out;
}

template <typename T>
Expected<T> or_default(const File& f, std::string_view key, T def,
                       Expected<T> (File::*getter)(std::string_view) const) {
  if (!f.has(key)) return def;
  return (f.*getter)(key);
}

}  // namespace

#define DS4_GGUF_GETTER(fn, T) \
  Expected<T> File::fn(std::string_view key) const { return get_scalar<T>(*this, key); }
DS4_GGUF_GETTER(get_u8, uint8_t)
DS4_GGUF_GETTER(get_u32, uint32_t)
DS4_GGUF_GETTER(get_u64, uint64_t)
DS4_GGUF_GETTER(get_i32, int32_t)
DS4_GGUF_GETTER(get_i64, int64_t)
DS4_GGUF_GETTER(get_f32, float)
DS4_GGUF_GETTER(get_f64, double)
DS4_GGUF_GETTER(get_bool, bool)
#undef DS4_GGUF_GETTER

Expected<std::string> File::get_string(std::string_view key) const {
  const KeyValue* kv = find(key);
  if (kv == nullptr) return key_not_found(key);
  if (kv->type != ValueType::kString) return wrong_type(*kv, "string");
  return std::string(kv->str);
}

Expected<std::vector<uint32_t>> File::get_array_u32(std::string_view key) const {
  return get_array<uint32_t>(*this, key);
}
Expected<std::vector<int32_t>> File::get_array_i32(std::string_view key) const {
  return get_array<int32_t>(*this, key);
}
Expected<std::vector<int64_t>> File::get_array_i64(std::string_view key) const {
  return get_array<int64_t>(*this, key);
}
Expected<std::vector<float>> File::get_array_f32(std::string_view key) const {
  return get_array<float>(*this, key);
}

Expected<std::span<const std::string_view>> File::get_array_string_views(
    std::string_view key) const {
  const KeyValue* kv = find(key);
  if (kv == nullptr) return key_not_found(key);
  if (!kv->is_array() || kv->array_type != ValueType::kString) {
    return wrong_type(*kv, "array[string]");
  }
  return std::span<const std::string_view>(kv->strings);
}

Expected<std::vector<std::string>> File::get_array_string(std::string_view key) const {
  DS4_ASSIGN_OR_RETURN(std::span<const std::string_view> views, get_array_string_views(key));
  std::vector<std::string> out;
  out.reserve(views.size());
  for (std::string_view v : views) out.emplace_back(v);
  return out;
}

Expected<uint32_t> File::get_u32_or(std::string_view key, uint32_t def) const {
  return or_default<uint32_t>(*this, key, def, &File::get_u32);
}
Expected<uint64_t> File::get_u64_or(std::string_view key, uint64_t def) const {
  return or_default<uint64_t>(*this, key, def, &File::get_u64);
}
Expected<int32_t> File::get_i32_or(std::string_view key, int32_t def) const {
  return or_default<int32_t>(*this, key, def, &File::get_i32);
}
Expected<float> File::get_f32_or(std::string_view key, float def) const {
  return or_default<float>(*this, key, def, &File::get_f32);
}
Expected<bool> File::get_bool_or(std::string_view key, bool def) const {
  return or_default<bool>(*this, key, def, &File::get_bool);
}
Expected<std::string> File::get_string_or(std::string_view key, std::string def) const {
  if (!has(key)) return def;
  return get_string(key);
}

}  // namespace ds4::gguf
