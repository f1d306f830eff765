// tests/unit/model/weights_test.cpp — the tensor visitor (every tensor exactly once, shapes of
// §2.2-§2.3), layout validation (each broken rule names the tensor, expected vs actual),
// expert slicing math.
#include <algorithm>
#include <functional>
#include <map>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/profiles.h"
#include "model/weights.h"
#include "model_files.h"

namespace ds4::model {
namespace {

using gguf::GgmlType;
using ::testing::HasSubstr;
using testing::find_desc;
using testing::published_layout;

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) s += e + "\n";
  return s;
}

TEST(Visitor, EveryTensorExactlyOnceAndEverySlotCovered) {
  for (const ModelConfig& cfg : {tiny_profile(), flash_profile()}) {
    ModelWeights w;
    std::set<std::string> names;
    std::set<const TensorView*> slots;
    size_t n = 0;
    for_each_tensor(cfg, w, [&](const TensorSpec& spec, TensorView& slot) {
      ++n;
      EXPECT_TRUE(names.insert(spec.name).second) << "duplicate name " << spec.name;
      EXPECT_TRUE(slots.insert(&slot).second) << "slot bound twice: " << spec.name;
      EXPECT_GT(spec.n_allowed, 0) << spec.name;
      EXPECT_TRUE(spec.allows(spec.type_q2)) << spec.name;
      EXPECT_TRUE(spec.allows(spec.type_q4)) << spec.name;
    });
    EXPECT_EQ(n, expected_tensor_count(cfg));
    ASSERT_EQ(w.layers.size(), cfg.n_layer);
    // Every field of LayerWeights is some layer's slot; every global field is a slot.
    constexpr size_t kLayerFields = sizeof(LayerWeights) / sizeof(TensorView);
    std::set<size_t> layer_fields;
    for (const TensorView* s : slots) {
      for (uint32_t il = 0; il < cfg.n_layer; ++il) {
        const auto* base = reinterpret_cast<const TensorView*>(&w.layers[il]);
        if (s >= base && s < base + kLayerFields) layer_fields.insert(static_cast<size_t>(s - base));
      }
    }
    EXPECT_EQ(layer_fields.size(), kLayerFields);
    const auto* g = reinterpret_cast<const TensorView*>(&w.global);
    for (size_t i = 0; i < sizeof(GlobalWeights) / sizeof(TensorView); ++i) EXPECT_TRUE(slots.count(g + i));
  }
}

TEST(Visitor, TensorCounts) {
  // globals 6 + 24 per layer + 4 per compressed layer + 6 per indexer layer + 1 per hash layer
  EXPECT_EQ(expected_tensor_count(flash_profile()), 6u + 43 * 24 + 41 * 4 + 21 * 6 + 3);
  EXPECT_EQ(expected_tensor_count(tiny_profile()), 6u + 8 * 24 + 6 * 4 + 3 * 6 + 3);
}

