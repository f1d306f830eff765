// tests/unit/tools/ds4_gguf_test.cpp — ds4-gguf logic: generate (determinism, layout, value
// scales, sparse experts and routing bias), quantize (float layout -> published layout) and
// inspect (exit codes, JSON report, DSpark support-file layout and provenance), generate --release.
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "model/model.h"
#include "model/profiles.h"
#include "quant/quant.h"
#include "speculative/drafter_gen.h"
#include "tools/ds4-gguf/ds4_gguf.h"

namespace ds4::tools {
namespace {

using gguf::GgmlType;
using model::ExpertQuant;
using model::ModelConfig;
using ::testing::HasSubstr;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/ds4_tool_" + std::to_string(::getpid()) + "_" + name;
}
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& n) : path(temp_path(n)) {}
  ~TempFile() { ::unlink(path.c_str()); }
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

GenerateOptions fast(uint64_t seed, uint32_t sparse = 0, ExpertQuant q = ExpertQuant::kQ2) {
  GenerateOptions o;
  o.seed = seed;
  o.sparse_experts = sparse;
  o.quant = q;
  o.fill = FillMode::kRandomBlocks;  // fast; quantize mode is covered by one test below
  return o;
}

std::vector<float> dequant(const model::TensorView& v) {
  std::vector<float> out(static_cast<size_t>(v.ne[0] * v.n_rows()));
  for (int64_t r = 0; r < v.n_rows(); ++r) quant::dequantize_row(v.type, v.row(r), out.data() + r * v.ne[0], v.ne[0]);
  return out;
}

double rms(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return std::sqrt(s / x.size());
}

TEST(Generate, DeterministicPerSeed) {
  TempFile a("a.gguf"), b("b.gguf"), c("c.gguf");
  const ModelConfig cfg = model::tiny_profile();
  ASSERT_TRUE(generate_model(cfg, fast(7), a.path).ok());
  ASSERT_TRUE(generate_model(cfg, fast(7), b.path).ok());
  ASSERT_TRUE(generate_model(cfg, fast(8), c.path).ok());
  const std::string ba = read_all(a.path), bb = read_all(b.path), bc = read_all(c.path);
  ASSERT_GT(ba.size(), 1000000u);
  EXPECT_EQ(std::hash<std::string>{}(ba), std::hash<std::string>{}(bb));
  EXPECT_TRUE(ba == bb);
  EXPECT_EQ(ba.size(), bc.size());
  EXPECT_FALSE(ba == bc);
}

TEST(Generate, DeterministicWithRealQuantization) {
  // Rows are quantized in parallel; the bytes must not depend on that split.
  TempFile a("qa.gguf"), b("qb.gguf");
  GenerateOptions o = fast(21, 0, ExpertQuant::kQ4);
  o.fill = FillMode::kQuantize;
  ASSERT_TRUE(generate_model(model::tiny_profile(), o, a.path).ok());
  ASSERT_TRUE(generate_model(model::tiny_profile(), o, b.path).ok());
  EXPECT_TRUE(read_all(a.path) == read_all(b.path));
}

