// tests/unit/model/config_test.cpp — ModelConfig: presets, derived sizes, layer plan, every
// validation rule (error names the key, expected vs actual), reading from GGUF metadata.
#include <cmath>
#include <functional>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "model/config.h"
#include "model/profiles.h"
#include "model_files.h"

namespace ds4::model {
namespace {

using ::testing::HasSubstr;

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& e : v) s += e + "\n";
  return s;
}

TEST(Config, PresetsAreValid) {
  EXPECT_EQ(joined(validate_config(tiny_profile())), "");
  EXPECT_EQ(joined(validate_config(flash_profile())), "");
  EXPECT_TRUE(check_config(flash_profile()).ok());
}

TEST(Config, FlashDerivedValues) {
  const ModelConfig c = flash_profile();
  EXPECT_EQ(c.hc_mix_dim(), 24u);
  EXPECT_EQ(c.hc_dim(), 16384u);
  EXPECT_EQ(c.q_dim(), 32768u);
  EXPECT_EQ(c.o_low_dim(), 8192u);
  EXPECT_EQ(c.group_dim(), 4096u);
  EXPECT_EQ(c.heads_per_group(), 8u);
  EXPECT_EQ(c.n_nope(), 448u);
  EXPECT_EQ(c.indexer_q_dim(), 8192u);
  EXPECT_EQ(c.count_layers(LayerKind::kDense), 2u);
  EXPECT_EQ(c.count_layers(LayerKind::kRatio4), 21u);
  EXPECT_EQ(c.count_layers(LayerKind::kRatio128), 20u);
  EXPECT_EQ(c.coff(0), 0u);
  EXPECT_EQ(c.coff(2), 2u);
  EXPECT_EQ(c.coff(3), 1u);
  EXPECT_EQ(c.comp_width(42), 1024u);
  EXPECT_EQ(c.comp_width(41), 512u);
  EXPECT_EQ(c.indexer_comp_width(), 256u);
  EXPECT_TRUE(c.is_hash_layer(2));
  EXPECT_FALSE(c.is_hash_layer(3));
  EXPECT_TRUE(c.has_indexer(42));
  EXPECT_FALSE(c.has_indexer(41));
  EXPECT_TRUE(c.has_compressor(41));
  EXPECT_FALSE(c.has_compressor(1));
  // floor((pos+1)/R) rows after pos+1 tokens; capacity ctx/R + 2.
  EXPECT_EQ(c.n_comp_rows(2, 7), 1u);
  EXPECT_EQ(c.n_comp_rows(2, 8), 2u);
  EXPECT_EQ(c.n_comp_rows(3, 127), 0u);
  EXPECT_EQ(c.n_comp_rows(3, 128), 1u);
  EXPECT_EQ(c.n_comp_rows(0, 1000), 0u);
  EXPECT_EQ(c.comp_capacity(2, 1024), 258u);
  EXPECT_EQ(c.comp_capacity(3, 1024), 10u);
  EXPECT_EQ(c.raw_capacity(50), 50u);
  EXPECT_EQ(c.raw_capacity(5000), 128u);
}

TEST(Config, RopeParamsPerLayer) {
  const ModelConfig c = flash_profile();
  const RopeParams d = c.rope_params(1);
  EXPECT_EQ(d.freq_base, 10000.0f);
  EXPECT_EQ(d.freq_scale, 1.0f);
  EXPECT_EQ(d.ext_factor, 0.0f);
  EXPECT_EQ(d.attn_factor, 1.0f);
  const RopeParams r = c.rope_params(2);
  EXPECT_EQ(r.freq_base, 160000.0f);
  EXPECT_EQ(r.freq_scale, 1.0f / 16.0f);
  EXPECT_EQ(r.ext_factor, 1.0f);
  EXPECT_EQ(r.n_ctx_orig, 65536u);
  EXPECT_EQ(r.beta_fast, 32.0f);
  EXPECT_EQ(r.beta_slow, 1.0f);
  EXPECT_NEAR(r.attn_factor, 1.0 / (1.0 + 0.1 * std::log(16.0)), 1e-6);
}

