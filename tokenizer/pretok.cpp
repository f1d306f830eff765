// tokenizer/pretok.cpp — GPT-2 byte<->code point map and the DS4 pre-tokenizer (§8.2).
//
// The splitter is the hand-written "JoyAI" scanner of ds4-architecture.md §8.2, with ASCII-only
// character classes: every byte >= 0x80 is "letter-like". It is total over arbitrary bytes and
// reproduces ds4's handling of malformed UTF-8 too: a "character" is as long as its lead byte
// says (C0-DF: 2, E0-EF: 3, F0-F7: 4, anything else: 1; cut to 1 byte when it would run past
// the end of the text), continuation bytes are not checked, and the CJK test of rule 2 decodes
// that many bytes with the usual masks. Letter-like runs and CJK runs step by such characters,
// so a malformed lead byte can carry a following ASCII byte into the piece, as in ds4. On
// valid UTF-8 this is ordinary character-by-character scanning.
// (ds4 sees C strings, so it never meets a NUL byte; here NUL is an ordinary rule-9 byte.)
// tools/tokenizer/ds4_pretok.py mirrors this file rule for rule; tests/tokenizer checks that
// both produce the same pieces.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ds4::tok {
namespace {

enum : uint8_t {
  kDigit = 1,
  kLetter = 2,      // ASCII letter
  kNonAscii = 4,    // byte >= 0x80 (letter-like)
  kPunct = 8,
  kNewline = 16,    // \r \n
  kSpace = 32,      // ' ' \t \n \r \v \f
};

constexpr std::array<uint8_t, 256> make_classes() {
  std::array<uint8_t, 256> t{};
  for (int c = 0; c < 256; ++c) {
    uint8_t v = 0;
    if (c >= '0' && c <= '9') v |= kDigit;
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) v |= kLetter;
    if (c >= 0x80) v |= kNonAscii;
    if ((c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
        (c >= 0x7B && c <= 0x7E))
      v |= kPunct;
    if (c == '\r' || c == '\n') v |= kNewline;
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') v |= kSpace;
    t[c] = v;
  }
  return t;
}
constexpr std::array<uint8_t, 256> kClass = make_classes();

inline bool letter_like(uint8_t c) { return kClass[c] & (kLetter | kNonAscii); }

// Byte length of the character at s[i] judged by its lead byte (ds4's rule), cut to 1 byte when
// it would run past the end of the text.
inline size_t char_len(const uint8_t* s, size_t i, size_t n) {
  const uint8_t c = s[i];
  size_t len = 1;
  if ((c & 0xE0) == 0xC0) len = 2;
  else if ((c & 0xF0) == 0xE0) len = 3;
  else if ((c & 0xF8) == 0xF0) len = 4;
  return i + len > n ? 1 : len;
}

// Length of the character at s[i] if it is a CJK/Hiragana/Katakana code point, else 0.
// Decodes char_len() bytes with the UTF-8 masks, without validating continuation bytes.
inline size_t cjk_len(const uint8_t* s, size_t i, size_t n) {
  if (i >= n || s[i] < 0x80) return 0;
  const size_t len = char_len(s, i, n);
  uint32_t cp;
  if (len == 3) {
    cp = (uint32_t(s[i] & 0x0F) << 12) | (uint32_t(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
  } else if (len == 4) {
    cp = (uint32_t(s[i] & 0x07) << 18) | (uint32_t(s[i + 1] & 0x3F) << 12) |
         (uint32_t(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
  } else {
    return 0;  // 1- and 2-byte characters are below U+3040
  }
  if ((cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x309F) ||
      (cp >= 0x30A0 && cp <= 0x30FF))
    return len;
  return 0;
}

// End of the maximal run of letter-like characters starting at j (stepping by characters).
inline size_t letter_run(const uint8_t* s, size_t j, size_t n) {
  while (j < n && letter_like(s[j])) j += char_len(s, j, n);
  return j;
}

// End of the piece that starts at i (i < n).
size_t piece_end(const uint8_t* s, size_t i, size_t n) {
  const uint8_t c = s[i];
  const uint8_t cls = kClass[c];
  // 1. up to 3 ASCII digits.
  if (cls & kDigit) {
    size_t j = i + 1;
    while (j < n && j - i < 3 && (kClass[s[j]] & kDigit)) ++j;
    return j;
  }
  // 2. run of CJK/Hiragana/Katakana code points (tested only at the piece start).
  if (cls & kNonAscii) {
    size_t len = cjk_len(s, i, n);
    if (len) {
      size_t j = i + len;
      while ((len = cjk_len(s, j, n)) != 0) j += len;
      return j;
    }
    // 4. (non-ASCII start) maximal letter-like run.
    return letter_run(s, i, n);
  }
  // 3. punct immediately followed by an ASCII letter: punct + ASCII letter run.
  if ((cls & kPunct) && i + 1 < n && (kClass[s[i + 1]] & kLetter)) {
    size_t j = i + 2;
    while (j < n && (kClass[s[j]] & kLetter)) ++j;
    return j;
  }
  // 4. maximal letter-like run.
  if (cls & kLetter) return letter_run(s, i, n);
  // 5. one char that is neither newline nor punct, followed by a letter-like run.
  if (!(cls & (kNewline | kPunct)) && i + 1 < n && letter_like(s[i + 1]))
    return letter_run(s, i + 1, n);
  // 6. U+0020 followed by punct: space + punct run + [\r\n]* run.
  // 7. punct: punct run + [\r\n]* run.
  if ((c == ' ' && i + 1 < n && (kClass[s[i + 1]] & kPunct)) || (cls & kPunct)) {
    size_t j = (cls & kPunct) ? i + 1 : i + 2;
    while (j < n && (kClass[s[j]] & kPunct)) ++j;
    while (j < n && (kClass[s[j]] & kNewline)) ++j;
    return j;
  }
  // 8. space-class run.
  if (cls & kSpace) {
    size_t j = i + 1;
    while (j < n && (kClass[s[j]] & kSpace)) ++j;
    size_t last_nl = n;
    for (size_t k = j; k > i; --k) {
      if (kClass[s[k - 1]] & kNewline) {
        last_nl = k - 1;
        break;
      }
    }
    if (last_nl != n) return last_nl + 1;
    if (j - i > 1 && j < n && (letter_like(s[j]) || (kClass[s[j]] & kPunct))) return j - 1;
    return j;
  }
  // 9. one character (only ASCII control bytes get here: non-ASCII is letter-like).
  return i + char_len(s, i, n);
}

constexpr std::array<uint32_t, 256> make_byte_map() {
  std::array<uint32_t, 256> m{};
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool self = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    m[b] = self ? uint32_t(b) : next++;
  }
  return m;
}
constexpr std::array<uint32_t, 256> kByteToCp = make_byte_map();

void append_utf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(char(cp));
  } else if (cp < 0x800) {
    out->push_back(char(0xC0 | (cp >> 6)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(char(0xE0 | (cp >> 12)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(char(0xF0 | (cp >> 18)));
    out->push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(char(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

uint32_t byte_to_codepoint(uint8_t byte) { return kByteToCp[byte]; }

int byte_from_codepoint(uint32_t cp) {
  if (cp < 256) {
    return kByteToCp[cp] == cp ? int(cp) : -1;
  }
  if (cp >= 256 && cp < 256 + 68) {
    for (int b = 0; b < 256; ++b)
      if (kByteToCp[b] == cp) return b;
  }
  return -1;
}

std::string bytes_to_symbols(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(kByteToCp[b], &out);
  return out;
}

namespace detail {
size_t next_piece_end_v4(std::string_view text, size_t i);
}  // namespace detail

void pretokenize(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>* pieces,
                 PretokMode mode) {
  pieces->clear();
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const size_t j = mode == PretokMode::kDeepSeekV4 ? detail::next_piece_end_v4(text, i)
                                                     : piece_end(s, i, n);
    pieces->emplace_back(uint32_t(i), uint32_t(j));
    i = j;
  }
}

std::vector<std::string> pretokenize_strings(std::string_view text, PretokMode mode) {
  std::vector<std::pair<uint32_t, uint32_t>> pieces;
  pretokenize(text, &pieces, mode);
  std::vector<std::string> out;
  out.reserve(pieces.size());
  for (auto [b, e] : pieces) out.emplace_back(text.substr(b, e - b));
  return out;
}

namespace detail {
// Shared with tokenizer.cpp: next piece end without materializing the piece list.
size_t next_piece_end(std::string_view text, size_t i) {
  return piece_end(reinterpret_cast<const uint8_t*>(text.data()), i, text.size());
}
void append_codepoint_utf8(uint32_t cp, std::string* out) { append_utf8(cp, out); }
}  // namespace detail

}  // namespace ds4::tok
