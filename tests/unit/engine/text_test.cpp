// tests/unit/engine/text_test.cpp — TextCodec: open() errors name the file; the streaming
// decoder holds back incomplete UTF-8 and reproduces detokenize() byte for byte.
#include "engine/text.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace ds4 {
namespace {

TEST(TextCodecOpen, MissingAndNonGgufFilesAreErrorsNamingThePath) {
  auto missing = TextCodec::open("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/dir/model.gguf"), std::string::npos)
      << missing.status().message();

  const std::string path = ::testing::TempDir() + "/text_test_not_gguf.bin";
  {
    std::ofstream f(path, std::ios::binary);
    f << "definitely not a GGUF file, just some text";
  }
  auto bad = TextCodec::open(path);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(path), std::string::npos) << bad.status().message();
  std::remove(path.c_str());
}

TEST(TextStream, HoldsBackPartialUtf8AndMatchesDetokenize) {
  auto codec = TextCodec::synthetic(300);
  ASSERT_TRUE(codec.ok());
  const TextCodec& c = **codec;
  // "è" is two bytes; in the synthetic vocab each byte can be its own token.
  const std::string text = "caff\xC3\xA8 \xE2\x82\xAC!";
  std::vector<int32_t> ids = c.tokenize(text);
  TextStream stream = c.new_stream();
  std::string streamed;
  for (int32_t id : ids) {
    std::string piece = stream.push(id);
    // Every piece is complete UTF-8: it never ends inside a multi-byte sequence.
    if (!piece.empty()) {
      const unsigned char last = static_cast<unsigned char>(piece.back());
      EXPECT_FALSE(last >= 0xC0) << "piece ends with a lead byte";
    }
    streamed += piece;
  }
  streamed += stream.flush();
  EXPECT_EQ(streamed, text);
  EXPECT_EQ(streamed, c.detokenize(ids));
  EXPECT_FALSE(stream.has_pending());

  // Byte by byte: the lead byte of "è" alone is held back, the continuation releases it.
  std::vector<int32_t> lead = c.tokenize("\xC3");
  std::vector<int32_t> cont = c.tokenize("\xA8");
  ASSERT_EQ(lead.size(), 1u);
  ASSERT_EQ(cont.size(), 1u);
  TextStream s2 = c.new_stream();
  EXPECT_EQ(s2.push(lead[0]), "");
  EXPECT_TRUE(s2.has_pending());
  EXPECT_EQ(s2.push(cont[0]), "\xC3\xA8");
  // An unfinished sequence comes out unchanged at flush().
  EXPECT_EQ(s2.push(lead[0]), "");
  EXPECT_EQ(s2.flush(), "\xC3");
}

}  // namespace
}  // namespace ds4
