// Tokenizer tests: load-time validation, BPE merge semantics on hand-made vocabularies,
// special tokens, round-trip properties on synthetic and trained vocabularies, streaming
// decode, GGUF loading errors.
#include <gtest/gtest.h>

#include <functional>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "tokenizer/tokenizer.h"

namespace ds4::tok {
namespace {

std::string sym(std::string_view bytes) { return bytes_to_symbols(bytes); }

// 7 specials (ids 0..6) + 256 byte symbols (7..262) + the given extra tokens.
VocabData base_vocab(std::vector<std::string> extra = {}, std::vector<std::string> merges = {}) {
  auto v = synthetic_vocab(263);
  EXPECT_TRUE(v.ok());
  VocabData d = std::move(v).value();
  EXPECT_TRUE(d.merges.empty());
  for (auto& t : extra) {
    d.tokens.push_back(t);
    d.token_types.push_back(int32_t(TokenType::kNormal));
  }
  d.merges = std::move(merges);
  return d;
}

Tokenizer make(VocabData d) {
  auto t = Tokenizer::create(std::move(d));
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return std::move(t).value();
}

std::vector<std::string> texts_of(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::vector<std::string> out;
  for (int32_t id : ids) out.emplace_back(t.token_bytes(id));
  return out;
}

std::string error_of(VocabData d) {
  auto t = Tokenizer::create(std::move(d));
  return t.ok() ? std::string("<ok>") : t.status().message();
}

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = uint8_t(s[i]);
    size_t n = b < 0x80 ? 1 : (b >= 0xC2 && b <= 0xDF) ? 2 : (b >= 0xE0 && b <= 0xEF) ? 3
             : (b >= 0xF0 && b <= 0xF4) ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return false;
    if (n == 3 && b == 0xE0 && uint8_t(s[i + 1]) < 0xA0) return false;
    if (n == 3 && b == 0xED && uint8_t(s[i + 1]) > 0x9F) return false;
    if (n == 4 && b == 0xF0 && uint8_t(s[i + 1]) < 0x90) return false;
    if (n == 4 && b == 0xF4 && uint8_t(s[i + 1]) > 0x8F) return false;
    i += n;
  }
  return true;
}

// ---- merge semantics ----

TEST(Bpe, NoMergesGivesOneTokenPerByte) {
  Tokenizer t = make(base_vocab());
  const std::vector<int32_t> ids = t.encode("ab\xFF");
  EXPECT_EQ(ids, (std::vector<int32_t>{7 + 'a', 7 + 'b', 7 + 0xFF}));
}

TEST(Bpe, SmallestRankWinsOverPosition) {
  // "b c" has rank 0, "a b" rank 1: "abc" -> a + bc, not ab + c.
  Tokenizer t = make(base_vocab({"bc", "ab"}, {"b c", "a b"}));
  EXPECT_EQ(texts_of(t, t.encode("abc")), (std::vector<std::string>{"a", "bc"}));
}

TEST(Bpe, LeftmostOnEqualRank) {
  Tokenizer t = make(base_vocab({"aa"}, {"a a"}));
  EXPECT_EQ(texts_of(t, t.encode("aaa")), (std::vector<std::string>{"aa", "a"}));
  EXPECT_EQ(texts_of(t, t.encode("aaaaa")), (std::vector<std::string>{"aa", "aa", "a"}));
}

TEST(Bpe, ChainedMerges) {
  Tokenizer t = make(base_vocab({"ab", "abc", sym(" ") + "abc"},
                                {"a b", "ab c", sym(" ") + " abc"}));
  EXPECT_EQ(texts_of(t, t.encode(" abc abcab")),
            (std::vector<std::string>{" abc", " abc", "ab"}));
  EXPECT_EQ(t.n_merges(), 3);
}

TEST(Bpe, MergesStayInsidePieces) {
  // "a b" must not merge across the piece boundary of "a" | " b"... there is no such pair in
  // one piece, and "1 2" never merges across a 3-digit group boundary.
  Tokenizer t = make(base_vocab({"34"}, {"3 4"}));
  EXPECT_EQ(texts_of(t, t.encode("1234")), (std::vector<std::string>{"1", "2", "3", "4"}));
  EXPECT_EQ(texts_of(t, t.encode("34")), (std::vector<std::string>{"34"}));
}