TEST(Visitor, FlashShapesAndTypesMatchSpec) {
  std::map<std::string, TensorSpec> by;
  for_each_tensor_spec(flash_profile(), [&](const TensorSpec& s) { by[s.name] = s; });
  auto shape = [&](const char* n) { return by.at(n).shape_string(); };
  EXPECT_EQ(shape("token_embd.weight"), "[4096, 129280]");
  EXPECT_EQ(shape("output_hc_fn.weight"), "[16384, 4]");
  EXPECT_EQ(shape("output.weight"), "[4096, 129280]");
  EXPECT_EQ(by.at("output.weight").type_q2, GgmlType::kQ8_0);
  EXPECT_EQ(shape("blk.0.hc_attn_fn.weight"), "[16384, 24]");
  EXPECT_EQ(shape("blk.0.attn_q_b.weight"), "[1024, 32768]");
  EXPECT_EQ(shape("blk.0.attn_output_a.weight"), "[4096, 8192]");
  EXPECT_EQ(shape("blk.0.attn_output_b.weight"), "[8192, 4096]");
  EXPECT_EQ(shape("blk.2.attn_compressor_ape.weight"), "[1024, 4]");
  EXPECT_EQ(shape("blk.3.attn_compressor_ape.weight"), "[512, 128]");
  EXPECT_EQ(shape("blk.3.attn_compressor_kv.weight"), "[4096, 512]");
  EXPECT_EQ(shape("blk.42.attn_compressor_gate.weight"), "[4096, 1024]");
  EXPECT_EQ(shape("blk.42.indexer.attn_q_b.weight"), "[1024, 8192]");
  EXPECT_EQ(shape("blk.42.indexer.proj.weight"), "[4096, 64]");
  EXPECT_EQ(shape("blk.42.indexer_compressor_ape.weight"), "[256, 4]");
  EXPECT_EQ(shape("blk.42.indexer_compressor_norm.weight"), "[128]");
  EXPECT_EQ(shape("blk.2.ffn_gate_tid2eid.weight"), "[6, 129280]");
  EXPECT_EQ(by.at("blk.2.ffn_gate_tid2eid.weight").type_q2, GgmlType::kI32);
  EXPECT_EQ(shape("blk.5.ffn_gate_exps.weight"), "[4096, 2048, 256]");
  EXPECT_EQ(shape("blk.5.ffn_down_exps.weight"), "[2048, 4096, 256]");
  EXPECT_EQ(by.at("blk.5.ffn_gate_exps.weight").type_q2, GgmlType::kIQ2_XXS);
  EXPECT_EQ(by.at("blk.5.ffn_down_exps.weight").type_q2, GgmlType::kQ2_K);
  EXPECT_EQ(by.at("blk.5.ffn_up_exps.weight").type_q4, GgmlType::kQ4_K);
  EXPECT_FALSE(by.at("blk.5.exp_probs_b.bias").required);
  EXPECT_EQ(by.count("blk.3.ffn_gate_tid2eid.weight"), 0u);
  EXPECT_EQ(by.count("blk.1.attn_compressor_kv.weight"), 0u);
  EXPECT_EQ(by.count("blk.3.indexer.proj.weight"), 0u);
  EXPECT_EQ(by.count("blk.43.attn_norm.weight"), 0u);
}

TEST(Layout, PublishedLayoutsValidate) {
  for (const ModelConfig& cfg : {tiny_profile(), flash_profile()}) {
    for (ExpertQuant q : {ExpertQuant::kQ2, ExpertQuant::kQ4}) {
      auto descs = published_layout(cfg, q);
      const LayoutReport rep = validate_layout(cfg, descs);
      EXPECT_EQ(joined(rep.errors), "");
      EXPECT_TRUE(rep.warnings.empty());
      EXPECT_TRUE(rep.expert_quant_known);
      EXPECT_EQ(rep.expert_quant, q);
    }
  }
}

TEST(Layout, Q2KGateAcceptedAsQ2) {
  const ModelConfig cfg = tiny_profile();
  auto d = published_layout(cfg, ExpertQuant::kQ2);
  for (auto& t : d)
    if (t.name.find("ffn_gate_exps") != std::string::npos || t.name.find("ffn_up_exps") != std::string::npos)
      t.type = GgmlType::kQ2_K;
  const LayoutReport rep = validate_layout(cfg, d);
  EXPECT_EQ(joined(rep.errors), "");
  EXPECT_EQ(rep.expert_quant, ExpertQuant::kQ2);
}

struct LayoutBreak {
  const char* what;
  std::function<void(std::vector<TensorDesc>&)> edit;
  std::vector<const char*> expect;
  bool is_warning = false;
};

