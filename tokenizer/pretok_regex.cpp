// tokenizer/pretok_regex.cpp — the exact DeepSeek V4 pre-tokenizer (the published tokenizer.json).
//
// The published tokenizer splits text in three stages, each on the pieces of the one before
// ("Isolated": matches and the unmatched spans between them are both pieces):
//   1. \p{N}{1,3}
//   2. [\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+        (CJK / Hiragana / Katakana)
//   3. A1 [ASCII punct][A-Za-z]+ | A2 [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ |
//      A3  ?[\p{P}\p{S}]+[\r\n]* | A4 \s*[\r\n]+ | A5 \s+(?!\S) | A6 \s+
// Stages 1-2 cut the text into segments of one "kind": N (numbers, cut into 1-3 chars),
// CJK runs, and everything else; stage 3 runs inside each segment, so every run below stops
// where the kind changes and A5's look-ahead sees a segment end as the end of the text. A
// stage-3 match never needs to look behind its start, so scanning piece by piece from the left
// reproduces the regex engine's leftmost-first search exactly. Where no alternative matches,
// the characters up to the next match start (or the segment end) form one piece.
// Unicode classes come from tokenizer/unicode_classes.inc (generated); tests/tokenizer checks
// the pieces against the `tokenizers` package on every code point and a mixed corpus.
// Invalid UTF-8 (which `tokenizers` cannot be given: its input is a Unicode string): each byte
// of a malformed sequence is one character of class "other" (like an unassigned code point),
// so it is total over arbitrary bytes and the pieces tile the input.
#include <cstdint>
#include <memory>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace ds4::tok {
namespace {

enum Cls : uint8_t { kOther = 0, kL, kM, kN, kP, kS, kWs };
enum Kind : uint8_t { kKindOther = 0, kKindNum, kKindCjk };

struct Run {
  uint32_t first;
  uint8_t cls;
};
constexpr Run kRuns[] = {
#include "tokenizer/unicode_classes.inc"
};

constexpr uint32_t kMaxCp = 0x110000;

// [kMaxCp] class byte per code point, expanded from kRuns once.
const uint8_t* class_table() {
  static const std::unique_ptr<uint8_t[]> table = [] {
    auto t = std::make_unique<uint8_t[]>(kMaxCp);
    constexpr size_t n = sizeof(kRuns) / sizeof(kRuns[0]);
    for (size_t r = 0; r < n; ++r) {
      const uint32_t end = r + 1 < n ? kRuns[r + 1].first : kMaxCp;
      for (uint32_t cp = kRuns[r].first; cp < end; ++cp) t[cp] = kRuns[r].cls;
    }
    return t;
  }();
  return table.get();
}

struct Ch {
  uint32_t len;  // bytes
  uint32_t cp;   // code point (the byte itself for a malformed byte)
  uint8_t cls;
  uint8_t kind;
};

inline bool cont(uint8_t b) { return (b & 0xC0) == 0x80; }

// ASCII classes without the big table (the common case).
constexpr uint8_t ascii_class(int c) {
  if (c == '\t' || c == '\n' || c == 0x0B || c == 0x0C || c == '\r' || c == ' ') return kWs;
  if (c >= '0' && c <= '9') return kN;
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return kL;
  if (c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '`' ||
      c == '|' || c == '~')
    return kS;
  if (c >= 0x21 && c <= 0x7E) return kP;
  return kOther;
}
constexpr auto make_ascii_classes() {
  struct T {
    uint8_t v[128];
  } t{};
  for (int c = 0; c < 128; ++c) t.v[c] = ascii_class(c);
  return t;
}
constexpr auto kAscii = make_ascii_classes();

// Strict UTF-8 decode of the character at s[i] (i < n).
#define DS4_TOK_INLINE inline __attribute__((always_inline))

DS4_TOK_INLINE Ch char_at(const uint8_t* s, size_t i, size_t n, const uint8_t* table) {
  const uint8_t c = s[i];
  if (c < 0x80) {
    const uint8_t cls = kAscii.v[c];
    return {1, c, cls, cls == kN ? uint8_t(kKindNum) : uint8_t(kKindOther)};
  }
  uint32_t cp = c, len = 1;
  bool ok = false;
  {
    if (c >= 0xC2 && c <= 0xDF) {
      if (i + 1 < n && cont(s[i + 1])) {
        cp = (uint32_t(c & 0x1F) << 6) | (s[i + 1] & 0x3F);
        len = 2;
        ok = true;
      }
    } else if (c >= 0xE0 && c <= 0xEF) {
      if (i + 2 < n && cont(s[i + 1]) && cont(s[i + 2])) {
        const uint8_t b1 = s[i + 1];
        if ((c != 0xE0 || b1 >= 0xA0) && (c != 0xED || b1 < 0xA0)) {
          cp = (uint32_t(c & 0x0F) << 12) | (uint32_t(b1 & 0x3F) << 6) | (s[i + 2] & 0x3F);
          len = 3;
          ok = true;
        }
      }
    } else if (c >= 0xF0 && c <= 0xF4) {
      if (i + 3 < n && cont(s[i + 1]) && cont(s[i + 2]) && cont(s[i + 3])) {
        const uint8_t b1 = s[i + 1];
        if ((c != 0xF0 || b1 >= 0x90) && (c != 0xF4 || b1 < 0x90)) {
          cp = (uint32_t(c & 0x07) << 18) | (uint32_t(b1 & 0x3F) << 12) |
               (uint32_t(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
          len = 4;
          ok = true;
        }
      }
    }
  }
  if (!ok) return {1, c, kOther, kKindOther};
  const uint8_t cls = table[cp];
  uint8_t kind = kKindOther;
  if (cls == kN) {
    kind = kKindNum;
  } else if ((cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF)) {
    kind = kKindCjk;
  }
  return {len, cp, cls, kind};
}

inline bool ascii_punct(uint32_t cp) {
  return (cp >= 0x21 && cp <= 0x2F) || (cp >= 0x3A && cp <= 0x40) || (cp >= 0x5B && cp <= 0x60) ||
         (cp >= 0x7B && cp <= 0x7E);
}
inline bool ascii_letter(uint32_t cp) { return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z'; }
inline bool is_lm(uint8_t cls) { return cls == kL || cls == kM; }
inline bool is_ps(uint8_t cls) { return cls == kP || cls == kS; }
inline bool is_nl(uint32_t cp) { return cp == '\r' || cp == '\n'; }

class Scanner {
 public:
  Scanner(std::string_view text) : s_(reinterpret_cast<const uint8_t*>(text.data())),
                                   n_(text.size()), table_(class_table()) {}

  size_t piece_end(size_t i) const {
    const Ch c = at(i);
    kind_ = c.kind;
    if (c.kind == kKindNum) {  // stage 1: up to 3 number characters
      size_t j = i + c.len;
      for (int k = 1; k < 3 && j < n_; ++k) {
        const Ch d = at(j);
        if (d.kind != kKindNum) break;
        j += d.len;
      }
      return j;
    }
    if (size_t e = match(i, c)) return e;
    // No alternative matches at i: the unmatched span runs to the next match start.
    size_t k = i + c.len;
    while (k < n_) {
      const Ch d = at(k);
      if (d.kind != kind_ || match(k, d)) break;
      k += d.len;
    }
    return k;
  }

 private:
  DS4_TOK_INLINE Ch at(size_t i) const { return char_at(s_, i, n_, table_); }
  // The character at i if it is inside the current segment (same kind), else len 0.
  DS4_TOK_INLINE Ch seg(size_t i) const {
    if (i >= n_) return {0, 0, kOther, kKindOther};
    Ch c = at(i);
    if (c.kind != kind_) c.len = 0;
    return c;
  }
  // [L M]+ run from j, with an ASCII-letter fast path.
  size_t run_lm(size_t j) const {
    for (;;) {
      if (kind_ == kKindOther) {  // ASCII letters belong to "other" segments only
        while (j < n_ && s_[j] < 0x80 && kAscii.v[s_[j]] == kL) ++j;
        if (j >= n_ || s_[j] < 0x80) return j;
      }
      const Ch d = seg(j);
      if (!d.len || !is_lm(d.cls)) return j;
      j += d.len;
    }
  }
  size_t run(size_t j, bool (*pred)(uint8_t)) const {
    for (Ch d = seg(j); d.len && pred(d.cls); d = seg(j)) j += d.len;
    return j;
  }
  size_t newline_run(size_t j) const {
    for (Ch d = seg(j); d.len && is_nl(d.cp); d = seg(j)) j += d.len;
    return j;
  }

  // End of the stage-3 match starting at i (c = the character at i), or 0 if none.
  size_t match(size_t i, const Ch& c) const {
    const size_t i1 = i + c.len;
    const Ch next = seg(i1);
    // A1
    if (ascii_punct(c.cp) && c.len == 1 && next.len && ascii_letter(next.cp)) {
      size_t j = i1 + 1;
      while (j < n_ && ascii_letter(s_[j])) ++j;  // ASCII letters never change the kind
      return j;
    }
    // A2: optional prefix (not \r \n L P S), then [L M]+.
    if (!is_nl(c.cp) && c.cls != kL && !is_ps(c.cls) && next.len && is_lm(next.cls))
      return run_lm(i1);
    if (is_lm(c.cls)) return run_lm(i1);
    // A3
    if (c.cp == ' ' && next.len && is_ps(next.cls))
      return newline_run(run(i1, [](uint8_t k) { return is_ps(k); }));
    if (is_ps(c.cls)) return newline_run(run(i1, [](uint8_t k) { return is_ps(k); }));
    if (c.cls != kWs) return 0;
    // A4-A6 on the whitespace run [i, j).
    size_t j = i, last_nl = 0, last_start = i;
    bool has_nl = false;
    int count = 0;
    for (Ch d = seg(j); d.len && d.cls == kWs; d = seg(j)) {
      if (is_nl(d.cp)) {
        has_nl = true;
        last_nl = j;
      }
      last_start = j;
      j += d.len;
      ++count;
    }
    if (has_nl) return last_nl + 1;            // A4: ends after the run's last newline
    if (seg(j).len == 0) return j;             // A5: the run reaches the segment end
    if (count >= 2) return last_start;         // A5: all but the last character
    return j;                                  // A6
  }

  const uint8_t* s_;
  size_t n_;
  const uint8_t* table_;
  mutable uint8_t kind_ = kKindOther;
};

}  // namespace

namespace detail {
size_t next_piece_end_v4(std::string_view text, size_t i) { return Scanner(text).piece_end(i); }
}  // namespace detail

}  // namespace ds4::tok
