// tests/quant/quant_tool.cpp — command-line access to quant/ for the python cross-check.
//
//   quant_tool dequant <type> <blocks.bin> <out_f32.bin>   raw blocks -> f32 values
//   quant_tool quant   <type> <in_f32.bin> <blocks.bin>    f32 values -> raw blocks
// <type> is a GGML type name as in gguf/types.h ("q8_0", "iq2_xxs", ...). Bad arguments or
// unreadable/misaligned files print an error and exit 2 (never abort).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "quant/quant.h"

namespace {

bool parse_type(const std::string& name, ds4::GgmlType* out) {
  for (uint32_t i = 0; i < ds4::gguf::kGgmlTypeCount; ++i) {
    const auto t = static_cast<ds4::GgmlType>(i);
    if (ds4::gguf::type_known(t) && name == ds4::gguf::type_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

bool read_file(const char* path, std::vector<uint8_t>* data) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  data->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

bool write_file(const char* path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  return static_cast<bool>(f);
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "quant_tool: %s\n", msg.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) return fail("usage: quant_tool dequant|quant <type> <in> <out>");
  const std::string mode = argv[1];
  ds4::GgmlType t;
  if (!parse_type(argv[2], &t)) return fail(std::string("unknown type '") + argv[2] + "'");
  std::vector<uint8_t> in;
  if (!read_file(argv[3], &in)) return fail(std::string("cannot read ") + argv[3]);
  const size_t be = ds4::gguf::type_block_elems(t), bb = ds4::gguf::type_block_bytes(t);
  if (mode == "dequant") {
    if (!ds4::quant::can_dequantize(t)) return fail("type not supported by dequantize_row");
    if (in.size() % bb != 0) return fail("input size is not a whole number of blocks");
    const int64_t n = static_cast<int64_t>(in.size() / bb * be);
    std::vector<float> out(static_cast<size_t>(n));
    ds4::quant::dequantize_row(t, in.data(), out.data(), n);
    if (!write_file(argv[4], out.data(), out.size() * sizeof(float))) return fail("write failed");
    return 0;
  }
  if (mode == "quant") {
    if (!ds4::quant::can_quantize(t)) return fail("type not supported by quantize_row");
    if (in.size() % (sizeof(float) * be) != 0) return fail("input is not whole blocks of f32");
    const int64_t n = static_cast<int64_t>(in.size() / sizeof(float));
    std::vector<float> x(static_cast<size_t>(n));
    std::memcpy(x.data(), in.data(), in.size());
    std::vector<uint8_t> out(ds4::quant::row_bytes(t, n));
    ds4::quant::quantize_row(t, x.data(), out.data(), n);
    if (!write_file(argv[4], out.data(), out.size())) return fail("write failed");
    return 0;
  }
  return fail("mode must be 'dequant' or 'quant'");
}