TEST(Bpe, LongPieceIsHandled) {
  Tokenizer t = make(base_vocab({"aa", "aaaa"}, {"a a", "aa aa"}));
  const std::string s(10001, 'a');
  const std::vector<int32_t> ids = t.encode(s);
  ASSERT_EQ(ids.size(), 2501u);  // 2500 x "aaaa" + "a"
  EXPECT_EQ(t.token_bytes(ids.back()), "a");
  EXPECT_EQ(t.decode(ids), s);
}

// ---- specials, rendered text, decode ----

TEST(Specials, FoundByString) {
  Tokenizer t = make(base_vocab());
  const SpecialTokens& s = t.special();
  EXPECT_EQ(s.bos, 0);
  EXPECT_EQ(s.eos, 1);
  EXPECT_EQ(s.user, 2);
  EXPECT_EQ(s.assistant, 3);
  EXPECT_EQ(s.think_open, 4);
  EXPECT_EQ(s.think_close, 5);
  EXPECT_EQ(s.dsml, 6);
  EXPECT_TRUE(t.is_special(4));
  EXPECT_FALSE(t.is_special(7));
  EXPECT_EQ(t.token_type(0), TokenType::kControl);
  EXPECT_EQ(t.token_id(kUserText), 2);
  EXPECT_EQ(t.token_id("nope"), -1);
}

TEST(Specials, Flash129280LayoutUsesRealIds) {
  auto v = synthetic_vocab(129280);
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->tokens.size(), 129280u);
  auto t = Tokenizer::create(std::move(v).value());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  const SpecialTokens& s = t->special();
  EXPECT_EQ(s.bos, 0);
  EXPECT_EQ(s.eos, 1);
  EXPECT_EQ(s.user, 128803);
  EXPECT_EQ(s.assistant, 128804);
  EXPECT_EQ(s.think_open, 128821);
  EXPECT_EQ(s.think_close, 128822);
  EXPECT_EQ(s.dsml, 128825);
  EXPECT_EQ(t->n_vocab(), 129280);
  EXPECT_GT(t->n_merges(), 128000);
  EXPECT_EQ(t->token_type(128810), TokenType::kControl);  // placeholder
}

TEST(Specials, SyntheticVocabRejectsTooSmall) {
  EXPECT_FALSE(synthetic_vocab(262).ok());
  auto v = synthetic_vocab(4096);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->tokens.size(), 4096u);
  EXPECT_EQ(v->merges.size(), 4096u - 263u);
}

TEST(Specials, PlainEncodeIgnoresSpecialStrings) {
  Tokenizer t = make(base_vocab());
  const std::string text = std::string(kUserText) + "hi";
  const std::vector<int32_t> plain = t.encode(text);
  for (int32_t id : plain) EXPECT_FALSE(t.is_special(id));
  EXPECT_EQ(t.decode(plain), text);
}

TEST(Specials, RenderedEncodeEmitsSpecialIds) {
  Tokenizer t = make(base_vocab());
  const std::string text = std::string(kBosText) + "sys" + std::string(kUserText) + "hi" +
                           std::string(kAssistantText) + std::string(kThinkOpenText) + "x" +
                           std::string(kThinkCloseText) + std::string(kDsmlText) +
                           std::string(kEosText);
  const std::vector<int32_t> ids = t.encode_rendered(text);
  const std::vector<int32_t> want = {0, 7 + 's', 7 + 'y', 7 + 's', 2, 7 + 'h', 7 + 'i', 3, 4,
                                     7 + 'x', 5, 6, 1};
  EXPECT_EQ(ids, want);
  EXPECT_EQ(t.decode(ids), text);  // specials decode to their literal text
  // A partial special string is ordinary text.
  const std::vector<int32_t> partial = t.encode_rendered("<think");
  for (int32_t id : partial) EXPECT_FALSE(t.is_special(id));
}