TEST(Layout, EachBrokenRuleIsNamed) {
  const ModelConfig cfg = flash_profile();
  const LayoutBreak breaks[] = {
      {"wrong type",
       [](auto& d) { find_desc(d, "blk.7.attn_kv.weight")->type = GgmlType::kF16; },
       {"tensor 'blk.7.attn_kv.weight': expected type q8_0, got f16"}},
      {"wrong shape",
       [](auto& d) { find_desc(d, "blk.4.attn_compressor_ape.weight")->ne = {512, 128, 1, 1}; },
       {"tensor 'blk.4.attn_compressor_ape.weight': expected shape [1024, 4], got [512, 128]"}},
      {"missing",
       [](auto& d) {
         d.erase(std::remove_if(d.begin(), d.end(),
                                [](const TensorDesc& t) { return t.name == "blk.1.ffn_gate_tid2eid.weight"; }),
                 d.end());
       },
       {"tensor 'blk.1.ffn_gate_tid2eid.weight': missing (expected i32 [6, 129280])"}},
      {"missing optional is fine",
       [](auto& d) {
         d.erase(std::remove_if(d.begin(), d.end(),
                                [](const TensorDesc& t) { return t.name == "blk.9.exp_probs_b.bias"; }),
                 d.end());
       },
       {}},
      {"q4 layer in a q2 file",
       [](auto& d) {
         for (const char* n : {"blk.10.ffn_gate_exps.weight", "blk.10.ffn_up_exps.weight",
                               "blk.10.ffn_down_exps.weight"})
           find_desc(d, n)->type = GgmlType::kQ4_K;
       },
       {"layer 10 routed experts: expected the q2 layout of layer 0 (all layers must agree), got q4"}},
      {"mixed within layer",
       [](auto& d) { find_desc(d, "blk.6.ffn_down_exps.weight")->type = GgmlType::kQ4_K; },
       {"layer 6 routed experts: expected q2 layout", "got gate iq2_xxs, down q4_K"}},
      {"up differs from gate",
       [](auto& d) { find_desc(d, "blk.8.ffn_up_exps.weight")->type = GgmlType::kQ2_K; },
       {"tensor 'blk.8.ffn_up_exps.weight': expected type iq2_xxs (same as ffn_gate_exps), got q2_K"}},
      {"down iq2 not accepted",
       [](auto& d) { find_desc(d, "blk.8.ffn_down_exps.weight")->type = GgmlType::kIQ2_XXS; },
       {"tensor 'blk.8.ffn_down_exps.weight': expected type q2_K|q4_K, got iq2_xxs"}},
      {"compressor in dense layer",
       [](auto& d) { d.push_back({"blk.1.attn_compressor_kv.weight", GgmlType::kF16, {4096, 1024, 1, 1}}); },
       {"tensor 'blk.1.attn_compressor_kv.weight': unexpected in layer 1 (ratio 0"}},
      {"indexer in ratio-128 layer",
       [](auto& d) { d.push_back({"blk.3.indexer.proj.weight", GgmlType::kF16, {4096, 64, 1, 1}}); },
       {"tensor 'blk.3.indexer.proj.weight': unexpected in layer 3 (ratio 128"}},
      {"tid2eid in non-hash layer",
       [](auto& d) { d.push_back({"blk.3.ffn_gate_tid2eid.weight", GgmlType::kI32, {6, 129280, 1, 1}}); },
       {"tensor 'blk.3.ffn_gate_tid2eid.weight': unexpected in layer 3", "top-k routed"}},
      {"layer beyond block_count",
       [](auto& d) { d.push_back({"blk.43.attn_norm.weight", GgmlType::kF32, {4096, 1, 1, 1}}); },
       {"tensor 'blk.43.attn_norm.weight': unexpected, layer 43 >= block_count (43)"}},
      {"unknown tensor is a warning",
       [](auto& d) { d.push_back({"mtp.0.enorm.weight", GgmlType::kF32, {4096, 1, 1, 1}}); },
       {"tensor 'mtp.0.enorm.weight': not part of the DS4 layout, ignored"},
       true},
  };
  for (const auto& b : breaks) {
    auto d = published_layout(cfg, ExpertQuant::kQ2);
    b.edit(d);
    const LayoutReport rep = validate_layout(cfg, d);
    const std::string errs = joined(rep.errors), warns = joined(rep.warnings);
    if (b.expect.empty()) {
      EXPECT_EQ(errs, "") << b.what;
      continue;
    }
    for (const char* e : b.expect) EXPECT_THAT(b.is_warning ? warns : errs, HasSubstr(e)) << b.what;
    EXPECT_EQ(rep.ok(), b.is_warning) << b.what;
  }
}

