// tokenizer/tokenizer.h — DS4 byte-level BPE tokenizer (ds4-architecture.md §8.1-8.4).
//
// Role: text <-> token ids for the DS4 vocabulary read from GGUF metadata
// (tokenizer.ggml.tokens / merges / token_type), with the hand-written DS4 ("JoyAI")
// pre-tokenizer or, for the real DeepSeek V4 vocabulary, the exact split of its published
// tokenizer.json (PretokMode), GPT-2 byte<->code point mapping, smallest-rank-first merging, the 7 DS4
// special tokens, and a streaming UTF-8 detokenizer.
//
// Invariants:
//   * encode() never fails and is total over arbitrary bytes (invalid UTF-8 included);
//     decode(encode(s)) == s for every byte string s.
//   * encode() does NOT recognize special-token strings; encode_rendered() emits the 7 DS4
//     special strings (SpecialTokens) as their ids and BPE-encodes the spans between them.
//   * decode() is total: ids outside [0, n_vocab) decode to U+FFFD ("\xEF\xBF\xBD").
//     Token bytes follow ds4 (§8.1): a token containing U+FF5C is emitted literally; any other
//     token maps its code points back through the GPT-2 byte map, dropping code points that
//     are not the image of a byte.
//   * A loaded Tokenizer is immutable; all const methods are safe to call concurrently.
//     encode*() keeps a bounded per-thread piece cache (at most ~8 MB per encoding thread, keyed
//     by a per-Tokenizer instance number, so it is never stale); results never depend on it.
//   * Load-time validation (create/from_gguf) guarantees: non-empty vocab, no duplicate token
//     strings, every merge names two known tokens and its concatenation is a token, all 256
//     GPT-2 byte symbols are tokens, all 7 special tokens are present.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ds4::gguf {
class File;
}

