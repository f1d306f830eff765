// Golden tests for the DS4 pre-tokenizer (ds4-architecture.md §8.2), one group per rule.
// The expected pieces are derived by hand from the rules; tests/tokenizer/check_tokenizer.py
// additionally checks the C++ splitter against the Python mirror on large inputs.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace ds4::tok {
namespace {

using Pieces = std::vector<std::string>;

Pieces split(std::string_view s) { return pretokenize_strings(s); }

TEST(Pretok, EmptyText) { EXPECT_TRUE(split("").empty()); }

TEST(Pretok, Rule1DigitsInGroupsOfThree) {
  EXPECT_EQ(split("12345"), (Pieces{"123", "45"}));
  EXPECT_EQ(split("1234567"), (Pieces{"123", "456", "7"}));
  EXPECT_EQ(split("a1b"), (Pieces{"a", "1", "b"}));
  EXPECT_EQ(split("3.14"), (Pieces{"3", ".", "14"}));
  EXPECT_EQ(split("x2024y"), (Pieces{"x", "202", "4", "y"}));
}

TEST(Pretok, Rule2CjkRuns) {
  EXPECT_EQ(split("中文字符abc"), (Pieces{"中文字符", "abc"}));
  EXPECT_EQ(split("かなカナ漢字"), (Pieces{"かなカナ漢字"}));  // Hiragana+Katakana+CJK
  EXPECT_EQ(split("中文é"), (Pieces{"中文", "é"}));
  EXPECT_EQ(split("123中文"), (Pieces{"123", "中文"}));
  // The CJK test is made only at a piece start: a run begun by é or an ASCII letter takes
  // the CJK code points that follow it.
  EXPECT_EQ(split("é中文"), (Pieces{"é中文"}));
  EXPECT_EQ(split("abc中文"), (Pieces{"abc中文"}));
  // U+9FA6 is outside the CJK range of rule 2: plain letter-like.
  EXPECT_EQ(split("\xE9\xBE\xA6" "中"), (Pieces{"\xE9\xBE\xA6" "中"}));
}

TEST(Pretok, Rule3PunctThenAsciiLetters) {
  EXPECT_EQ(split("'hello"), (Pieces{"'hello"}));
  EXPECT_EQ(split("don't"), (Pieces{"don", "'t"}));
  EXPECT_EQ(split("#include"), (Pieces{"#include"}));
  EXPECT_EQ(split(".x"), (Pieces{".x"}));
  // Only ASCII letters follow the punct.
  EXPECT_EQ(split("'été"), (Pieces{"'", "été"}));
  EXPECT_EQ(split("'abé"), (Pieces{"'ab", "é"}));
  // A punct run does not qualify as a whole: rule 7 takes "..." and the word is separate.
  EXPECT_EQ(split("...abc"), (Pieces{"...", "abc"}));
}

TEST(Pretok, Rule4LetterLikeRuns) {
  EXPECT_EQ(split("hello"), (Pieces{"hello"}));
  EXPECT_EQ(split("Perché così?"), (Pieces{"Perché", " così", "?"}));
  EXPECT_EQ(split("l\xE2\x80\x99uomo"), (Pieces{"l\xE2\x80\x99uomo"}));  // ’ is letter-like
  EXPECT_EQ(split("\xF0\x9F\x98\x80\xF0\x9F\x98\x83 ok"), (Pieces{"\xF0\x9F\x98\x80\xF0\x9F\x98\x83", " ok"}));
  // Invalid UTF-8: every byte >= 0x80 is letter-like.
  EXPECT_EQ(split("\xFF\xFE" "ab"), (Pieces{"\xFF\xFE" "ab"}));
  EXPECT_EQ(split("ab\xE4"), (Pieces{"ab\xE4"}));  // truncated lead at the end: 1 byte
}

TEST(Pretok, MalformedUtf8FollowsDs4) {
  // ds4 steps by the length its lead byte announces and does not check continuation bytes,
  // so a malformed lead byte carries the next byte(s) along, even ASCII ones.
  EXPECT_EQ(split("\xC3 x"), (Pieces{"\xC3 x"}));
  EXPECT_EQ(split("a\xE4!! b"), (Pieces{"a\xE4!!", " b"}));
  // The CJK test decodes with masks only: E4 B8 'A' reads as U+4E01 (CJK) ...
  EXPECT_EQ(split("\xE4\xB8" "AB"), (Pieces{"\xE4\xB8" "A", "B"}));
  // ... and E4 B8 E4 as U+4E24, after which the stray B8 starts a letter-like run.
  EXPECT_EQ(split("\xE4\xB8\xE4\xB8\x80x"), (Pieces{"\xE4\xB8\xE4", "\xB8\x80x"}));
  // An overlong 4-byte form of U+4E00 is CJK too.
  EXPECT_EQ(split("\xF0\x84\xB8\x80" "a"), (Pieces{"\xF0\x84\xB8\x80", "a"}));
}

TEST(Pretok, Rule5OneCharThenWord) {
  EXPECT_EQ(split(" hello"), (Pieces{" hello"}));
  EXPECT_EQ(split("hello world"), (Pieces{"hello", " world"}));
  EXPECT_EQ(split("\tfoo"), (Pieces{"\tfoo"}));
  EXPECT_EQ(split("\vfoo\fbar"), (Pieces{"\vfoo", "\fbar"}));
  EXPECT_EQ(split("a\x01" "b"), (Pieces{"a", "\x01" "b"}));  // control byte joins the word
  EXPECT_EQ(split("x \xFF\xFE y"), (Pieces{"x", " \xFF\xFE", " y"}));
  // Newlines never start a word piece.
  EXPECT_EQ(split("\nfoo"), (Pieces{"\n", "foo"}));
}

TEST(Pretok, Rule6SpaceThenPunct) {
  EXPECT_EQ(split("a !"), (Pieces{"a", " !"}));
  EXPECT_EQ(split(" ;\r\n\r\nx"), (Pieces{" ;\r\n\r\n", "x"}));
  EXPECT_EQ(split("x == y"), (Pieces{"x", " ==", " y"}));
  // Only U+0020: a tab before punct is its own piece (rule 8), then rule 7.
  EXPECT_EQ(split("\t.tab"), (Pieces{"\t", ".tab"}));
  EXPECT_EQ(split("\t!!"), (Pieces{"\t", "!!"}));
}

TEST(Pretok, Rule7PunctRunWithNewlines) {
  EXPECT_EQ(split("\">;\n\""), (Pieces{"\">;\n", "\""}));
  EXPECT_EQ(split("a.\n\nb"), (Pieces{"a", ".\n\n", "b"}));
  EXPECT_EQ(split("{}\r\n"), (Pieces{"{}\r\n"}));
  EXPECT_EQ(split("(1)"), (Pieces{"(", "1", ")"}));
  EXPECT_EQ(split("!!!x"), (Pieces{"!!!", "x"}));
}

TEST(Pretok, Rule8SpaceRuns) {
  // Run minus its last char before a word (the last char joins the word by rule 5).
  EXPECT_EQ(split("a  b"), (Pieces{"a", " ", " b"}));
  EXPECT_EQ(split("a    b"), (Pieces{"a", "   ", " b"}));
  // Before punct: the last space joins the punct run by rule 6 ...
  EXPECT_EQ(split("a   !"), (Pieces{"a", "  ", " !"}));
  // ... but a tab does not (rule 6 is for U+0020 only).
  EXPECT_EQ(split("a \t!"), (Pieces{"a", " ", "\t", "!"}));
  // A run with newlines ends after its last newline.
  EXPECT_EQ(split("x  \n  y"), (Pieces{"x", "  \n", " ", " y"}));
  EXPECT_EQ(split("\n\nabc"), (Pieces{"\n\n", "abc"}));
  EXPECT_EQ(split(" \n \n x"), (Pieces{" \n \n", " x"}));
  EXPECT_EQ(split("\r\n"), (Pieces{"\r\n"}));
  // Whole run at the end of the text or before a digit / control byte.
  EXPECT_EQ(split("x   "), (Pieces{"x", "   "}));
  EXPECT_EQ(split("x  1"), (Pieces{"x", "  ", "1"}));
  EXPECT_EQ(split("  \x01"), (Pieces{"  ", "\x01"}));
  // A single space before a digit stays alone.
  EXPECT_EQ(split("a 1"), (Pieces{"a", " ", "1"}));
}

TEST(Pretok, Rule9SingleCharacters) {
  EXPECT_EQ(split(std::string("\x00", 1)), (Pieces{std::string("\x00", 1)}));
  EXPECT_EQ(split("\x01!"), (Pieces{"\x01", "!"}));
  EXPECT_EQ(split("\x7f\x7f"), (Pieces{"\x7f", "\x7f"}));
}

TEST(Pretok, CodeSample) {
  EXPECT_EQ(split("int main(void) {\n\treturn 0;\n}\n"),
            (Pieces{"int", " main", "(void", ")", " {\n", "\treturn", " ", "0", ";\n", "}\n"}));
}

TEST(Pretok, PiecesTileArbitraryBytes) {
  std::string s;
  for (int i = 0; i < 4096; ++i) s.push_back(char((i * 7919 + 13) & 0xFF));
  std::vector<std::pair<uint32_t, uint32_t>> pieces;
  pretokenize(s, &pieces);
  uint32_t pos = 0;
  for (auto [b, e] : pieces) {
    ASSERT_EQ(b, pos);
    ASSERT_GT(e, b);
    pos = e;
  }
  EXPECT_EQ(pos, s.size());
}

TEST(ByteMap, Gpt2Mapping) {
  EXPECT_EQ(byte_to_codepoint('!'), uint32_t('!'));
  EXPECT_EQ(byte_to_codepoint('~'), uint32_t('~'));
  EXPECT_EQ(byte_to_codepoint(0xA1), 0xA1u);
  EXPECT_EQ(byte_to_codepoint(0xAD), 256u + 67u);  // the last of the 68 remapped bytes
  EXPECT_EQ(byte_to_codepoint(0x00), 256u);
  EXPECT_EQ(byte_to_codepoint(' '), 256u + 32u);   // 'Ġ' U+0120
  EXPECT_EQ(byte_to_codepoint('\n'), 256u + 10u);  // 'Ċ' U+010A
  EXPECT_EQ(bytes_to_symbols(" a\n"), "\xC4\xA0" "a" "\xC4\x8A");
  for (int b = 0; b < 256; ++b) EXPECT_EQ(byte_from_codepoint(byte_to_codepoint(uint8_t(b))), b);
  EXPECT_EQ(byte_from_codepoint(0xAD), -1);   // 0xAD is remapped, so U+00AD is no byte image
  EXPECT_EQ(byte_from_codepoint(0x4E00), -1);
}

}  // namespace
}  // namespace ds4::tok