TEST(Config, TinyPlanMatchesPattern) {
  const ModelConfig c = tiny_profile();
  ASSERT_EQ(c.n_layer, 8u);
  const LayerKind want[8] = {LayerKind::kDense,   LayerKind::kDense,    LayerKind::kRatio4,
                             LayerKind::kRatio128, LayerKind::kRatio4,  LayerKind::kRatio128,
                             LayerKind::kRatio4,   LayerKind::kRatio128};
  for (uint32_t il = 0; il < 8; ++il) EXPECT_EQ(c.layer_kind(il), want[il]) << il;
  EXPECT_EQ(c.n_hash_layer, 3u);
  EXPECT_EQ(c.group_dim(), 256u);
  EXPECT_EQ(c.n_ff_exp % 256, 0u);
}

TEST(Config, FloatToleranceRule) {
  EXPECT_TRUE(float_matches(1e-6 + 5e-7, 1e-6));    // absolute 1e-6 for |want| <= 1
  EXPECT_FALSE(float_matches(1e-6 + 2e-6, 1e-6));
  EXPECT_TRUE(float_matches(160000.1, 160000.0));   // relative 1e-6 above 1
  EXPECT_FALSE(float_matches(160000.5, 160000.0));
}

struct BrokenRule {
  const char* what;
  std::function<void(ModelConfig&)> edit;
  const char* expect;  // substring of the error
};

TEST(Config, EachBrokenRuleIsNamed) {
  const BrokenRule rules[] = {
      {"ratio pattern", [](ModelConfig& c) { c.compress_ratios[3] = 4; },
       "deepseek4.attention.compress_ratios[3]: expected 128"},
      {"ratio dense", [](ModelConfig& c) { c.compress_ratios[1] = 4; },
       "compress_ratios[1]: expected 0"},
      {"ratio length", [](ModelConfig& c) { c.compress_ratios.pop_back(); },
       "compress_ratios: expected 8 entries (block_count), got 7"},
      {"hash count", [](ModelConfig& c) { c.n_hash_layer = 9; },
       "deepseek4.hash_layer_count: expected <= block_count (8), got 9"},
      {"swiglu length", [](ModelConfig& c) { c.swiglu_clamp.resize(3); },
       "deepseek4.swiglu_clamp_exp: expected 8 entries"},
      {"swiglu value", [](ModelConfig& c) { c.swiglu_clamp[5] = -1.0f; },
       "deepseek4.swiglu_clamp_exp[5]: expected a finite value > 0, got -1"},
      {"kv heads", [](ModelConfig& c) { c.n_head_kv = 2; },
       "deepseek4.attention.head_count_kv: expected 1 (one shared K=V head), got 2"},
      {"value length", [](ModelConfig& c) { c.value_dim = 64; },
       "deepseek4.attention.value_length: expected 128"},
      {"rope odd", [](ModelConfig& c) { c.n_rot = 63; },
       "deepseek4.rope.dimension_count: expected an even number, got 63"},
      {"rope > head", [](ModelConfig& c) { c.n_rot = 256; },
       "deepseek4.rope.dimension_count: expected <= attention.key_length (128), got 256"},
      {"fp8 blocks", [](ModelConfig& c) { c.n_rot = 32; },
       "multiple of 64 (FP8 KV blocks), got 128 - 32 = 96"},
      {"embd q8k", [](ModelConfig& c) { c.n_embd = 288; },
       "deepseek4.embedding_length: expected a multiple of 256 (Q8_K blocks), got 288"},
      {"ff 256", [](ModelConfig& c) { c.n_ff_exp = 128; },
       "deepseek4.expert_feed_forward_length: expected a multiple of 256"},
      {"q lora", [](ModelConfig& c) { c.q_lora_rank = 48; },
       "deepseek4.attention.q_lora_rank: expected a multiple of 32 (Q8_0 blocks), got 48"},
      {"o lora", [](ModelConfig& c) { c.o_lora_rank = 40; },
       "deepseek4.attention.output_lora_rank: expected a multiple of 32"},
      {"groups", [](ModelConfig& c) { c.n_out_group = 3; },
       "deepseek4.attention.head_count: expected a multiple of attention.output_group_count (3), got 8"},
      {"groups max", [](ModelConfig& c) { c.n_out_group = 128; },
       "deepseek4.attention.output_group_count: expected at most 64, got 128"},
      {"indexer dim", [](ModelConfig& c) { c.indexer_head_dim = 96; },
       "deepseek4.attention.indexer.key_length: expected a power of two >= 32"},
      {"top-k", [](ModelConfig& c) { c.indexer_top_k = 0; },
       "deepseek4.attention.indexer.top_k: expected > 0, got 0"},
      {"window", [](ModelConfig& c) { c.n_swa = 0; },
       "deepseek4.attention.sliding_window: expected > 0, got 0"},
      {"experts used", [](ModelConfig& c) { c.n_expert_used = 17; },
       "deepseek4.expert_used_count: expected <= expert_count (16), got 17"},
      {"shared", [](ModelConfig& c) { c.n_expert_shared = 2; },
       "deepseek4.expert_shared_count: expected 1"},
      {"groups routing", [](ModelConfig& c) { c.expert_group_count = 8; },
       "deepseek4.expert_group_count: expected 0 (no group-limited routing), got 8"},
      {"eps", [](ModelConfig& c) { c.rms_eps = 0.0f; },
       "deepseek4.attention.layer_norm_rms_epsilon: expected a finite value > 0, got 0"},
      {"hc eps nan", [](ModelConfig& c) { c.hc_eps = NAN; },
       "deepseek4.hyper_connection.epsilon: expected a finite value > 0"},
      {"yarn factor", [](ModelConfig& c) { c.rope_scaling_factor = 0.5f; },
       "deepseek4.rope.scaling.factor: expected a finite value >= 1, got 0.5"},
      {"layers", [](ModelConfig& c) { c.n_layer = 0; }, "deepseek4.block_count: expected > 0, got 0"},
  };
  for (const auto& r : rules) {
    ModelConfig c = tiny_profile();
    r.edit(c);
    const auto problems = validate_config(c);
    EXPECT_THAT(joined(problems), HasSubstr(r.expect)) << r.what;
    EXPECT_FALSE(check_config(c).ok()) << r.what;
  }
}

