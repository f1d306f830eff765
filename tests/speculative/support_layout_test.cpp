// tests/speculative/support_layout_test.cpp — the two DSpark support-file layouts (today's
// `deepseek4.dspark.*` keys and the published 0731 standalone file: architecture deepseek4-dspark,
// bare `dspark.*` keys, stage records, `dspark.source.*` provenance), the provenance check against
// the target's general.source.revision, the 0731 target form, and missing-key errors.
#include <gtest/gtest.h>

#include "engine/generate.h"
#include "engine/speculative.h"
#include "engine/text.h"
#include "speculative/drafter.h"
#include "tests/speculative/spec_fixture.h"

namespace ds4::spec_test {
namespace {

using speculative::SupportLayout;

// A tiny target written in the 0731 form (general.source.revision = the 0731 revision).
std::string tiny_0731_target_path(uint64_t seed) {
  const std::string path = shared_path("target0731_seed" + std::to_string(seed));
  if (file_exists(path)) return path;
  tools::GenerateOptions opt;
  opt.quant = model::ExpertQuant::kQ2;
  opt.seed = seed;
  opt.fill = tools::FillMode::kRandomBlocks;
  opt.release = tools::Release::k0731;
  const Status st = tools::generate_model(model::tiny_profile(), opt, path);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return path;
}

model::ModelConfig config_of(const std::string& path) {
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f.ok()) return {};
  auto c = model::config_from_gguf(**f);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : model::ModelConfig{};
}

// A drafter for the tiny target, same seed => same tensors whatever the layout.
std::string gen_drafter(const std::string& stem, const model::ModelConfig& target, SupportLayout layout,
                        speculative::DrafterGenOptions opt = {}) {
  opt.seed = 3;
  opt.layout = layout;
  opt.gate_up_type = gguf::GgmlType::kQ2_K;  // fast to quantize
  const std::string path = temp_path(stem);
  const Status st = speculative::generate_drafter(target, opt, path);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return path;
}

TEST(SupportLayout, BothLayoutsReadTheSameConfig) {
  const model::ModelConfig tiny = model::tiny_profile();
  auto a = speculative::open_drafter_weights(gen_drafter("layout_keys", tiny, SupportLayout::kDeepseek4Keys), tiny);
  auto b = speculative::open_drafter_weights(gen_drafter("layout_0731", tiny, SupportLayout::kStandalone0731), tiny);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const speculative::DSparkConfig &ca = (*a)->config, &cb = (*b)->config;
  EXPECT_EQ(ca.layout, SupportLayout::kDeepseek4Keys);
  EXPECT_EQ(cb.layout, SupportLayout::kStandalone0731);
  EXPECT_EQ(ca.n_stages, cb.n_stages);
  EXPECT_EQ(ca.block_size, cb.block_size);
  EXPECT_EQ(ca.markov_rank, cb.markov_rank);
  EXPECT_EQ(ca.noise_token_id, cb.noise_token_id);
  EXPECT_EQ(ca.window, cb.window);
  EXPECT_EQ(ca.target_layers, cb.target_layers);
  EXPECT_TRUE(ca.provenance.empty());
  // The tiny profile carries no revision: the generator names the 0731 checkpoint.
  EXPECT_EQ(cb.provenance.revision, model::kFlash0731Revision);
  ASSERT_EQ(cb.provenance.fields.size(), 1u);
  EXPECT_EQ(cb.provenance.fields[0].first, "dspark.source.revision");
  EXPECT_EQ((*a)->n_tensors, (*b)->n_tensors);

  // What the file says about itself without a target (ds4-gguf inspect).
  auto f = gguf::File::open(temp_path("layout_0731"));
  ASSERT_TRUE(f.ok());
  const speculative::SupportInfo si = speculative::describe_support(**f);
  EXPECT_EQ(si.layout, SupportLayout::kStandalone0731);
  EXPECT_EQ(si.key_prefix, "dspark.");
  EXPECT_EQ(si.n_stages, 3);
  EXPECT_TRUE(si.errors.empty()) << si.errors.front();
}

TEST(SupportLayout, BothLayoutsGiveDsparkOutputIdenticalToPlainGreedy) {
  Stack st = Stack::open(7);
  auto text = TextCodec::from_gguf(st.model->file());
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  const model::ModelConfig& tiny = st.model->config();
  const std::vector<int32_t> prompt = prompt_tokens(20, tiny.n_vocab, 91);
  GenerateOptions opt;
  opt.max_tokens = 80;
  opt.stop_at_eos = false;
  opt.sampler.temperature = 0.0f;

  TestSession plain_s(st.session(256));
  auto plain = generate(plain_s, **text, prompt, opt, [](int32_t, std::string_view) { return true; });
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  ASSERT_EQ(plain->tokens.size(), 80u);

  for (SupportLayout layout : {SupportLayout::kDeepseek4Keys, SupportLayout::kStandalone0731}) {
    SCOPED_TRACE(speculative::support_layout_name(layout));
    const std::string path =
        gen_drafter(layout == SupportLayout::kStandalone0731 ? "id_0731" : "id_keys", tiny, layout);
    auto drafter = speculative::load_drafter(*st.model, *st.backend, path);
    ASSERT_TRUE(drafter.ok()) << drafter.status().to_string();
    TestSession spec_s(st.session(256));
    SpecOptions so;
    so.confidence = 0.0f;
    auto dec = SpeculativeDecoder::create((*drafter)->model(), spec_s.ms(), so);
    GenerateOptions sopt = opt;
    sopt.decoder = dec.get();
    auto spec = generate(spec_s, **text, prompt, sopt, [](int32_t, std::string_view) { return true; });
    ASSERT_TRUE(spec.ok()) << spec.status().to_string();
    EXPECT_EQ(spec->tokens, plain->tokens);
    EXPECT_EQ(state_bytes(spec_s.ms()), state_bytes(plain_s.ms()));
    EXPECT_GT(dec->summary().proposed, 0);  // the drafter really ran
  }
}

TEST(SupportLayout, MissingKeyNamesTheKey) {
  const model::ModelConfig tiny = model::tiny_profile();
  struct Case {
    SupportLayout layout;
    std::string key;
  };
  const Case cases[] = {
      {SupportLayout::kStandalone0731, "dspark.markov_rank"},
      {SupportLayout::kStandalone0731, "dspark.target_layer_ids"},
      {SupportLayout::kStandalone0731, "dspark.stage_count"},
      {SupportLayout::kStandalone0731, "dspark.n_layers"},
      {SupportLayout::kStandalone0731, "dspark.source.revision"},
      {SupportLayout::kDeepseek4Keys, "deepseek4.dspark.noise_token_id"},
      {SupportLayout::kDeepseek4Keys, "deepseek4.dspark.block_size"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.key);
    speculative::DrafterGenOptions opt;
    opt.omit_keys = {c.key};
    auto w = speculative::open_drafter_weights(gen_drafter("missing_key", tiny, c.layout, opt), tiny);
    ASSERT_FALSE(w.ok());
    EXPECT_EQ(w.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(w.status().message().find("metadata " + c.key + ": required key missing"), std::string::npos)
        << w.status().message();
  }
  // Without general.architecture a file is read as today's layout, whose third spelling is the
  // bare dspark.* key: a standalone file stripped of its architecture still loads (no provenance).
  speculative::DrafterGenOptions opt;
  opt.omit_keys = {"general.architecture"};
  auto w = speculative::open_drafter_weights(gen_drafter("no_arch", tiny, SupportLayout::kStandalone0731, opt), tiny);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ((*w)->config.layout, SupportLayout::kDeepseek4Keys);
  EXPECT_TRUE((*w)->config.provenance.empty());
}

TEST(SupportLayout, StandaloneStageRecordsAndKeySpellingAreChecked) {
  const model::ModelConfig tiny = model::tiny_profile();
  speculative::DrafterGenOptions opt;
  opt.omit_keys = {"dspark.stage_count"};
  opt.extra_u32_keys = {{"dspark.stage_count", 2}, {"deepseek4.dspark.block_size", 5}};
  auto w = speculative::open_drafter_weights(gen_drafter("stage_rec", tiny, SupportLayout::kStandalone0731, opt), tiny);
  ASSERT_FALSE(w.ok());
  const std::string& e = w.status().message();
  EXPECT_NE(e.find("metadata dspark.stage_count: expected 3 (stages mtp.0..mtp.2 in the tensor names), got 2"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("metadata deepseek4.dspark.block_size: unexpected in a deepseek4-dspark file"), std::string::npos)
      << e;
  // The same strays in today's layout are just the first spelling (no stage records there).
  speculative::DrafterGenOptions legacy;
  legacy.extra_u32_keys = {{"dspark.stage_count", 2}};
  EXPECT_TRUE(speculative::open_drafter_weights(gen_drafter("stage_rec_legacy", tiny, SupportLayout::kDeepseek4Keys, legacy), tiny).ok());
}

TEST(Provenance, Target0731FormIsAcceptedAndNamesItsRevision) {
  const std::string path = tiny_0731_target_path(7);
  const model::ModelConfig c = config_of(path);
  EXPECT_EQ(c.source_revision, model::kFlash0731Revision);
  auto m = model::Model::open(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  // Same weights as the preview-form target of the same seed: only identity metadata differs.
  EXPECT_EQ(model::diff_config((*m)->config(), config_of(tiny_target_path(7))), std::vector<std::string>{});
}

TEST(Provenance, MatchMismatchAndUnknown) {
  const model::ModelConfig t0731 = config_of(tiny_0731_target_path(7));
  const model::ModelConfig preview = model::tiny_profile();  // no general.source.revision
  ASSERT_FALSE(t0731.source_revision.empty());

  // Matching pair: loads silently.
  const std::string good = gen_drafter("prov_good", t0731, SupportLayout::kStandalone0731);
  auto w = speculative::open_drafter_weights(good, t0731);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_TRUE((*w)->warnings.empty());
  EXPECT_EQ(speculative::check_provenance((*w)->config, t0731).match, speculative::ProvenanceMatch::kMatch);

  // A drafter trained for another checkpoint: a warning that names both revisions, and a
  // refusal when the caller asks for the strict check.
  speculative::DrafterGenOptions opt;
  opt.source_revision = "0123456789abcdef0123456789abcdef01234567";
  const std::string other = gen_drafter("prov_other", t0731, SupportLayout::kStandalone0731, opt);
  auto m = speculative::open_drafter_weights(other, t0731);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ((*m)->warnings.size(), 1u);
  const std::string& msg = (*m)->warnings[0];
  EXPECT_NE(msg.find("trained for target revision 0123456789abcdef0123456789abcdef01234567"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::string("is revision ") + model::kFlash0731Revision + " (DeepSeek-V4-Flash-0731)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("output is still the target's own greedy text"), std::string::npos) << msg;
  speculative::DrafterLoadOptions strict;
  strict.require_matching_provenance = true;
  auto refused = speculative::open_drafter_weights(other, t0731, strict);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("refused"), std::string::npos) << refused.status().to_string();
  EXPECT_NE(refused.status().message().find("0123456789abcdef"), std::string::npos);
  EXPECT_TRUE(speculative::open_drafter_weights(good, t0731, strict).ok());

  // Revisions compare case-insensitively (hex).
  speculative::DrafterGenOptions upper;
  upper.source_revision = "7872F01B1D1FE23EABC4C98B48BFFCEF5A386062";
  auto u = speculative::open_drafter_weights(gen_drafter("prov_upper", t0731, SupportLayout::kStandalone0731, upper), t0731);
  ASSERT_TRUE(u.ok());
  EXPECT_TRUE((*u)->warnings.empty());

  // A target without a revision cannot be confirmed: no warning, the check says so.
  auto p = speculative::open_drafter_weights(good, preview);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE((*p)->warnings.empty());
  const speculative::ProvenanceCheck pc = speculative::check_provenance((*p)->config, preview);
  EXPECT_EQ(pc.match, speculative::ProvenanceMatch::kTargetUnknown);
  EXPECT_NE(pc.message.find("cannot be confirmed"), std::string::npos) << pc.message;

  // Today's layout records no target: nothing to check.
  auto legacy = speculative::open_drafter_weights(gen_drafter("prov_legacy", t0731, SupportLayout::kDeepseek4Keys), t0731);
  ASSERT_TRUE(legacy.ok());
  EXPECT_EQ(speculative::check_provenance((*legacy)->config, t0731).match, speculative::ProvenanceMatch::kNotRecorded);
  EXPECT_TRUE((*legacy)->warnings.empty());
}

}  // namespace
}  // namespace ds4::spec_test