TEST(Decode, OutOfRangeIdsBecomeReplacementChar) {
  Tokenizer t = make(base_vocab());
  const std::vector<int32_t> ids = {7 + 'a', -1, 263, 1 << 30, 7 + 'b'};
  EXPECT_EQ(t.decode(ids), "a\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "b");
  EXPECT_EQ(t.token_bytes(-5), "\xEF\xBF\xBD");
  EXPECT_EQ(t.token_text(999), "");
}

TEST(Decode, TokenBytesUseTheByteMap) {
  Tokenizer t = make(base_vocab({sym(" \xC3"), sym(" \xC3\xA9")}, {sym(" ") + " " + sym("\xC3"),
                                                                     sym(" \xC3") + " " + sym("\xA9")}));
  EXPECT_EQ(t.token_bytes(t.token_id(sym(" \xC3"))), " \xC3");  // a partial UTF-8 sequence
  EXPECT_EQ(texts_of(t, t.encode(" é")), (std::vector<std::string>{" é"}));
  EXPECT_EQ(t.token_bytes(0), kBosText);  // U+FF5C tokens are literal
}

TEST(Decode, UnmappedCodePointsAreDropped) {
  // A token holding code points outside the GPT-2 byte map (and no U+FF5C) decodes to the
  // bytes of its mapped code points only, as in ds4.
  VocabData d = base_vocab({"a\xE2\x96\x81" "b", "\xE4\xB8\xAD"});
  Tokenizer t = make(std::move(d));
  EXPECT_EQ(t.token_bytes(263), "ab");
  EXPECT_EQ(t.token_bytes(264), "");
}

// ---- validation errors ----

TEST(Validate, EmptyVocab) {
  auto t = Tokenizer::create({}, {}, {});
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("empty"), std::string::npos);
}

TEST(Validate, DuplicateToken) {
  VocabData d = base_vocab({"ab", "ab"});
  EXPECT_NE(error_of(d).find("duplicate token 'ab' at ids 263 and 264"), std::string::npos)
      << error_of(d);
}

TEST(Validate, MergeNamingUnknownToken) {
  VocabData d = base_vocab({"ab"}, {"a b", "zz q"});
  EXPECT_NE(error_of(d).find("merge 1 'zz q' names unknown token 'zz'"), std::string::npos)
      << error_of(d);
}

TEST(Validate, MergeNotOfFormAB) {
  EXPECT_NE(error_of(base_vocab({}, {"ab"})).find("not of the form 'A B'"), std::string::npos);
  EXPECT_NE(error_of(base_vocab({}, {" a"})).find("not of the form 'A B'"), std::string::npos);
}

TEST(Validate, MergeResultNotAToken) {
  EXPECT_NE(error_of(base_vocab({}, {"a b"})).find("yields 'ab', which is not a token"),
            std::string::npos);
}

TEST(Validate, MissingSpecialTokenIsNamed) {
  const std::pair<int, const char*> cases[] = {{0, "BOS"},        {1, "EOS"},
                                               {2, "User"},       {3, "Assistant"},
                                               {4, "<think>"},    {5, "</think>"},
                                               {6, "DSML"}};
  for (auto [id, name] : cases) {
    VocabData d = base_vocab();
    d.tokens[id] = "renamed" + std::to_string(id);
    const std::string err = error_of(d);
    EXPECT_NE(err.find(std::string("special token ") + name), std::string::npos) << err;
  }
}

TEST(Validate, MissingByteToken) {
  VocabData d = base_vocab();
  d.tokens[7 + 'q'] = "qq";
  EXPECT_NE(error_of(d).find("lacks the byte token 'q' for byte 0x71"), std::string::npos)
      << error_of(d);
}

TEST(Validate, TokenTypeCountMismatch) {
  VocabData d = base_vocab();
  d.token_types.pop_back();
  EXPECT_NE(error_of(d).find("token_type has 262 entries, expected 263"), std::string::npos);
}

// ---- round trips (property tests) ----

std::vector<std::string> sample_texts(uint32_t seed) {
  std::vector<std::string> out = {
      "",
      "Hello, world! 123456 3.14159",
      "Quel ramo del lago di Como, che volge a mezzogiorno... Perché? È così: già, là, più.",
      "中文字符测试，日本語のテキスト、カタカナ。漢字かな交じり文",
      "emoji 😀😃😄 family 👨‍👩‍👧‍👦 flags 🇮🇹🇯🇵 ✓ ✗",
      "int main(void) {\n\tprintf(\"%d\\n\", x[i] >= 0 ? a : b);\n\treturn 0;\n}\n",
      "    \n\n\t\t  \r\n\r\n   x   \t  !  \v\f  ",
      "mixed\r\nnewlines\rand\nmore\n\r\n\n\r",
      "bad \xFF\xFE utf8 \xC3 \xE4\xB8 \x80\x80 \xF0\x9F\x98 \xED\xA0\x80 end",
      [] {
        static const char kNul[] = "nul\x00" "inside\x01\x02\x1b[0m";
        return std::string(kNul, sizeof(kNul) - 1);
      }(),
  };
  std::mt19937 rng(seed);
  const std::vector<std::string> frags = {" ", "  ", "\t", "\n", "\r\n", "a", "Zebra", "123",
                                          "'", "\"", ".", "!?", "é", "中", "か", "😀", "\xFF",
                                          "\xC3", "\x80", "\x00", " the", "—", "<think>",
                                          "\xEF\xBD\x9C"};
  for (int k = 0; k < 200; ++k) {
    std::string s;
    const int n = int(rng() % 64);
    for (int i = 0; i < n; ++i) {
      if (rng() % 8 == 0) s.push_back(char(rng() & 0xFF));
      else s += frags[rng() % frags.size()];
    }
    out.push_back(std::move(s));
  }
  for (int k = 0; k < 50; ++k) {  // raw random bytes
    std::string s(rng() % 200, '\0');
    for (char& c : s) c = char(rng() & 0xFF);
    out.push_back(std::move(s));
  }
  return out;
}

