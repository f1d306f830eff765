// Golden tests for the exact DeepSeek V4 pre-tokenizer (tokenizer/pretok_regex.cpp): the
// three-stage Split of the published tokenizer.json. Expected pieces are derived by hand from
// the regular expressions; tests/tokenizer/check_real_vocab.py checks the splitter against the
// `tokenizers` package on every code point and a mixed corpus.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ds4::tok {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(std::string_view s) { return pretokenize_strings(s, PretokMode::kDeepSeekV4); }

TEST(PretokV4, NumbersAreIsolatedFirst) {
  EXPECT_EQ(split("12345"), (Pieces{"123", "45"}));
  // Unicode digits too (Arabic-Indic, superscripts, circled), and a number ends a space run.
  EXPECT_EQ(split("\xD9\xA1\xD9\xA2\xD9\xA3\xD9\xA4"),
            (Pieces{"\xD9\xA1\xD9\xA2\xD9\xA3", "\xD9\xA4"}));
  EXPECT_EQ(split("a   123"), (Pieces{"a", "   ", "123"}));  // \s+(?!\S) at the segment end
  EXPECT_EQ(split("x\xC2\xB2y"), (Pieces{"x", "\xC2\xB2", "y"}));  // U+00B2 is \p{N}
}

TEST(PretokV4, CjkRunsAreSegments) {
  EXPECT_EQ(split("abc\xE4\xB8\xAD\xE6\x96\x87" "def"), (Pieces{"abc", "\xE4\xB8\xAD\xE6\x96\x87", "def"}));
  // é then CJK: the CJK run is its own segment (ds4's scanner would keep them together).
  EXPECT_EQ(split("\xC3\xA9\xE4\xB8\xAD"), (Pieces{"\xC3\xA9", "\xE4\xB8\xAD"}));
  // U+30FB KATAKANA MIDDLE DOT is inside the Katakana range but is \p{P}.
  EXPECT_EQ(split("\xE3\x82\xA2\xE3\x83\xBB\xE3\x82\xA2"),
            (Pieces{"\xE3\x82\xA2", "\xE3\x83\xBB", "\xE3\x82\xA2"}));
}

TEST(PretokV4, LettersAndPrefix) {
  EXPECT_EQ(split("hello world"), (Pieces{"hello", " world"}));
  EXPECT_EQ(split("don't"), (Pieces{"don", "'t"}));
  EXPECT_EQ(split("\t\tfoo"), (Pieces{"\t", "\tfoo"}));
  EXPECT_EQ(split("x\xCC\x81y"), (Pieces{"x\xCC\x81y"}));  // combining mark stays in the word
  EXPECT_EQ(split("\n\nab"), (Pieces{"\n\n", "ab"}));       // a newline is never the prefix
}

TEST(PretokV4, UnicodePunctuationIsNotALetter) {
  // ds4's scanner treats every non-ASCII byte as letter-like; the real tokenizer does not.
  EXPECT_EQ(split("\xC2\xAB" "ciao\xC2\xBB"), (Pieces{"\xC2\xAB", "ciao", "\xC2\xBB"}));
  EXPECT_EQ(split("a \xE2\x80\x94 b"), (Pieces{"a", " \xE2\x80\x94", " b"}));
}

TEST(PretokV4, PunctuationRuns) {
  EXPECT_EQ(split("a, b"), (Pieces{"a", ",", " b"}));
  EXPECT_EQ(split("x ;;\n\ny"), (Pieces{"x", " ;;\n\n", "y"}));
  EXPECT_EQ(split("$abc"), (Pieces{"$abc"}));                 // ASCII punct + ASCII letters
  EXPECT_EQ(split("$\xC3\xA9"), (Pieces{"$", "\xC3\xA9"}));  // ... but not a non-ASCII letter
}

TEST(PretokV4, WhitespaceRuns) {
  EXPECT_EQ(split("a \n  b"), (Pieces{"a", " \n", " ", " b"}));
  EXPECT_EQ(split("a    b"), (Pieces{"a", "   ", " b"}));
  EXPECT_EQ(split("a  "), (Pieces{"a", "  "}));
  EXPECT_EQ(split("\xE3\x80\x80\xE3\x80\x80x"), (Pieces{"\xE3\x80\x80", "\xE3\x80\x80x"}));  // U+3000
}

TEST(PretokV4, UnmatchedCharactersGroupUntilTheNextMatch) {
  EXPECT_EQ(split(std::string_view("\x00\x01 ", 3)), (Pieces{std::string("\x00\x01", 2), " "}));
  EXPECT_EQ(split("\x01" "ab"), (Pieces{"\x01" "ab"}));  // the prefix of rule A2
}

TEST(PretokV4, InvalidUtf8IsTotalAndTiles) {
  const std::string text = "ok \xFF\xFE\xC3 x\xE4\xB8";
  const Pieces p = split(text);
  std::string joined;
  for (const auto& s : p) joined += s;
  EXPECT_EQ(joined, text);
  EXPECT_EQ(p, (Pieces{"ok", " ", "\xFF\xFE\xC3", " x", "\xE4\xB8"}));
}

TEST(PretokV4, ModeSelection) {
  auto small = synthetic_vocab(512);
  ASSERT_TRUE(small.ok());
  auto tok = Tokenizer::create(*small);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(tok->pretok_mode(), PretokMode::kDs4Scanner);  // not the V4 vocabulary: ds4's scanner
  VocabData forced = *small;
  forced.pretok = PretokMode::kDeepSeekV4;
  auto tok4 = Tokenizer::create(std::move(forced));
  ASSERT_TRUE(tok4.ok());
  EXPECT_EQ(tok4->pretok_mode(), PretokMode::kDeepSeekV4);
  const std::string text = "Â«" "ciao";
  EXPECT_EQ(tok4->decode(tok4->encode(text)), text);
}

TEST(PretokV4, EncodeWithAddedRecognizesControlTokens) {
  auto v = synthetic_vocab(512);
  ASSERT_TRUE(v.ok());
  auto tok = Tokenizer::create(*v);
  ASSERT_TRUE(tok.ok());
  const std::string text = std::string("a") + std::string(kThinkOpenText) + "b" + std::string(kEosText);
  const auto ids = tok->encode_with_added(text);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids[ids.size() - 1], tok->eos());
  EXPECT_EQ(tok->decode(ids), text);
  EXPECT_NE(std::find(ids.begin(), ids.end(), tok->special().think_open), ids.end());
  const auto plain = tok->encode(text);  // plain text never yields a control token
  EXPECT_EQ(std::find(plain.begin(), plain.end(), tok->special().think_open), plain.end());
  EXPECT_EQ(tok->decode(plain), text);
}

}  // namespace
}  // namespace ds4::tok
