// tests/fuzz/gguf_fuzz.cpp — libFuzzer target for the GGUF parser.
//
// Parses arbitrary bytes with File::from_bytes and, when the parse succeeds, walks every
// metadata entry through every typed getter and touches the first and last byte of every
// tensor, so ASan/UBSan see any out-of-bounds pointer the parser might have produced.
// Invariant checked: a successful parse only yields tensors inside the input buffer.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "gguf/gguf.h"

using namespace ds4::gguf;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto fe = File::from_bytes(std::span<const uint8_t>(data, size));
  if (!fe.ok()) {
    if (fe.status().message().empty()) std::abort();  // every error must say what is wrong
    return 0;
  }
  const File& f = **fe;
  volatile uint64_t sink = 0;
  for (const KeyValue& kv : f.metadata()) {
    const std::string_view k = kv.key;
    sink = sink + f.get_u8(k).ok() + f.get_u32(k).ok() + f.get_u64(k).ok() + f.get_i32(k).ok() +
           f.get_i64(k).ok() + f.get_f32(k).ok() + f.get_f64(k).ok() + f.get_bool(k).ok() +
           f.get_string(k).ok();
    if (auto a = f.get_array_u32(k); a.ok()) sink = sink + a->size();
    if (auto a = f.get_array_i32(k); a.ok()) sink = sink + a->size();
    if (auto a = f.get_array_i64(k); a.ok()) sink = sink + a->size();
    if (auto a = f.get_array_f32(k); a.ok()) sink = sink + a->size();
    if (auto a = f.get_array_string(k); a.ok()) {
      for (const std::string& s : *a) sink = sink + s.size();
    }
    if (kv.data_bytes > 0) sink = sink + kv.data[0] + kv.data[kv.data_bytes - 1];
    if (f.find(k) != &kv) std::abort();
  }
  for (const TensorInfo& t : f.tensors()) {
    if (t.data < data || t.nbytes > size || t.data + t.nbytes > data + size) std::abort();
    if (t.offset % f.alignment() != 0) std::abort();
    sink = sink + t.data[0] + t.data[t.nbytes - 1] + static_cast<uint64_t>(t.n_elements());
    if (f.find_tensor(t.name) != &t) std::abort();
  }
  (void)sink;
  return 0;
}