namespace ds4::tok {

// GGUF tokenizer.ggml.token_type values (the llama.cpp/GGUF convention).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Spellings of the DS4 special tokens (｜ is U+FF5C, ▁ is U+2581).
inline constexpr std::string_view kBosText = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
inline constexpr std::string_view kEosText = "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
inline constexpr std::string_view kUserText = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";
inline constexpr std::string_view kAssistantText = "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>";
inline constexpr std::string_view kThinkOpenText = "<think>";
inline constexpr std::string_view kThinkCloseText = "</think>";
inline constexpr std::string_view kDsmlText = "\xEF\xBD\x9C" "DSML\xEF\xBD\x9C";

// Ids of the 7 special tokens, found by string lookup at load time (never hard-coded).
struct SpecialTokens {
  int32_t bos = -1;          // <｜begin▁of▁sentence｜>
  int32_t eos = -1;          // <｜end▁of▁sentence｜>  (generation stops here)
  int32_t user = -1;         // <｜User｜>
  int32_t assistant = -1;    // <｜Assistant｜>
  int32_t think_open = -1;   // <think>
  int32_t think_close = -1;  // </think>
  int32_t dsml = -1;         // ｜DSML｜
};

// Which pre-tokenizer cuts text into pieces.
//   kDs4Scanner:  ds4's hand-written JoyAI splitter (§8.2, ASCII classes, every non-ASCII byte
//                 letter-like). Used for the project's own vocabularies (tiny models, tok2k).
//   kDeepSeekV4:  the exact split of the published DeepSeek V4 tokenizer.json (Unicode
//                 classes, three-stage Split; pretok_regex.cpp), equal to the `tokenizers`
//                 package on valid UTF-8.
//   kAuto:        kDeepSeekV4 for the real V4 vocabulary (kDeepSeekV4Tokens tokens and
//                 kDeepSeekV4Merges merges, as imported by tools/tokenizer/import_deepseek_v4.py
//                 or stored in the published ds4 GGUF files), else kDs4Scanner.
enum class PretokMode { kAuto, kDs4Scanner, kDeepSeekV4 };
inline constexpr int32_t kDeepSeekV4Tokens = 129280;
inline constexpr int32_t kDeepSeekV4Merges = 127741;

// Raw vocabulary as stored in GGUF metadata; also what synthetic_vocab() produces.
struct VocabData {
  std::vector<std::string> tokens;    // id -> GPT-2-mapped token string
  std::vector<std::string> merges;    // rank -> "A B"
  std::vector<int32_t> token_types;   // id -> TokenType value (may be empty)
  PretokMode pretok = PretokMode::kAuto;
};

// GPT-2 byte-level map: byte -> code point (bytes 33-126, 161-172, 174-255 map to
// themselves; the other 68 map to 256+n in byte order).
uint32_t byte_to_codepoint(uint8_t byte);
// Inverse; returns -1 for code points that are not the image of a byte.
int byte_from_codepoint(uint32_t cp);
// Maps raw bytes to the GPT-2 code point string (UTF-8 encoded).
std::string bytes_to_symbols(std::string_view bytes);

// DS4 pre-tokenizer (§8.2): cuts text into pieces; returns [begin, end) byte offsets
// (32-bit: text < 4 GiB; encode() has no such limit). Total over arbitrary bytes; the pieces
// tile the input exactly.
// mode must not be kAuto (kAuto is treated as kDs4Scanner here).
void pretokenize(std::string_view text, std::vector<std::pair<uint32_t, uint32_t>>* pieces,
                 PretokMode mode = PretokMode::kDs4Scanner);
std::vector<std::string> pretokenize_strings(std::string_view text,
                                             PretokMode mode = PretokMode::kDs4Scanner);

class Tokenizer {
 public:
  // tokens: id -> token string; merges: rank -> "A B"; token_types: empty or one per token.
  static Expected<Tokenizer> create(std::vector<std::string> tokens,
                                    std::vector<std::string> merges,
                                    std::vector<int32_t> token_types = {},
                                    PretokMode pretok = PretokMode::kAuto);
  static Expected<Tokenizer> create(VocabData vocab);
  // Reads tokenizer.ggml.tokens, tokenizer.ggml.merges and (optional) tokenizer.ggml.token_type.
  static Expected<Tokenizer> from_gguf(const gguf::File& file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Plain text: special-token strings are NOT recognized.
  std::vector<int32_t> encode(std::string_view text) const;
  void encode_append(std::string_view text, std::vector<int32_t>* out) const;
  // Rendered chat text: the 7 special strings are emitted as their ids (§8.4).
  std::vector<int32_t> encode_rendered(std::string_view text) const;
  void encode_rendered_append(std::string_view text, std::vector<int32_t>* out) const;
  // Every added token (token_type kControl or kUserDefined, e.g. all 1,283 of the V4
  // vocabulary) is recognized by its string, leftmost-longest, as the `tokenizers` package
  // does by default; the spans between them are BPE-encoded. For checks and tools: neither
  // the plain nor the chat path uses it (raw user text cannot inject control tokens).
  std::vector<int32_t> encode_with_added(std::string_view text) const;

  // The pre-tokenizer in use (never kAuto).
  PretokMode pretok_mode() const;

  // Concatenated bytes of the tokens (may be invalid UTF-8). Out-of-range ids -> U+FFFD.
  std::string decode(std::span<const int32_t> ids) const;
  // Bytes of one token (may be a partial UTF-8 sequence). Out-of-range id -> U+FFFD.
  // The view stays valid for the Tokenizer's lifetime.
  std::string_view token_bytes(int32_t id) const;
  // The stored (GPT-2-mapped) token string; "" for out-of-range ids.
  std::string_view token_text(int32_t id) const;
  // Id of an exact token string, or -1.
  int32_t token_id(std::string_view token_text) const;
  TokenType token_type(int32_t id) const;

  int32_t n_vocab() const;
  int32_t n_merges() const;
  bool valid_id(int32_t id) const { return id >= 0 && id < n_vocab(); }
  const SpecialTokens& special() const;
  int32_t bos() const { return special().bos; }
  int32_t eos() const { return special().eos; }
  // True for the 7 DS4 special ids.
  bool is_special(int32_t id) const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Streaming detokenizer: push ids one at a time, receive only complete UTF-8 characters.
// A trailing prefix of a multi-byte sequence that may still complete is held back.
// Choice (documented): by default invalid bytes (stray continuation bytes, bad lead bytes,
// truncated sequences that cannot complete) are passed through unchanged, so the
// concatenation of all push() results plus flush() equals Tokenizer::decode() of the same ids
// byte for byte, for any ids. With replace_invalid = true each invalid byte becomes U+FFFD
// instead (output is then always valid UTF-8; equal to decode() when decode() is valid UTF-8).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool replace_invalid = false);
  // Returns the newly completed text (possibly empty).
  std::string push(int32_t id);
  void push(int32_t id, std::string* out);
  // Emits whatever is held back (an incomplete sequence) and resets.
  std::string flush();
  bool has_pending() const { return !pending_.empty(); }

 private:
  void drain(std::string* out, bool final);
  const Tokenizer* tok_;
  bool replace_invalid_;
  std::string pending_;  // bytes not yet emitted (always < 4, a possible UTF-8 prefix)
};

// Synthetic vocabulary for generated test models (ds4-gguf generate).
// n_vocab >= 263. Contains the 7 specials (type kControl), the 256 GPT-2 byte symbols and
// filler tokens made by deterministic valid merges (each merge result is a token).
// Special ids: for n_vocab == 129280 the real DeepSeek V4 ids (BOS=0, EOS=1, User=128803,
// Assistant=128804, <think>=128821, </think>=128822, ｜DSML｜=128825; other ids in the
// 128800+ block are "<｜place▁holder▁no▁N｜>" control tokens). For any other size:
// BOS=0, EOS=1, User=2, Assistant=3, <think>=4, </think>=5, ｜DSML｜=6, byte symbols 7..262.
Expected<VocabData> synthetic_vocab(int n_vocab);

}  // namespace ds4::tok