void check_round_trips(const Tokenizer& t) {
  for (const std::string& s : sample_texts(1234)) {
    const std::vector<int32_t> ids = t.encode(s);
    ASSERT_EQ(t.decode(ids), s);
    for (int32_t id : ids) ASSERT_FALSE(t.is_special(id));
    // Streaming: concatenated output == whole decode, for any bytes.
    StreamDecoder sd(t);
    std::string streamed;
    for (int32_t id : ids) {
      const std::string chunk = sd.push(id);
      if (valid_utf8(s)) {
        ASSERT_TRUE(valid_utf8(chunk)) << "chunk is not whole characters";
      }
      streamed += chunk;
    }
    streamed += sd.flush();
    ASSERT_EQ(streamed, s);
    // Replacement mode: identical on valid text, always valid UTF-8.
    StreamDecoder rd(t, /*replace_invalid=*/true);
    std::string replaced;
    for (int32_t id : ids) replaced += rd.push(id);
    replaced += rd.flush();
    ASSERT_TRUE(valid_utf8(replaced));
    if (valid_utf8(s)) {
      ASSERT_EQ(replaced, s);
    }
    // Encoding is a function of the text, not of the piece cache state.
    ASSERT_EQ(t.encode(s), ids);
  }
}

TEST(RoundTrip, SyntheticSmallVocab) {
  auto v = synthetic_vocab(4096);
  ASSERT_TRUE(v.ok());
  check_round_trips(make(std::move(v).value()));
}

TEST(RoundTrip, SyntheticFlashVocab) {
  auto v = synthetic_vocab(129280);
  ASSERT_TRUE(v.ok());
  check_round_trips(make(std::move(v).value()));
}

Expected<Tokenizer> trained_tokenizer() {
  auto file = gguf::File::open(std::string(DS4_SOURCE_DIR) + "/tests/tokenizer/tok2k.gguf");
  if (!file.ok()) return file.status();
  return Tokenizer::from_gguf(**file);
}

TEST(RoundTrip, TrainedVocab) {
  auto t = trained_tokenizer();
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->n_vocab(), 2048);
  EXPECT_EQ(t->bos(), 0);
  EXPECT_EQ(t->eos(), 1);
  check_round_trips(*t);
  // Trained merges compress Italian prose well below one token per byte.
  const std::string prose = "Quel ramo del lago di Como, che volge a mezzogiorno";
  EXPECT_LT(t->encode(prose).size(), prose.size() / 2);
}

TEST(RoundTrip, PieceCacheOverflowDoesNotChangeIds) {
  // > 65536 distinct pieces force the per-thread piece cache to reset mid-text. Encoding the
  // words forwards in one call and backwards one by one (other cache states, other resets)
  // on fresh threads must give the same ids per word.
  auto v = synthetic_vocab(4096);
  ASSERT_TRUE(v.ok());
  Tokenizer t = make(std::move(v).value());
  std::vector<std::string> words;
  for (int i = 0; i < 90000; ++i) {
    std::string w = " w";
    for (int k = i; k > 0; k /= 26) w.push_back(char('a' + k % 26));
    words.push_back(w);
  }
  std::string text;
  for (const auto& w : words) text += w;
  std::vector<int32_t> forward, backward;
  std::thread([&] { forward = t.encode(text); }).join();
  std::thread([&] {
    std::vector<std::vector<int32_t>> per(words.size());
    for (size_t i = words.size(); i-- > 0;) per[i] = t.encode(words[i]);
    for (const auto& p : per) backward.insert(backward.end(), p.begin(), p.end());
  }).join();
  EXPECT_EQ(forward, backward);
  EXPECT_EQ(t.decode(forward), text);
}

