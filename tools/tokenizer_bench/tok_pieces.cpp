// tools/tokenizer_bench/tok_pieces.cpp — dumps the DS4 pre-tokenizer pieces of a file, or
// the token ids of a file under a GGUF vocabulary, for cross-checks against the Python mirror
// (tools/tokenizer/ds4_pretok.py), the Python trainer and the `tokenizers` package.
//
//   ds4-tok-pieces pieces [--v4] FILE   one line per piece: "<begin> <end>" byte offsets
//                                       (--v4: the exact DeepSeek V4 split, else ds4's scanner)
//   ds4-tok-pieces encode GGUF FILE     one line of space-separated ids (plain encode)
//   ds4-tok-pieces batch GGUF FILE      FILE holds records "<byte length>\n<bytes>"; for each,
//       three lines: plain ids, ids with every added token recognized (encode_with_added), and
//       "ok" or the failed checks among: roundtrip (decode(encode(x)) != x for either mode),
//       stream (a StreamDecoder step emitted invalid UTF-8 although x is valid UTF-8, or the
//       steps do not concatenate to x).
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace {
bool read_file(const char* path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = uint8_t(s[i]);
    size_t len;
    uint32_t min;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      len = 2, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4, min = 0x10000;
    } else {
      return false;
    }
    if (i + len > s.size()) return false;
    uint32_t cp = c & (0x7F >> len);
    for (size_t k = 1; k < len; ++k) {
      const auto b = uint8_t(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += len;
  }
  return true;
}

void append_ids(const std::vector<int32_t>& ids, std::string* out) {
  for (size_t k = 0; k < ids.size(); ++k) {
    if (k) *out += ' ';
    *out += std::to_string(ids[k]);
  }
  *out += '\n';
}

int fail(const std::string& msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  return 1;
}
}  // namespace

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "pieces" && (argc == 3 || (argc == 4 && std::string(argv[2]) == "--v4"))) {
    std::string text;
    if (!read_file(argv[argc - 1], &text)) return fail(std::string("cannot read ") + argv[argc - 1]);
    const auto mode = argc == 4 ? ds4::tok::PretokMode::kDeepSeekV4 : ds4::tok::PretokMode::kDs4Scanner;
    std::vector<std::pair<uint32_t, uint32_t>> pieces;
    ds4::tok::pretokenize(text, &pieces, mode);
    std::string out;
    for (auto [b, e] : pieces) out += std::to_string(b) + " " + std::to_string(e) + "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  if ((cmd == "encode" || cmd == "batch") && argc == 4) {
    auto file = ds4::gguf::File::open(argv[2]);
    if (!file.ok()) return fail(file.status().to_string());
    auto tok = ds4::tok::Tokenizer::from_gguf(**file);
    if (!tok.ok()) return fail(tok.status().to_string());
    std::string text;
    if (!read_file(argv[3], &text)) return fail(std::string("cannot read ") + argv[3]);
    std::string out;
    if (cmd == "encode") {
      append_ids(tok->encode(text), &out);
      std::fwrite(out.data(), 1, out.size(), stdout);
      return 0;
    }
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t nl = text.find('\n', pos);
      if (nl == std::string::npos) return fail("batch: missing length line");
      const size_t len = std::strtoull(text.c_str() + pos, nullptr, 10);
      if (nl + 1 + len > text.size()) return fail("batch: record runs past the end");
      const std::string_view x(text.data() + nl + 1, len);
      pos = nl + 1 + len;
      const auto plain = tok->encode(x);
      const auto added = tok->encode_with_added(x);
      append_ids(plain, &out);
      append_ids(added, &out);
      std::string checks;
      if (tok->decode(plain) != x || tok->decode(added) != x) checks += " roundtrip";
      ds4::tok::StreamDecoder sd(*tok);
      std::string streamed;
      bool stream_ok = true;
      const bool x_valid = valid_utf8(x);
      for (int32_t id : plain) {
        const std::string step = sd.push(id);
        if (x_valid && !valid_utf8(step)) stream_ok = false;
        streamed += step;
      }
      streamed += sd.flush();
      if (!stream_ok || streamed != x) checks += " stream";
      out += checks.empty() ? "ok\n" : checks.substr(1) + "\n";
    }
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  }
  std::fprintf(stderr,
               "usage: ds4-tok-pieces pieces [--v4] FILE\n"
               "       ds4-tok-pieces encode TOKENIZER.gguf FILE\n"
               "       ds4-tok-pieces batch TOKENIZER.gguf FILE\n");
  return 2;
}