TEST(Config, RulesNotSizesFlashAndCustomShapesBothValid) {
  ModelConfig c = tiny_profile();
  c.n_layer = 5;  // any depth that follows the pattern
  c.compress_ratios = {0, 0, 4, 128, 4};
  c.swiglu_clamp.assign(5, 7.0f);
  c.n_embd = 512;
  c.n_expert = 32;
  EXPECT_EQ(joined(validate_config(c)), "");
}

TEST(Config, DiffConfig) {
  EXPECT_TRUE(diff_config(flash_profile(), flash_profile()).empty());
  ModelConfig c = flash_profile();
  c.rope_freq_base = 10000.005f;  // within tolerance
  EXPECT_TRUE(diff_config(c, flash_profile()).empty());
  c.n_expert = 128;
  c.expert_weights_scale = 2.0f;
  const std::string d = joined(diff_config(c, flash_profile()));
  EXPECT_THAT(d, HasSubstr("deepseek4.expert_count: expected 256, got 128"));
  EXPECT_THAT(d, HasSubstr("deepseek4.expert_weights_scale: expected 1.5, got 2"));
  EXPECT_FALSE(diff_config(tiny_profile(), flash_profile()).empty());
}

TEST(Config, KeyTableCoversAllValues) {
  const auto keys = config_keys();
  const auto vals = config_values(flash_profile());
  ASSERT_EQ(keys.size(), vals.size());
  for (size_t i = 0; i < keys.size(); ++i) EXPECT_STREQ(keys[i].key, vals[i].key);
  bool saw_ratios = false;
  for (const auto& v : vals) {
    if (std::string(v.key) == "deepseek4.attention.compress_ratios") {
      saw_ratios = true;
      EXPECT_EQ(v.au.size(), 43u);
    }
  }
  EXPECT_TRUE(saw_ratios);
}

