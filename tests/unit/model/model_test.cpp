// tests/unit/model/model_test.cpp — Model::open on real files: binding (views into the mapping,
// no copies), rejection of non-DS4 files, q2/q4 mixes, bad hash tables, collected reports.
#include <cstring>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/model.h"
#include "model/profiles.h"
#include "model_files.h"

namespace ds4::model {
namespace {

using gguf::GgmlType;
using ::testing::HasSubstr;
using testing::FileEdits;
using testing::temp_path;
using testing::write_model;

struct TempFile {
  std::string path;
  explicit TempFile(const std::string& name) : path(temp_path(name)) {}
  ~TempFile() { ::unlink(path.c_str()); }
};

TEST(Model, OpensTinyQ2AndBindsEveryTensorIntoTheMapping) {
  const ModelConfig cfg = tiny_profile();
  TempFile f("tiny_q2.gguf");
  ASSERT_TRUE(write_model(cfg, f.path).ok());
  auto m = Model::open(f.path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const Model& model = **m;
  EXPECT_EQ(model.expert_quant(), ExpertQuant::kQ2);
  EXPECT_TRUE(model.warnings().empty());
  EXPECT_TRUE(diff_config(model.config(), cfg).empty());
  const uint8_t* lo = model.file().base();
  const uint8_t* hi = lo + model.file().file_size();
  ModelWeights scratch;
  size_t n = 0;
  // Walk the visitor over a scratch copy to learn the slot offsets, then check the bound ones.
  for_each_tensor(cfg, scratch, [&](const TensorSpec& spec, TensorView& slot) {
    const size_t off = reinterpret_cast<const uint8_t*>(&slot) -
                       (spec.layer < 0 ? reinterpret_cast<const uint8_t*>(&scratch.global)
                                       : reinterpret_cast<const uint8_t*>(&scratch.layers[spec.layer]));
    const uint8_t* base = spec.layer < 0 ? reinterpret_cast<const uint8_t*>(&model.weights().global)
                                         : reinterpret_cast<const uint8_t*>(&model.weights().layers[spec.layer]);
    const TensorView& v = *reinterpret_cast<const TensorView*>(base + off);
    ASSERT_TRUE(v.present()) << spec.name;
    ++n;
    EXPECT_STREQ(v.name, spec.name.c_str());
    EXPECT_EQ(v.ne, spec.ne) << spec.name;
    EXPECT_EQ(v.type, spec.type_q2) << spec.name;
    EXPECT_GE(v.data, lo) << spec.name;
    EXPECT_LE(v.data + v.nbytes, hi) << spec.name;
    EXPECT_EQ(v.row_bytes * static_cast<uint64_t>(v.n_rows()), v.nbytes) << spec.name;
  });
  EXPECT_EQ(n, expected_tensor_count(cfg));
  const LayerWeights& l2 = model.weights().layers[2];
  EXPECT_EQ(l2.ffn_gate_exps.row_bytes, 66u);  // 256 elements = 1 IQ2_XXS block
  EXPECT_EQ(l2.ffn_gate_exps.expert_bytes(), 256u * 66u);
  EXPECT_TRUE(l2.indexer_proj.present());
  EXPECT_FALSE(model.weights().layers[3].indexer_proj.present());
  EXPECT_FALSE(model.weights().layers[3].ffn_gate_tid2eid.present());
}

TEST(Model, OpensQ4) {
  TempFile f("tiny_q4.gguf");
  FileEdits e;
  e.quant = ExpertQuant::kQ4;
  ASSERT_TRUE(write_model(tiny_profile(), f.path, e).ok());
  auto m = Model::open(f.path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->expert_quant(), ExpertQuant::kQ4);
  EXPECT_EQ((*m)->weights().layers[7].ffn_down_exps.type, GgmlType::kQ4_K);
}

TEST(Model, RejectsOtherArchitecture) {
  TempFile f("llama.gguf");
  FileEdits e;
  e.architecture = "llama";
  ASSERT_TRUE(write_model(tiny_profile(), f.path, e).ok());
  auto m = Model::open(f.path);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("general.architecture is 'llama', expected 'deepseek4'"));
}

TEST(Model, RejectsMixedQ2Q4) {
  TempFile f("mixed.gguf");
  FileEdits e;
  for (const char* n : {"blk.4.ffn_gate_exps.weight", "blk.4.ffn_up_exps.weight", "blk.4.ffn_down_exps.weight"})
    e.retype[n] = GgmlType::kQ4_K;
  ASSERT_TRUE(write_model(tiny_profile(), f.path, e).ok());
  auto m = Model::open(f.path);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("layer 4 routed experts: expected the q2 layout of layer 0"));
}

TEST(Model, RejectsOutOfRangeHashTable) {
  const ModelConfig cfg = tiny_profile();
  TempFile f("hash.gguf");
  FileEdits e;
  std::vector<int32_t> ids(static_cast<size_t>(cfg.n_expert_used) * cfg.n_vocab, 3);
  ids[4 * 100 + 2] = 16;  // token 100, slot 2: n_expert is 16
  std::vector<uint8_t> bytes(ids.size() * 4);
  std::memcpy(bytes.data(), ids.data(), bytes.size());
  e.data["blk.1.ffn_gate_tid2eid.weight"] = bytes;
  ASSERT_TRUE(write_model(cfg, f.path, e).ok());
  auto m = Model::open(f.path);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(),
              HasSubstr("tensor 'blk.1.ffn_gate_tid2eid.weight': token 100 slot 2: expected an "
                        "expert id in [0, 16), got 16"));
}

