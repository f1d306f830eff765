// tests/tokenizer/tokenizer_fuzz.cpp — libFuzzer target for the tokenizer.
//
// Input bytes are used (a) as text: encode / encode_rendered must round-trip through decode,
// and streaming decode must equal whole decode; (b) as a sequence of little-endian int32 ids:
// decode and StreamDecoder must accept any ids (out-of-range included) without crashing, and
// streaming must still equal whole decode. Vocabulary: synthetic_vocab(4096), built once, and
// the same vocabulary with the exact DeepSeek V4 pre-tokenizer (its pieces must tile the
// input; encode and encode_with_added must round-trip).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

using ds4::tok::StreamDecoder;
using ds4::tok::Tokenizer;

namespace {
const Tokenizer& vocab() {
  static Tokenizer* tok = [] {
    auto v = ds4::tok::synthetic_vocab(4096);
    if (!v.ok()) std::abort();
    auto t = Tokenizer::create(std::move(v).value());
    if (!t.ok()) std::abort();
    return new Tokenizer(std::move(t).value());
  }();
  return *tok;
}

const Tokenizer& vocab_v4() {
  static Tokenizer* tok = [] {
    auto v = ds4::tok::synthetic_vocab(4096);
    if (!v.ok()) std::abort();
    v->pretok = ds4::tok::PretokMode::kDeepSeekV4;
    auto t = Tokenizer::create(std::move(v).value());
    if (!t.ok()) std::abort();
    return new Tokenizer(std::move(t).value());
  }();
  return *tok;
}

std::string streamed(const Tokenizer& t, const std::vector<int32_t>& ids, bool replace) {
  StreamDecoder sd(t, replace);
  std::string out;
  for (int32_t id : ids) sd.push(id, &out);
  out += sd.flush();
  return out;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& t = vocab();
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = t.encode(text);
  if (t.decode(ids) != text) std::abort();
  if (streamed(t, ids, false) != text) std::abort();
  const std::vector<int32_t> rendered = t.encode_rendered(text);
  if (t.decode(rendered) != text) std::abort();
  const Tokenizer& t4 = vocab_v4();
  std::vector<std::pair<uint32_t, uint32_t>> pieces;
  ds4::tok::pretokenize(text, &pieces, ds4::tok::PretokMode::kDeepSeekV4);
  uint32_t at = 0;
  for (auto [b, e] : pieces) {
    if (b != at || e <= b) std::abort();
    at = e;
  }
  if (at != size) std::abort();
  if (t4.decode(t4.encode(text)) != text) std::abort();
  if (t4.decode(t4.encode_with_added(text)) != text) std::abort();
  std::vector<int32_t> raw(size / 4);
  if (!raw.empty()) std::memcpy(raw.data(), data, raw.size() * 4);
  const std::string whole = t.decode(raw);
  if (streamed(t, raw, false) != whole) std::abort();
  (void)streamed(t, raw, true);
  return 0;
}
