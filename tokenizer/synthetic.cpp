// tokenizer/synthetic.cpp — deterministic synthetic vocabulary for generated test models.
//
// Layout (documented in tokenizer.h): the 7 DS4 specials at fixed ids, the 256 GPT-2 byte
// symbols, then filler tokens made by merges in rounds over a small alphabet P
// (Ġ = space, lowercase letters, digits, a few capitals): round 1 merges p q for all p, q in P,
// round r+1 merges t q for every token t of round r (in creation order) and q in P, until the
// vocabulary is full. Every filler string splits uniquely into (previous-round token, one
// symbol), so no token repeats, and every merge result is a token. Ranks follow creation
// order, so common short pieces merge first.
#include <string>
#include <unordered_set>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ds4::tok {

namespace detail {
void append_codepoint_utf8(uint32_t cp, std::string* out);
}

namespace {
constexpr int kFlashVocab = 129280;
}

Expected<VocabData> synthetic_vocab(int n_vocab) {
  constexpr int kMin = 256 + 7;
  if (n_vocab < kMin)
    return invalid_argument("synthetic_vocab: n_vocab %d is too small (minimum %d: 7 specials + "
                            "256 byte tokens)",
                            n_vocab, kMin);
  VocabData v;
  v.tokens.assign(size_t(n_vocab), std::string());
  v.token_types.assign(size_t(n_vocab), int32_t(TokenType::kNormal));
  std::vector<bool> taken(size_t(n_vocab), false);
  auto place = [&](int id, std::string_view text, TokenType type) {
    v.tokens[id] = std::string(text);
    v.token_types[id] = int32_t(type);
    taken[id] = true;
  };
  const std::string_view specials[7] = {kBosText,        kEosText,         kUserText, kAssistantText,
                                        kThinkOpenText, kThinkCloseText, kDsmlText};
  if (n_vocab == kFlashVocab) {
    const int ids[7] = {0, 1, 128803, 128804, 128821, 128822, 128825};
    for (int k = 0; k < 7; ++k) place(ids[k], specials[k], TokenType::kControl);
    // The rest of the 128800..128831 block: placeholder control tokens (as in V4's added block).
    for (int id = 128800; id < 128832; ++id) {
      if (taken[id]) continue;
      place(id, "<\xEF\xBD\x9Cplace\xE2\x96\x81holder\xE2\x96\x81no\xE2\x96\x81" +
                    std::to_string(id) + "\xEF\xBD\x9C>",
            TokenType::kControl);
    }
  } else {
    for (int k = 0; k < 7; ++k) place(k, specials[k], TokenType::kControl);
  }
  int cursor = 0;
  auto next_free = [&]() -> int {
    while (cursor < n_vocab && taken[cursor]) ++cursor;
    return cursor < n_vocab ? cursor : -1;
  };
  std::unordered_set<std::string> seen(v.tokens.begin(), v.tokens.end());
  std::vector<std::string> byte_sym(256);
  for (int b = 0; b < 256; ++b) {
    detail::append_codepoint_utf8(byte_to_codepoint(uint8_t(b)), &byte_sym[b]);
    const int id = next_free();
    if (id < 0) return internal_error("synthetic_vocab: no room for byte tokens");
    place(id, byte_sym[b], TokenType::kNormal);
    seen.insert(byte_sym[b]);
  }
  // Alphabet P: Ġ (space), lowercase by English frequency, digits, frequent capitals.
  std::vector<std::string> alphabet;
  alphabet.push_back(byte_sym[' ']);
  for (char c : std::string_view("etaoinshrdlcumwfgypbvkjxqz0123456789ETAOINS"))
    alphabet.push_back(byte_sym[uint8_t(c)]);
  std::vector<std::string> round = alphabet;  // tokens of the previous round
  while (next_free() >= 0) {
    std::vector<std::string> made;
    for (const std::string& t : round) {
      for (const std::string& q : alphabet) {
        const int id = next_free();
        if (id < 0) break;
        std::string r = t + q;
        if (!seen.insert(r).second) continue;
        v.merges.push_back(t + " " + q);
        place(id, r, TokenType::kNormal);
        made.push_back(std::move(r));
      }
      if (next_free() < 0) break;
    }
    if (made.empty()) return internal_error("synthetic_vocab: filler generation stalled");
    round = std::move(made);
  }
  return v;
}

}  // namespace ds4::tok