TEST(Generate, QuantizedTinyOpensWithRealisticScales) {
  TempFile f("tinyq.gguf");
  GenerateOptions o;
  o.seed = 3;
  o.fill = FillMode::kQuantize;
  ASSERT_TRUE(generate_model(model::tiny_profile(), o, f.path).ok());
  auto m = model::Model::open(f.path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const model::ModelWeights& w = (*m)->weights();
  EXPECT_EQ((*m)->expert_quant(), ExpertQuant::kQ2);
  // No all-zero tensors; norms ~1; projections ~1/sqrt(fan_in); HC fns small.
  model::ModelWeights views = w;  // copies of the views (same mapping), for the visitor
  model::for_each_tensor((*m)->config(), views,
                         [&](const model::TensorSpec& spec, model::TensorView& v) {
                           if (!v.present() || spec.role == model::TensorRole::kHashTable) return;
                           const double r = rms(dequant(v));
                           EXPECT_GT(r, 0.0) << spec.name;
                           EXPECT_TRUE(std::isfinite(r)) << spec.name;
                           if (spec.role == model::TensorRole::kNorm) {
                             EXPECT_NEAR(r, 1.0, 0.05) << spec.name;
                           }
                           if (spec.role == model::TensorRole::kProjection ||
                               spec.role == model::TensorRole::kRoutedExpert) {
                             EXPECT_NEAR(r * std::sqrt(double(spec.ne[0])), 1.0, 0.25) << spec.name;
                           }
                           if (spec.role == model::TensorRole::kHcFn) {
                             EXPECT_NEAR(r * std::sqrt(double(spec.ne[0])), 0.3, 0.05) << spec.name;
                           }
                         });
}

TEST(Generate, SparseExpertsAreHolesAndRoutingIsBiased) {
  TempFile f("sparse.gguf");
  const ModelConfig cfg = model::tiny_profile();
  const GenerateOptions o = fast(5, /*sparse=*/5);
  ASSERT_TRUE(generate_model(cfg, o, f.path).ok());
  auto m = model::Model::open(f.path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const model::ModelWeights& w = (*m)->weights();
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    const auto filled = filled_experts(cfg, o, il);
    ASSERT_EQ(filled.size(), 5u);
    const std::set<uint32_t> fs(filled.begin(), filled.end());
    const model::LayerWeights& L = w.layers[il];
    for (uint32_t e = 0; e < cfg.n_expert; ++e) {
      for (const model::TensorView* t : {&L.ffn_gate_exps, &L.ffn_up_exps, &L.ffn_down_exps}) {
        const uint8_t* p = t->expert_data(e);
        bool nonzero = false;
        for (uint64_t i = 0; i < t->expert_bytes() && !nonzero; ++i) nonzero = p[i] != 0;
        EXPECT_EQ(nonzero, fs.count(e) == 1) << t->name << " expert " << e;
      }
    }
    if (cfg.is_hash_layer(il)) {
      EXPECT_FALSE(L.exp_probs_b.present());
      const int32_t* ids = L.ffn_gate_tid2eid.as<int32_t>();
      for (uint32_t t = 0; t < cfg.n_vocab; ++t) {
        std::set<int32_t> row;
        for (uint32_t j = 0; j < cfg.n_expert_used; ++j) {
          const int32_t e = ids[t * cfg.n_expert_used + j];
          EXPECT_EQ(fs.count(static_cast<uint32_t>(e)), 1u) << "layer " << il << " token " << t;
          row.insert(e);
        }
        EXPECT_EQ(row.size(), cfg.n_expert_used) << "distinct experts per token";
      }
    } else {
      ASSERT_TRUE(L.exp_probs_b.present());
      const float* bias = L.exp_probs_b.as<float>();
      for (uint32_t e = 0; e < cfg.n_expert; ++e) EXPECT_EQ(bias[e], fs.count(e) ? kSparseBias : 0.0f);
    }
  }
}

// --route-all: the same holes, but the router bias is the ordinary random one (no kSparseBias)
// and the hash layers' tid2eid reaches unfilled experts too; --layers keeps widths, drops depth.
TEST(Generate, RouteAllKeepsHolesButRoutesEverywhereAtReducedDepth) {
  TempFile f("route_all.gguf");
  ModelConfig cfg = model::tiny_profile();
  ASSERT_TRUE(model::set_layer_count(cfg, 5).ok());
  GenerateOptions o = fast(5, /*sparse=*/5);
  o.route_all = true;
  ASSERT_TRUE(generate_model(cfg, o, f.path).ok());
  auto m = model::Model::open(f.path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->config().n_layer, 5u);
  EXPECT_EQ((*m)->config().n_embd, model::tiny_profile().n_embd);
  const model::ModelWeights& w = (*m)->weights();
  bool unfilled_hash_target = false;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    const auto filled = filled_experts(cfg, o, il);
    const std::set<uint32_t> fs(filled.begin(), filled.end());
    const model::LayerWeights& L = w.layers[il];
    for (uint32_t e = 0; e < cfg.n_expert; ++e) {
      const uint8_t* p = L.ffn_down_exps.expert_data(e);
      bool nonzero = false;
      for (uint64_t i = 0; i < L.ffn_down_exps.expert_bytes() && !nonzero; ++i) nonzero = p[i] != 0;
      EXPECT_EQ(nonzero, fs.count(e) == 1) << "layer " << il << " expert " << e;
    }
    if (cfg.is_hash_layer(il)) {
      const int32_t* ids = L.ffn_gate_tid2eid.as<int32_t>();
      for (uint32_t t = 0; t < cfg.n_vocab * cfg.n_expert_used; ++t) {
        unfilled_hash_target |= fs.count(static_cast<uint32_t>(ids[t])) == 0;
      }
    } else {
      const float* bias = L.exp_probs_b.as<float>();
      for (uint32_t e = 0; e < cfg.n_expert; ++e) EXPECT_LT(std::fabs(bias[e]), kSparseBias) << "expert " << e;
    }
  }
  EXPECT_TRUE(unfilled_hash_target);
  ModelConfig bad = model::tiny_profile();
  EXPECT_FALSE(model::set_layer_count(bad, 3).ok());
  EXPECT_FALSE(model::set_layer_count(bad, 9).ok());
  GenerateOptions dense = fast(5);
  dense.route_all = true;
  EXPECT_FALSE(generate_model(model::tiny_profile(), dense, f.path).ok());
}