// ---- reading from GGUF ----

Expected<ModelConfig> read_back(const std::function<Status(gguf::Writer&)>& build,
                                const std::string& name) {
  gguf::Writer w;
  Status st = build(w);
  if (!st.ok()) return st;
  const std::string path = testing::temp_path(name);
  st = w.write(path);
  if (!st.ok()) return st;
  auto f = gguf::File::open(path);
  ::unlink(path.c_str());
  if (!f.ok()) return f.status();
  return config_from_gguf(**f);
}

TEST(ConfigGguf, RoundTripsBothPresets) {
  for (const ModelConfig& want : {tiny_profile(), flash_profile()}) {
    auto got = read_back(
        [&](gguf::Writer& w) {
          Status st = w.set_string("general.architecture", "deepseek4");
          return st.ok() ? testing::put_config(w, want) : st;
        },
        "rt.gguf");
    ASSERT_TRUE(got.ok()) << got.status().to_string();
    EXPECT_EQ(joined(diff_config(*got, want)), "");
    EXPECT_EQ(got->context_length, want.context_length);
  }
}

// Writes the tiny config except `skip`, then calls `extra`.
std::function<Status(gguf::Writer&)> tiny_except(std::string skip,
                                                 std::function<Status(gguf::Writer&)> extra) {
  return [skip, extra](gguf::Writer& w) -> Status {
    for (const ConfigValue& v : config_values(tiny_profile())) {
      if (v.key == skip) continue;
      Status st;
      switch (v.type) {
        case KeyType::kU32: st = w.set_u32(v.key, static_cast<uint32_t>(v.u)); break;
        case KeyType::kU64: st = w.set_u64(v.key, v.u); break;
        case KeyType::kF32: st = w.set_f32(v.key, v.f); break;
        case KeyType::kBool: st = w.set_bool(v.key, v.b); break;
        case KeyType::kArrayU32: st = w.set_array_u32(v.key, v.au); break;
        case KeyType::kArrayF32: st = w.set_array_f32(v.key, v.af); break;
      }
      if (!st.ok()) return st;
    }
    return extra ? extra(w) : Status::ok_status();
  };
}

TEST(ConfigGguf, AcceptedAlternativeTypes) {
  // compress_ratios as i32 (longer than n_layer), swiglu as f64, eps as f64, orig ctx as u64,
  // head_count as u16, vocab_size absent but tokens present.
  auto got = read_back(
      tiny_except("", nullptr), "alt0.gguf");
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  auto alt = read_back(
      [](gguf::Writer& w) -> Status {
        ModelConfig t = tiny_profile();
        for (const ConfigValue& v : config_values(t)) {
          const std::string k = v.key;
          Status st;
          if (k == "deepseek4.attention.compress_ratios") {
            std::vector<int32_t> r(v.au.begin(), v.au.end());
            r.push_back(4);
            st = w.set_array_i32(k, r);
          } else if (k == "deepseek4.swiglu_clamp_exp") {
            std::vector<double> s(v.af.begin(), v.af.end());
            st = w.set_array_f64(k, s);
          } else if (k == "deepseek4.attention.layer_norm_rms_epsilon") {
            st = w.set_f64(k, 1e-6);
          } else if (k == "deepseek4.rope.scaling.original_context_length") {
            st = w.set_u64(k, 65536);
          } else if (k == "deepseek4.attention.head_count") {
            st = w.set_u16(k, 8);
          } else if (k == "deepseek4.vocab_size") {
            std::vector<std::string> toks(300, "");
            for (size_t i = 0; i < toks.size(); ++i) toks[i] = "t" + std::to_string(i);
            st = w.set_array_string("tokenizer.ggml.tokens", std::span<const std::string>(toks));
          } else {
            switch (v.type) {
              case KeyType::kU32: st = w.set_u32(k, static_cast<uint32_t>(v.u)); break;
              case KeyType::kU64: st = w.set_u64(k, v.u); break;
              case KeyType::kF32: st = w.set_f32(k, v.f); break;
              case KeyType::kBool: st = w.set_bool(k, v.b); break;
              default: break;
            }
          }
          if (!st.ok()) return st;
        }
        return Status::ok_status();
      },
      "alt.gguf");
  ASSERT_TRUE(alt.ok()) << alt.status().to_string();
  EXPECT_EQ(alt->compress_ratios.size(), 8u);
  EXPECT_EQ(alt->n_vocab, 300u);
  EXPECT_EQ(alt->n_head, 8u);
  EXPECT_FLOAT_EQ(alt->rms_eps, 1e-6f);
}

