// tools/train/drafter/quant_rows.cpp — row quantizer for the drafter exporter (export_gguf.py).
//
// Role: the gguf python package cannot quantize IQ2_XXS / Q2_K / Q4_K, so the exporter writes
// each quantized tensor as raw little-endian f32 rows and this helper turns them into the
// block bytes with ds4cpp's own quantizers (quant::quantize_row — the same code path
// `ds4-gguf quantize` uses for the target), so drafter and target share one quantizer.
//   drafter_quant_rows TYPE N_PER_ROW IN.f32 OUT.bin      TYPE: q8_0 | q2_k | q4_k | iq2_xxs
// Invariants: rows are independent; output = n_rows * row_bytes(TYPE, N_PER_ROW) bytes.
// Errors (bad type, shape not a multiple of the block, short input) exit 1 with a message.
// Built by hand (tools/train is not a CMake tool folder), see README.md.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "quant/quant.h"

int main(int argc, char** argv) {
  using ds4::gguf::GgmlType;
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s q8_0|q2_k|q4_k|iq2_xxs N_PER_ROW IN.f32 OUT.bin\n", argv[0]);
    return 1;
  }
  const std::string ts = argv[1];
  GgmlType t;
  if (ts == "q8_0") t = GgmlType::kQ8_0;
  else if (ts == "q2_k") t = GgmlType::kQ2_K;
  else if (ts == "q4_k") t = GgmlType::kQ4_K;
  else if (ts == "iq2_xxs") t = GgmlType::kIQ2_XXS;
  else {
    std::fprintf(stderr, "quant_rows: unknown type '%s' (expected q8_0|q2_k|q4_k|iq2_xxs)\n", ts.c_str());
    return 1;
  }
  const long long n = std::atoll(argv[2]);
  if (ds4::Status st = ds4::quant::validate_row(t, n); !st.ok() || n <= 0) {
    std::fprintf(stderr, "quant_rows: row length %lld invalid for %s\n", n, ts.c_str());
    return 1;
  }
  std::FILE* in = std::fopen(argv[3], "rb");
  if (!in) {
    std::fprintf(stderr, "quant_rows: cannot open '%s'\n", argv[3]);
    return 1;
  }
  std::FILE* out = std::fopen(argv[4], "wb");
  if (!out) {
    std::fprintf(stderr, "quant_rows: cannot create '%s'\n", argv[4]);
    std::fclose(in);
    return 1;
  }
  const size_t rb = ds4::quant::row_bytes(t, n);
  std::vector<float> row(static_cast<size_t>(n));
  std::vector<unsigned char> q(rb);
  long long rows = 0;
  int rc = 0;
  for (;;) {
    const size_t got = std::fread(row.data(), sizeof(float), row.size(), in);
    if (got == 0) break;
    if (got != row.size()) {
      std::fprintf(stderr, "quant_rows: input is not a whole number of %lld-float rows\n", n);
      rc = 1;
      break;
    }
    ds4::quant::quantize_row(t, row.data(), q.data(), n);
    if (std::fwrite(q.data(), 1, rb, out) != rb) {
      std::fprintf(stderr, "quant_rows: write failed\n");
      rc = 1;
      break;
    }
    ++rows;
  }
  std::fclose(in);
  if (std::fclose(out) != 0) rc = 1;
  if (rc == 0 && rows == 0) {
    std::fprintf(stderr, "quant_rows: empty input\n");
    rc = 1;
  }
  return rc;
}