TEST(Generate, SparseNeedsAtLeastExpertUsed) {
  TempFile f("bad.gguf");
  const Status st = generate_model(model::tiny_profile(), fast(1, 3), f.path);
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("--sparse-experts 3: expected >= expert_used_count (4)"));
  EXPECT_NE(::access(f.path.c_str(), F_OK), 0);
}

TEST(Generate, Q4Layout) {
  TempFile f("q4.gguf");
  ASSERT_TRUE(generate_model(model::tiny_profile(), fast(2, 0, ExpertQuant::kQ4), f.path).ok());
  auto m = model::Model::open(f.path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->expert_quant(), ExpertQuant::kQ4);
}

// Float DS4-layout file (as training exports): every tensor F32 (tid2eid I64).
Status write_float_model(const ModelConfig& cfg, const std::string& path, uint64_t seed) {
  gguf::Writer w;
  Status st = w.set_string("general.architecture", "deepseek4");
  if (st.ok()) st = w.set_string("general.name", "float-export");
  for (const model::ConfigValue& v : model::config_values(cfg)) {
    if (!st.ok()) break;
    switch (v.type) {
      case model::KeyType::kU32: st = w.set_u32(v.key, static_cast<uint32_t>(v.u)); break;
      case model::KeyType::kU64: st = w.set_u64(v.key, v.u); break;
      case model::KeyType::kF32: st = w.set_f32(v.key, v.f); break;
      case model::KeyType::kBool: st = w.set_bool(v.key, v.b); break;
      case model::KeyType::kArrayU32: st = w.set_array_u32(v.key, v.au); break;
      case model::KeyType::kArrayF32: st = w.set_array_f32(v.key, v.af); break;
    }
  }
  uint64_t k = seed;
  model::for_each_tensor_spec(cfg, [&](const model::TensorSpec& s) {
    if (!st.ok()) return;
    std::vector<int64_t> ne(s.ne.begin(), s.ne.begin() + s.n_dims);
    std::vector<uint8_t> bytes;
    if (s.role == model::TensorRole::kHashTable) {
      std::vector<int64_t> ids(static_cast<size_t>(s.n_elements()));
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7 + 3) % cfg.n_expert);
      bytes.resize(ids.size() * 8);
      std::memcpy(bytes.data(), ids.data(), bytes.size());
      st = w.add_tensor(s.name, GgmlType::kI64, ne, bytes);
      return;
    }
    std::vector<float> x(static_cast<size_t>(s.n_elements()));
    quant::fill_random_blocks(GgmlType::kF32, x.data(), s.n_elements(), 0.1f, ++k);
    bytes.resize(x.size() * 4);
    std::memcpy(bytes.data(), x.data(), bytes.size());
    st = w.add_tensor(s.name, GgmlType::kF32, ne, bytes);
  });
  if (!st.ok()) return st;
  return w.write(path);
}

