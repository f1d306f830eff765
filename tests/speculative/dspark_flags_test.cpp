// tests/speculative/dspark_flags_test.cpp — the one DSpark flag table (engine/dspark_flags.h):
// what a command line or an environment mirror turns into SpecOptions, for ds4 (kServe) and
// ds4-bench-spec (kBench), and the errors for bad values.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/dspark_flags.h"

namespace ds4 {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

ParseResult parse(DsparkFlags* f, DsparkFlagSet set, std::vector<const char*> args,
                  std::map<std::string, std::string> env = {}) {
  FlagTable t("prog", "test");
  register_dspark_flags(t, f, set);
  args.insert(args.begin(), "prog");
  return t.parse(static_cast<int>(args.size()), args.data(), env_of(std::move(env)));
}

TEST(DsparkFlags, DefaultsGiveTheDefaultPreset) {
  DsparkFlags f;
  ASSERT_TRUE(parse(&f, DsparkFlagSet::kServe, {}).ok());
  EXPECT_TRUE(validate_dspark_flags(f).ok());
  auto so = dspark_options(f);
  ASSERT_TRUE(so.ok()) << so.status().to_string();
  SpecOptions want;
  std::vector<float> grid;
  ASSERT_TRUE(parse_dspark_confidence_grid(kDefaultDsparkGrid, &grid).ok());
  ASSERT_TRUE(apply_dspark_policy(kDefaultDsparkPolicy, grid, kDefaultDsparkMarginGate, &want).ok());
  EXPECT_EQ(so->fold, want.fold);
  EXPECT_EQ(so->fold_after_partial, want.fold_after_partial);
  EXPECT_EQ(so->confidence_grid, want.confidence_grid);
  EXPECT_EQ(so->backoff, want.backoff);
  EXPECT_EQ(so->margin_gate, want.margin_gate);
  EXPECT_EQ(so->cost_gate, want.cost_gate);
  EXPECT_EQ(so->lookup, want.lookup);
  EXPECT_EQ(so->scheduler, want.scheduler);
  EXPECT_EQ(so->confidence, want.confidence);
  EXPECT_EQ(so->cost_verify_base, speculative::kCpuCostVerifyBase);
  EXPECT_EQ(so->cost_draft, speculative::kCpuCostDraft);
  EXPECT_EQ(so->overlap, -1);
  EXPECT_FALSE(f.enabled);
}

TEST(DsparkFlags, SwitchesAddToThePresetAndValuesReplace) {
  DsparkFlags f;
  ParseResult r = parse(&f, DsparkFlagSet::kServe,
                        {"--dspark", "--dspark-policy", "baseline", "--dspark-cost-gate", "--dspark-confidence", "0.3",
                         "--dspark-fold-partial", "1", "--dspark-margin-gate", "2.5", "--dspark-confidence-grid",
                         "0.4,0.5", "--dspark-cost-draft", "0.9", "--dspark-overlap", "0"},
                        {{"DS4_DSPARK_LOOKUP", "1"}, {"DS4_DSPARK_COST_WINDOW", "32"}});
  ASSERT_TRUE(r.ok()) << r.message;
  ASSERT_TRUE(validate_dspark_flags(f).ok());
  auto so = dspark_options(f);
  ASSERT_TRUE(so.ok()) << so.status().to_string();
  EXPECT_TRUE(f.enabled);
  EXPECT_TRUE(so->cost_gate);  // added to baseline
  EXPECT_FALSE(so->fold);      // baseline's
  EXPECT_FALSE(so->backoff);
  EXPECT_TRUE(so->fold_after_partial);
  EXPECT_EQ(so->margin_gate, 2.5f);
  EXPECT_EQ(so->confidence_grid, (std::vector<float>{0.4f, 0.5f}));
  EXPECT_EQ(so->confidence, 0.3f);
  EXPECT_EQ(so->cost_draft, 0.9f);
  EXPECT_EQ(so->overlap, 0);
  EXPECT_TRUE(so->lookup);          // environment mirror
  EXPECT_EQ(so->cost_window, 32);   // environment mirror
  // The scheduler switch turns the preset's scheduler off; a preset from the bench's list
  // takes the bench's grid and margin for its grid / margin gate.
  DsparkFlags g;
  ASSERT_TRUE(parse(&g, DsparkFlagSet::kServe, {"--dspark-scheduler", "0"}).ok());
  auto all = dspark_options(g, "all", {0.7f}, 3.0f);
  ASSERT_TRUE(all.ok());
  EXPECT_FALSE(all->scheduler);
  EXPECT_EQ(all->confidence_grid, std::vector<float>{0.7f});
  EXPECT_EQ(all->margin_gate, 3.0f);
  EXPECT_TRUE(all->fold && all->backoff && !all->cost_gate);
}

TEST(DsparkFlags, BenchSpellingsAreAliasesAndThePolicyIsNotAFlag) {
  DsparkFlags f;
  ParseResult r = parse(&f, DsparkFlagSet::kBench,
                        {"--confidence", "0.2", "--cost-verify-row", "0.3", "--overlap", "1", "--calibrate",
                         "--calibrate-reps", "3", "--dspark-cost-draft-reject", "0.5"});
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(f.values.confidence, 0.2f);
  EXPECT_EQ(f.values.cost_verify_row, 0.3f);
  EXPECT_EQ(f.values.overlap, 1);
  EXPECT_EQ(f.values.cost_draft_reject, 0.5f);
  EXPECT_TRUE(f.calibrate);
  EXPECT_EQ(f.calibrate_reps, 3);
  DsparkFlags g;
  EXPECT_FALSE(parse(&g, DsparkFlagSet::kBench, {"--dspark-policy", "all"}).ok());
  EXPECT_FALSE(parse(&g, DsparkFlagSet::kBench, {"--dspark"}).ok());
  // ds4 has no short spellings.
  DsparkFlags h;
  EXPECT_FALSE(parse(&h, DsparkFlagSet::kServe, {"--cost-draft", "1"}).ok());
}

TEST(DsparkFlags, BadValuesNameTheFlag) {
  struct Case {
    std::vector<const char*> args;
    const char* flag;
  };
  const Case cases[] = {
      {{"--dspark-confidence", "1.5"}, "--dspark-confidence"},
      {{"--dspark-margin-gate", "-3"}, "--dspark-margin-gate"},
      {{"--dspark-cost-draft", "-1"}, "--dspark-cost-*"},
      {{"--dspark-overlap", "2"}, "--dspark-overlap"},
      {{"--dspark-lookup", "5"}, "--dspark-lookup"},
      {{"--dspark-fold-partial", "2"}, "--dspark-fold-partial"},
      {{"--dspark-calibrate-reps", "0"}, "--dspark-calibrate-reps"},
      {{"--dspark-cost-window", "0"}, "--dspark-cost-window"},
      {{"--dspark-confidence-grid", "0.5,x"}, "'x'"},
      {{"--dspark-policy", "costal"}, "'costal'"},
  };
  for (const Case& c : cases) {
    DsparkFlags f;
    ASSERT_TRUE(parse(&f, DsparkFlagSet::kServe, c.args).ok()) << c.flag;
    const Status st = validate_dspark_flags(f);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << c.flag;
    EXPECT_NE(st.message().find(c.flag), std::string::npos) << st.message();
  }
  // A malformed number in an environment mirror is a parse error, not an abort.
  DsparkFlags f;
  EXPECT_FALSE(parse(&f, DsparkFlagSet::kServe, {}, {{"DS4_DSPARK_CONFIDENCE", "high"}}).ok());
}

}  // namespace
}  // namespace ds4
