// tests/gguf/gguf_dump.cpp — test tool for the Python cross-check (crosscheck.py).
//
//   gguf_dump FILE                 parse FILE with ds4::gguf::File and print it as JSON:
//                                  version, alignment, data_offset, every key (type, value)
//                                  and every tensor (type, ne, offset, nbytes, FNV-1a of data)
//   gguf_dump --write-sample FILE  write a sample file with ds4::gguf::Writer (every metadata
//                                  type, string arrays, tensors of several types, alignment 64)
// Exit status 1 with the error on stderr when parsing or writing fails.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "gguf/gguf.h"
#include "gguf/writer.h"

using ds4::Status;
using namespace ds4::gguf;
using json = nlohmann::ordered_json;

namespace {

std::string fnv1a(const uint8_t* p, uint64_t n) {
  uint64_t h = 1469598103934665603ull;
  for (uint64_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, h);
  return buf;
}

json scalar_json(ValueType t, const uint8_t* p) {
  auto ld = [p](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  switch (t) {
    case ValueType::kU8: return ld(uint8_t{});
    case ValueType::kI8: return ld(int8_t{});
    case ValueType::kU16: return ld(uint16_t{});
    case ValueType::kI16: return ld(int16_t{});
    case ValueType::kU32: return ld(uint32_t{});
    case ValueType::kI32: return ld(int32_t{});
    case ValueType::kU64: return ld(uint64_t{});
    case ValueType::kI64: return ld(int64_t{});
    case ValueType::kF32: return static_cast<double>(ld(float{}));
    case ValueType::kF64: return ld(double{});
    case ValueType::kBool: return ld(uint8_t{}) != 0;
    default: return nullptr;
  }
}

int dump(const std::string& path) {
  auto fe = File::open(path);
  if (!fe.ok()) {
    std::fprintf(stderr, "%s\n", fe.status().to_string().c_str());
    return 1;
  }
  const File& f = **fe;
  json out;
  out["version"] = f.version();
  out["alignment"] = f.alignment();
  out["data_offset"] = f.data_offset();
  out["file_size"] = f.file_size();
  json kvs = json::array();
  for (const KeyValue& kv : f.metadata()) {
    json j;
    j["key"] = kv.key;
    j["type"] = value_type_name(kv.type);
    if (kv.type == ValueType::kString) {
      j["value"] = std::string(kv.str);
    } else if (kv.is_array()) {
      j["item_type"] = value_type_name(kv.array_type);
      json arr = json::array();
      if (kv.array_type == ValueType::kString) {
        for (std::string_view s : kv.strings) arr.push_back(std::string(s));
      } else {
        const uint32_t sz = value_type_size(kv.array_type);
        for (uint64_t i = 0; i < kv.array_count; ++i) {
          arr.push_back(scalar_json(kv.array_type, kv.data + i * sz));
        }
      }
      j["value"] = std::move(arr);
    } else {
      j["value"] = scalar_json(kv.type, kv.data);
    }
    kvs.push_back(std::move(j));
  }
  out["kv"] = std::move(kvs);
  json ts = json::array();
  for (const TensorInfo& t : f.tensors()) {
    json j;
    j["name"] = t.name;
    j["type"] = type_name(t.type);
    j["type_id"] = static_cast<uint32_t>(t.type);
    j["ne"] = std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims);
    j["offset"] = t.offset;
    j["nbytes"] = t.nbytes;
    j["fnv1a"] = fnv1a(t.data, t.nbytes);
    ts.push_back(std::move(j));
  }
  out["tensors"] = std::move(ts);
  std::printf("%s\n", out.dump(1, ' ', false, json::error_handler_t::replace).c_str());
  return 0;
}

#define CHECK_OK(expr)                                                   \
  do {                                                                   \
    Status s_ = (expr);                                                  \
    if (!s_.ok()) {                                                      \
      std::fprintf(stderr, "%s\n", s_.to_string().c_str());              \
      return 1;                                                          \
    }                                                                    \
  } while (0)

int write_sample(const std::string& path) {
  Writer w;
  CHECK_OK(w.set_string("general.architecture", "ds4test"));
  CHECK_OK(w.set_alignment(64));
  CHECK_OK(w.set_u8("s.u8", 200));
  CHECK_OK(w.set_i8("s.i8", -7));
  CHECK_OK(w.set_u16("s.u16", 60000));
  CHECK_OK(w.set_i16("s.i16", -12345));
  CHECK_OK(w.set_u32("s.u32", 3000000000u));
  CHECK_OK(w.set_i32("s.i32", -123456789));
  CHECK_OK(w.set_u64("s.u64", 12345678901234567ull));
  CHECK_OK(w.set_i64("s.i64", -1234567890123ll));
  CHECK_OK(w.set_f32("s.f32", 3.14159f));
  CHECK_OK(w.set_f64("s.f64", 2.718281828459045));
  CHECK_OK(w.set_bool("s.bool", true));
  CHECK_OK(w.set_string("s.str", "caf\xc3\xa9 \xe2\x96\x81tok"));
  const std::vector<int32_t> ai = {1, -2, 3};
  const std::vector<float> af = {0.5f, -1.25f};
  const std::vector<uint8_t> au = {9, 8, 7};
  const std::vector<uint64_t> au64 = {1, 1ull << 50};
  const std::vector<std::string> as = {"<s>", "</s>", "hello", "\xe2\x96\x81w"};
  CHECK_OK(w.set_array_i32("a.i32", ai));
  CHECK_OK(w.set_array_f32("a.f32", af));
  CHECK_OK(w.set_array_u8("a.u8", au));
  CHECK_OK(w.set_array_u64("a.u64", au64));
  CHECK_OK(w.set_array_string("a.str", as));
  // Tensors with deterministic bytes.
  auto fill = [](uint32_t seed) {
    return [seed](uint64_t off, std::span<uint8_t> out) {
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = static_cast<uint8_t>(((off + i) * 2654435761u + seed) >> 7);
      }
    };
  };
  std::vector<float> vec(10);
  for (int i = 0; i < 10; ++i) vec[i] = 0.25f * static_cast<float>(i) - 1.0f;
  CHECK_OK(w.add_tensor("vec.f32", GgmlType::kF32, {10},
                        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(vec.data()),
                                                 vec.size() * 4)));
  CHECK_OK(w.add_tensor("mat.f16", GgmlType::kF16, {8, 3}, fill(1)));
  CHECK_OK(w.add_tensor("mat.q8_0", GgmlType::kQ8_0, {64, 2}, fill(2)));
  CHECK_OK(w.add_tensor("mat.q4_k", GgmlType::kQ4_K, {256, 2}, fill(3)));
  CHECK_OK(w.add_tensor("exp.iq2_xxs", GgmlType::kIQ2_XXS, {256, 2, 3}, fill(4)));
  CHECK_OK(w.add_tensor("ids.i32", GgmlType::kI32, {5}, fill(5)));
  CHECK_OK(w.write(path));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "--write-sample") == 0) return write_sample(argv[2]);
  if (argc == 2) return dump(argv[1]);
  std::fprintf(stderr, "usage: gguf_dump FILE | gguf_dump --write-sample FILE\n");
  return 2;
}