TEST(Quantize, FloatExportToPublishedLayout) {
  ModelConfig cfg = model::tiny_profile();
  cfg.n_vocab = 1024;  // keeps the float file small (the quantizer needs no tokenizer)
  TempFile in("float.gguf"), out("quant.gguf");
  ASSERT_TRUE(write_float_model(cfg, in.path, 11).ok());
  QuantizeOptions qo;
  qo.quant = ExpertQuant::kQ4;
  const Status st = quantize_model(in.path, out.path, qo);
  ASSERT_TRUE(st.ok()) << st.to_string();
  auto m = model::Model::open(out.path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->expert_quant(), ExpertQuant::kQ4);
  auto fin = gguf::File::open(in.path);
  ASSERT_TRUE(fin.ok());
  // Metadata copied (including non-deepseek4 keys).
  EXPECT_EQ((*m)->file().metadata().size(), (*fin)->metadata().size());
  EXPECT_EQ(*(*m)->file().get_string("general.name"), "float-export");
  // Values survive quantization within the format's precision.
  const auto& L = (*m)->weights().layers[2];
  for (const model::TensorView* v : {&L.attn_q_a, &L.indexer_proj, &L.ffn_up_exps, &L.attn_norm}) {
    const gguf::TensorInfo* t = (*fin)->find_tensor(v->name);
    ASSERT_NE(t, nullptr);
    const std::vector<float> got = dequant(*v);
    const float* want = reinterpret_cast<const float*>(t->data);
    double err = 0, ref = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      err += double(got[i] - want[i]) * (got[i] - want[i]);
      ref += double(want[i]) * want[i];
    }
    EXPECT_LT(std::sqrt(err / ref), 0.15) << v->name;  // Q4_K worst case here
  }
  // tid2eid narrowed to I32 with the same ids.
  const auto& h = (*m)->weights().layers[0].ffn_gate_tid2eid;
  EXPECT_EQ(h.type, GgmlType::kI32);
  EXPECT_EQ(h.as<int32_t>()[5], static_cast<int32_t>((5 * 7 + 3) % 16));
}

TEST(Quantize, RejectsNonFloatOrWrongShape) {
  TempFile in("notfloat.gguf"), out("o.gguf");
  gguf::Writer w;
  ASSERT_TRUE(w.set_string("general.architecture", "llama").ok());
  ASSERT_TRUE(w.write(in.path).ok());
  const Status st = quantize_model(in.path, out.path, {});
  ASSERT_FALSE(st.ok());
  EXPECT_THAT(st.message(), HasSubstr("general.architecture is 'llama'"));
}

TEST(Inspect, ExitCodesAndJson) {
  TempFile f("insp.gguf"), junk("junk.gguf"), llama("llama.gguf");
  ASSERT_TRUE(generate_model(model::tiny_profile(), fast(1), f.path).ok());
  std::ostringstream out, err;
  InspectOptions io;
  io.json = true;
  io.tensors = true;
  EXPECT_EQ(inspect_file(f.path, io, out, err), 0);
  const nlohmann::json j = nlohmann::json::parse(out.str());
  EXPECT_TRUE(j["validation"]["ok"].get<bool>());
  EXPECT_EQ(j["summary"]["profile"], "tiny");
  EXPECT_EQ(j["summary"]["expert_quant"], "q2");
  EXPECT_EQ(j["tensors"].size(), model::expected_tensor_count(model::tiny_profile()) - 3);  // no bias in hash layers
  EXPECT_EQ(j["metadata"]["deepseek4.block_count"]["value"], 8);
  EXPECT_EQ(j["metadata"]["tokenizer.ggml.tokens"]["value"]["count"], 8192);

  std::ofstream(junk.path) << "not a gguf";
  std::ostringstream o2, e2;
  EXPECT_EQ(inspect_file(junk.path, {}, o2, e2), 2);
  EXPECT_FALSE(e2.str().empty());

  gguf::Writer w;
  ASSERT_TRUE(w.set_string("general.architecture", "llama").ok());
  ASSERT_TRUE(w.write(llama.path).ok());
  std::ostringstream o3, e3;
  EXPECT_EQ(inspect_file(llama.path, {}, o3, e3), 1);
  EXPECT_THAT(o3.str(), HasSubstr("general.architecture is 'llama', expected 'deepseek4'"));
  EXPECT_THAT(o3.str(), HasSubstr("validation:    FAILED"));
}