TEST(StreamDecoder, HoldsBackPartialCharacters) {
  Tokenizer t = make(base_vocab());
  StreamDecoder sd(t);
  // "é" = C3 A9, "中" = E4 B8 AD, byte tokens are 7 + byte.
  EXPECT_EQ(sd.push(7 + 'a'), "a");
  EXPECT_EQ(sd.push(7 + 0xC3), "");
  EXPECT_TRUE(sd.has_pending());
  EXPECT_EQ(sd.push(7 + 0xA9), "é");
  EXPECT_EQ(sd.push(7 + 0xE4), "");
  EXPECT_EQ(sd.push(7 + 0xB8), "");
  EXPECT_EQ(sd.push(7 + 0xAD), "中");
  // Invalid: a lead byte followed by ASCII is passed through at once.
  EXPECT_EQ(sd.push(7 + 0xE4), "");
  EXPECT_EQ(sd.push(7 + 'x'), "\xE4x");
  // An unfinished sequence comes out on flush.
  EXPECT_EQ(sd.push(7 + 0xF0), "");
  EXPECT_EQ(sd.flush(), "\xF0");
  EXPECT_FALSE(sd.has_pending());
  StreamDecoder rd(t, true);
  EXPECT_EQ(rd.push(7 + 0xFF), "\xEF\xBF\xBD");
  EXPECT_EQ(rd.push(7 + 0xE4), "");
  EXPECT_EQ(rd.flush(), "\xEF\xBF\xBD");
}

// ---- GGUF loading ----

std::string write_gguf(const std::string& name, const std::function<void(gguf::Writer&)>& fill) {
  gguf::Writer w;
  fill(w);
  const std::string path = ::testing::TempDir() + "/tok_" + name + ".gguf";
  const Status st = w.write(path);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return path;
}

Expected<Tokenizer> load(const std::string& path) {
  auto file = gguf::File::open(path);
  if (!file.ok()) return file.status();
  return Tokenizer::from_gguf(**file);
}

TEST(FromGguf, LoadsTokensMergesAndTypes) {
  VocabData d = base_vocab({"ab"}, {"a b"});
  const std::string path = write_gguf("ok", [&](gguf::Writer& w) {
    ASSERT_TRUE(w.set_array_string("tokenizer.ggml.tokens", std::span<const std::string>(d.tokens)).ok());
    ASSERT_TRUE(w.set_array_string("tokenizer.ggml.merges", std::span<const std::string>(d.merges)).ok());
    ASSERT_TRUE(w.set_array_i32("tokenizer.ggml.token_type", d.token_types).ok());
  });
  auto t = load(path);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(texts_of(*t, t->encode("ab")), (std::vector<std::string>{"ab"}));
  EXPECT_EQ(t->token_type(0), TokenType::kControl);
}

TEST(FromGguf, MissingMergesKey) {
  VocabData d = base_vocab();
  const std::string path = write_gguf("nomerges", [&](gguf::Writer& w) {
    ASSERT_TRUE(w.set_array_string("tokenizer.ggml.tokens", std::span<const std::string>(d.tokens)).ok());
  });
  auto t = load(path);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tokenizer.ggml.merges"), std::string::npos)
      << t.status().message();
}

TEST(FromGguf, MissingTokensKeyAndWrongType) {
  const std::string p1 = write_gguf("notokens", [&](gguf::Writer& w) {
    ASSERT_TRUE(w.set_u32("x", 1).ok());
  });
  auto t1 = load(p1);
  ASSERT_FALSE(t1.ok());
  EXPECT_NE(t1.status().message().find("tokenizer.ggml.tokens"), std::string::npos);
  const std::vector<int32_t> ints = {1, 2, 3};
  const std::vector<std::string> none;
  const std::string p2 = write_gguf("badtype", [&](gguf::Writer& w) {
    ASSERT_TRUE(w.set_array_i32("tokenizer.ggml.tokens", ints).ok());
    ASSERT_TRUE(w.set_array_string("tokenizer.ggml.merges", std::span<const std::string>(none)).ok());
  });
  auto t2 = load(p2);
  ASSERT_FALSE(t2.ok());
  EXPECT_NE(t2.status().message().find("tokenizer.ggml.tokens"), std::string::npos)
      << t2.status().message();
}

}  // namespace
}  // namespace ds4::tok