TEST(Model, ReportCollectsEveryProblemAndWarnings) {
  TempFile f("broken.gguf");
  FileEdits e;
  e.retype["blk.0.attn_q_a.weight"] = GgmlType::kF16;
  e.drop.push_back("output_norm.weight");
  e.extra["blk.0.attn_compressor_norm.weight"] = {128};
  e.extra["some_other.weight"] = {4};
  ASSERT_TRUE(write_model(tiny_profile(), f.path, e).ok());
  auto file = gguf::File::open(f.path);
  ASSERT_TRUE(file.ok());
  const ValidationReport rep = validate_file(**file);
  EXPECT_TRUE(rep.config_ok);
  EXPECT_FALSE(rep.ok());
  std::string all;
  for (const auto& s : rep.errors) all += s + "\n";
  EXPECT_THAT(all, HasSubstr("tensor 'blk.0.attn_q_a.weight': expected type q8_0, got f16"));
  EXPECT_THAT(all, HasSubstr("tensor 'output_norm.weight': missing (expected f32 [256])"));
  EXPECT_THAT(all, HasSubstr("tensor 'blk.0.attn_compressor_norm.weight': unexpected in layer 0"));
  ASSERT_EQ(rep.warnings.size(), 1u);
  EXPECT_THAT(rep.warnings[0], HasSubstr("some_other.weight"));
  auto m = Model::from_file(std::move(*file));
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("is not a valid DS4 model"));
}

TEST(Model, ExtraUnknownTensorIsOnlyAWarning) {
  TempFile f("extra.gguf");
  FileEdits e;
  e.extra["mtp.0.norm.weight"] = {256};
  ASSERT_TRUE(write_model(tiny_profile(), f.path, e).ok());
  auto m = Model::open(f.path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ((*m)->warnings().size(), 1u);
  EXPECT_THAT((*m)->warnings()[0], HasSubstr("mtp.0.norm.weight"));
}

TEST(Model, NotAGgufFile) {
  TempFile f("text.gguf");
  FILE* fp = std::fopen(f.path.c_str(), "wb");
  ASSERT_NE(fp, nullptr);
  std::fputs("hello, this is not a model\n", fp);
  std::fclose(fp);
  auto m = Model::open(f.path);
  EXPECT_FALSE(m.ok());
  EXPECT_FALSE(m.status().message().empty());
}

}  // namespace
}  // namespace ds4::model