TEST(Inspect, ShowsDsparkLayoutAndProvenance) {
  TempFile legacy("dspark_keys.gguf"), standalone("dspark_0731.gguf");
  speculative::DrafterGenOptions o;
  o.gate_up_type = GgmlType::kQ4_K;  // fast
  o.down_type = GgmlType::kQ4_K;
  ASSERT_TRUE(speculative::generate_drafter(model::tiny_profile(), o, legacy.path).ok());
  o.layout = speculative::SupportLayout::kStandalone0731;
  o.source_revision = "00112233445566778899aabbccddeeff00112233";
  ASSERT_TRUE(speculative::generate_drafter(model::tiny_profile(), o, standalone.path).ok());

  InspectOptions io;
  io.json = true;
  std::ostringstream j1, j2, err;
  inspect_file(legacy.path, io, j1, err);
  inspect_file(standalone.path, io, j2, err);
  const nlohmann::json a = nlohmann::json::parse(j1.str()), b = nlohmann::json::parse(j2.str());
  EXPECT_EQ(a["summary"]["kind"], "dspark-drafter");
  EXPECT_EQ(a["summary"]["dspark"]["layout"], "deepseek4.dspark");
  EXPECT_EQ(a["summary"]["dspark"]["key_prefix"], "deepseek4.dspark.");
  EXPECT_TRUE(a["summary"]["dspark"]["provenance"].empty());
  EXPECT_EQ(b["summary"]["kind"], "dspark-drafter");
  EXPECT_EQ(b["summary"]["architecture"], "deepseek4-dspark");
  EXPECT_EQ(b["summary"]["dspark"]["layout"], "deepseek4-dspark");
  EXPECT_EQ(b["summary"]["dspark"]["key_prefix"], "dspark.");
  EXPECT_EQ(b["summary"]["dspark"]["stages"], 3);
  EXPECT_EQ(b["summary"]["dspark"]["provenance"]["dspark.source.revision"], "00112233445566778899aabbccddeeff00112233");
  EXPECT_TRUE(b["summary"]["dspark"]["metadata_errors"].empty());

  std::ostringstream text;
  inspect_file(standalone.path, {}, text, err);
  EXPECT_THAT(text.str(), HasSubstr("dspark layout: deepseek4-dspark (0731 standalone, bare dspark.* keys), 3 stages"));
  EXPECT_THAT(text.str(), HasSubstr("provenance:    dspark.source.revision = 00112233445566778899aabbccddeeff00112233"));
  std::ostringstream text_legacy;
  inspect_file(legacy.path, {}, text_legacy, err);
  EXPECT_THAT(text_legacy.str(), HasSubstr("provenance:    none recorded"));

  // A support file missing a key: inspect names it without needing the target.
  TempFile broken("dspark_broken.gguf");
  o.omit_keys = {"dspark.noise_token_id"};
  ASSERT_TRUE(speculative::generate_drafter(model::tiny_profile(), o, broken.path).ok());
  std::ostringstream text_broken;
  inspect_file(broken.path, {}, text_broken, err);
  EXPECT_THAT(text_broken.str(), HasSubstr("dspark metadata error: metadata dspark.noise_token_id: required key missing"));
}

TEST(Generate, Release0731WritesTheCheckpointIdentity) {
  TempFile pre("rel_preview.gguf"), rel("rel_0731.gguf");
  GenerateOptions o = fast(5);
  ASSERT_TRUE(generate_model(model::tiny_profile(), o, pre.path).ok());
  o.release = Release::k0731;
  ASSERT_TRUE(generate_model(model::tiny_profile(), o, rel.path).ok());
  auto a = gguf::File::open(pre.path);
  auto b = gguf::File::open(rel.path);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE((*a)->has("general.source.revision"));
  auto rev = (*b)->get_string("general.source.revision");
  ASSERT_TRUE(rev.ok());
  EXPECT_EQ(*rev, model::kFlash0731Revision);
  // Both are valid DS4 models with the same shape; the revision reaches the config.
  auto ca = model::config_from_gguf(**a), cb = model::config_from_gguf(**b);
  ASSERT_TRUE(ca.ok() && cb.ok());
  EXPECT_EQ(ca->source_revision, "");
  EXPECT_EQ(cb->source_revision, model::kFlash0731Revision);
  EXPECT_TRUE(model::diff_config(*ca, *cb).empty());
  EXPECT_EQ((*a)->tensors().size(), (*b)->tensors().size());
}

TEST(Inspect, SupportFileAsModelSaysWhatItIs) {
  TempFile standalone("dspark_as_model.gguf");
  speculative::DrafterGenOptions o;
  o.gate_up_type = GgmlType::kQ4_K;
  o.down_type = GgmlType::kQ4_K;
  o.layout = speculative::SupportLayout::kStandalone0731;
  ASSERT_TRUE(speculative::generate_drafter(model::tiny_profile(), o, standalone.path).ok());
  auto m = model::Model::open(standalone.path);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(m.status().message(), HasSubstr("general.architecture is 'deepseek4-dspark', expected 'deepseek4' "
                                              "(this is a DSpark support file"));
}

}  // namespace
}  // namespace ds4::tools