TEST(ConfigGguf, MissingKeyIsNamed) {
  auto got = read_back(tiny_except("deepseek4.attention.q_lora_rank", nullptr), "miss.gguf");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("deepseek4.attention.q_lora_rank: missing"));
}

TEST(ConfigGguf, OptionalKeysMayBeAbsent) {
  auto got = read_back(tiny_except("deepseek4.expert_group_count", nullptr), "opt.gguf");
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->expert_group_count, 0u);
}

TEST(ConfigGguf, WrongTypeIsNamed) {
  auto got = read_back(tiny_except("deepseek4.block_count",
                                   [](gguf::Writer& w) { return w.set_string("deepseek4.block_count", "8"); }),
                       "type.gguf");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(), HasSubstr("deepseek4.block_count"));
  auto arr = read_back(tiny_except("deepseek4.attention.compress_ratios",
                                   [](gguf::Writer& w) {
                                     std::vector<float> r(8, 4.0f);
                                     return w.set_array_f32("deepseek4.attention.compress_ratios", r);
                                   }),
                       "type2.gguf");
  ASSERT_FALSE(arr.ok());
  EXPECT_THAT(arr.status().message(),
              HasSubstr("deepseek4.attention.compress_ratios: expected an array of u32 or i32"));
}

TEST(ConfigGguf, ShortArrayAndBadPatternAreNamed) {
  auto got = read_back(tiny_except("deepseek4.attention.compress_ratios",
                                   [](gguf::Writer& w) {
                                     std::vector<uint32_t> r = {0, 0, 4, 128, 4, 128};
                                     return w.set_array_u32("deepseek4.attention.compress_ratios", r);
                                   }),
                       "short.gguf");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(),
              HasSubstr("deepseek4.attention.compress_ratios: expected at least 8 entries (block_count), got 6"));
  auto pat = read_back(tiny_except("deepseek4.attention.compress_ratios",
                                   [](gguf::Writer& w) {
                                     std::vector<uint32_t> r = {0, 0, 128, 4, 4, 128, 4, 128};
                                     return w.set_array_u32("deepseek4.attention.compress_ratios", r);
                                   }),
                       "pat.gguf");
  ASSERT_FALSE(pat.ok());
  EXPECT_THAT(pat.status().message(), HasSubstr("compress_ratios[2]: expected 4"));
  EXPECT_THAT(pat.status().message(), HasSubstr("compress_ratios[3]: expected 128"));
}

TEST(ConfigGguf, OtherArchitectureRejectedClearly) {
  auto got = read_back(
      [](gguf::Writer& w) {
        Status st = w.set_string("general.architecture", "llama");
        return st.ok() ? w.set_u32("llama.block_count", 32) : st;
      },
      "llama.gguf");
  ASSERT_FALSE(got.ok());
  EXPECT_THAT(got.status().message(),
              HasSubstr("general.architecture is 'llama', expected 'deepseek4'"));
  // Only that message: no pile of "missing key" noise.
  EXPECT_EQ(got.status().message().find("missing"), std::string::npos);
}

}  // namespace
}  // namespace ds4::model