TEST(Layout, MixedQuantClearsExpertQuant) {
  const ModelConfig cfg = tiny_profile();
  auto d = published_layout(cfg, ExpertQuant::kQ4);
  for (auto& t : d)
    if (t.name.rfind("blk.5.ffn_", 0) == 0 && t.name.find("_exps") != std::string::npos)
      t.type = t.name.find("down") != std::string::npos ? GgmlType::kQ2_K : GgmlType::kIQ2_XXS;
  const LayoutReport rep = validate_layout(cfg, d);
  EXPECT_FALSE(rep.ok());
  EXPECT_FALSE(rep.expert_quant_known);
  EXPECT_THAT(joined(rep.errors), HasSubstr("layer 5 routed experts: expected the q4 layout of layer 0"));
}

TEST(TensorView, ExpertSlicingMath) {
  // Flash q2 gate: [4096, 2048, 256] IQ2_XXS -> row 16 blocks x 66 B = 1056 B.
  std::vector<uint8_t> fake(8);
  TensorView v;
  v.data = fake.data();
  v.type = GgmlType::kIQ2_XXS;
  v.ne = {4096, 2048, 256, 1};
  v.row_bytes = 4096 / 256 * 66;
  v.nbytes = v.row_bytes * 2048 * 256;
  EXPECT_EQ(v.row_bytes, 1056u);
  EXPECT_EQ(v.n_rows(), 2048 * 256);
  EXPECT_EQ(v.expert_bytes(), 2048u * 1056u);
  EXPECT_EQ(v.expert_data(0), v.data);
  EXPECT_EQ(v.expert_data(255) - v.data, static_cast<ptrdiff_t>(255ull * 2048 * 1056));
  const TensorView e = v.expert(7);
  EXPECT_EQ(e.data - v.data, static_cast<ptrdiff_t>(7ull * 2048 * 1056));
  EXPECT_EQ(e.ne[0], 4096);
  EXPECT_EQ(e.ne[1], 2048);
  EXPECT_EQ(e.ne[2], 1);
  EXPECT_EQ(e.nbytes, 2048u * 1056u);
  EXPECT_EQ(e.row(3) - e.data, static_cast<ptrdiff_t>(3 * 1056));
  // The last expert ends exactly at the tensor end.
  EXPECT_EQ(static_cast<uint64_t>(v.expert_data(255) - v.data) + v.expert_bytes(), v.nbytes);
  // Q2_K down [2048, 4096, 256]: 8 blocks x 84 B = 672 B per row.
  TensorView d;
  d.data = fake.data();
  d.ne = {2048, 4096, 256, 1};
  d.row_bytes = 2048 / 256 * 84;
  EXPECT_EQ(d.row_bytes, 672u);
  EXPECT_EQ(d.expert_data(1) - d.data, static_cast<ptrdiff_t>(4096 * 672));
}

TEST(TensorSpec, Strings) {
  std::map<std::string, TensorSpec> by;
  for_each_tensor_spec(tiny_profile(), [&](const TensorSpec& s) { by[s.name] = s; });
  EXPECT_EQ(by.at("blk.3.ffn_gate_exps.weight").allowed_string(), "iq2_xxs|q2_K|q4_K");
  EXPECT_EQ(by.at("blk.3.ffn_gate_exps.weight").shape_string(), "[256, 256, 16]");
  EXPECT_EQ(by.at("blk.3.ffn_gate_exps.weight").layer, 3);
  EXPECT_EQ(by.at("output.weight").layer, -1);
}

}  // namespace
}  // namespace ds4::model
