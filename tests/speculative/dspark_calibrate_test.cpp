// tests/speculative/dspark_calibrate_test.cpp — calibrate_dspark_costs (engine/speculative.h), the one
// implementation behind ds4 --dspark-calibrate and ds4-bench-spec --calibrate.
//
// No timing is asserted (the figures are wall-clock ratios of a shared machine). What is:
// the calibration runs on the shipped models and returns a complete, finite, positive set of
// costs; its own correctness check (every verify row's argmax equals plain decoding's) passed;
// apply_dspark_costs copies exactly the measured values; the printed DS4_DSPARK_COST_* lines
// carry those values; bad input is an error, not an abort; and the engine's drafter is left
// usable: DSpark output after a calibration still equals plain output.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "speculative/runtime.h"

namespace ds4 {
namespace {

const std::string kTarget = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny.gguf";
const std::string kDrafter = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny-dspark.gguf";

std::unique_ptr<Engine> open_engine(bool with_drafter) {
  EngineOptions eo;
  eo.model_path = kTarget;
  eo.mtp_path = with_drafter ? kDrafter : "";
  eo.n_threads = 2;
  auto e = Engine::open(eo);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

std::vector<int32_t> greedy(Engine& engine, const std::vector<int32_t>& prompt, const SpecOptions* spec) {
  auto session = engine.new_session(256);
  EXPECT_TRUE(session.ok());
  std::unique_ptr<SpeculativeDecoder> dec;
  if (spec != nullptr) {
    auto d = new_speculative_decoder(engine, **session, *spec);
    EXPECT_TRUE(d.ok()) << d.status().to_string();
    dec = std::move(d).value();
  }
  GenerateOptions go;
  go.max_tokens = 48;
  go.sampler.temperature = 0.0f;
  go.stop_at_eos = false;
  go.decoder = dec.get();
  auto r = generate(**session, engine.text(), prompt, go, nullptr);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r->tokens : std::vector<int32_t>{};
}

TEST(DsparkCalibrate, MeasuresACompleteCostSetOnTheShippedModels) {
  if (!std::filesystem::exists(kTarget) || !std::filesystem::exists(kDrafter)) GTEST_SKIP() << "shipped models missing";
  std::unique_ptr<Engine> engine = open_engine(true);
  ASSERT_TRUE(engine);
  int calls = 0, last_done = 0;
  auto c = calibrate_dspark_costs(*engine, 2, [&](int done, int total) {
    ++calls;
    last_done = done;
    EXPECT_EQ(total, 2);
  });
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(last_done, 2);
  EXPECT_EQ(c->reps, 2);
  EXPECT_EQ(c->n_threads, 2);
  EXPECT_GT(c->decode_ms, 0.0);
  ASSERT_EQ(c->verify.size(), 9u);  // verify(1..8), index 0 unused
  for (size_t n = 1; n < c->verify.size(); ++n) {
    EXPECT_TRUE(std::isfinite(c->verify[n]) && c->verify[n] > 0.0) << "verify(" << n << ") = " << c->verify[n];
  }
  EXPECT_GE(c->verify_row, 0.01f);
  EXPECT_GE(c->verify_base, 0.0f);
  EXPECT_TRUE(std::isfinite(c->verify_base) && std::isfinite(c->verify_row));
  EXPECT_TRUE(std::isfinite(c->draft) && c->draft > 0.0f);
  EXPECT_TRUE(std::isfinite(c->draft_reject) && c->draft_reject > 0.0f);
  EXPECT_TRUE(std::isfinite(c->overlap_draft_extra) && std::isfinite(c->overlap_reject_extra));

  SpecOptions so;
  so.cost_window = 7;
  apply_dspark_costs(*c, &so);
  EXPECT_EQ(so.cost_verify_base, c->verify_base);
  EXPECT_EQ(so.cost_verify_row, c->verify_row);
  EXPECT_EQ(so.cost_draft, c->draft);
  EXPECT_EQ(so.cost_draft_reject, c->draft_reject);
  // Priced like sequential proposals unless this machine measured the pair free (timing).
  const bool free = c->overlap_draft_extra <= -speculative::kFreeOverlapMargin &&
                    c->overlap_reject_extra <= -speculative::kFreeOverlapMargin;
  const float ov_draft = free ? speculative::kFreeOverlapCost : c->draft;
  const float ov_reject = free ? speculative::kFreeOverlapCost : c->draft_reject;
  EXPECT_EQ(so.cost_draft_overlap, ov_draft);
  EXPECT_EQ(so.cost_draft_reject_overlap, ov_reject);
  EXPECT_EQ(so.cost_window, 7);  // untouched

  // The environment lines carry the values (3 decimals).
  std::map<std::string, double> env;
  std::istringstream in(format_dspark_costs(*c));
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (line.rfind("DS4_DSPARK_COST_", 0) == 0 && eq != std::string::npos) env[line.substr(0, eq)] = std::atof(line.c_str() + eq + 1);
  }
  ASSERT_EQ(env.size(), 6u);
  EXPECT_NEAR(env["DS4_DSPARK_COST_VERIFY_BASE"], c->verify_base, 6e-4);
  EXPECT_NEAR(env["DS4_DSPARK_COST_VERIFY_ROW"], c->verify_row, 6e-4);
  EXPECT_NEAR(env["DS4_DSPARK_COST_DRAFT"], c->draft, 6e-4);
  EXPECT_NEAR(env["DS4_DSPARK_COST_DRAFT_REJECT"], c->draft_reject, 6e-4);
  EXPECT_NEAR(env["DS4_DSPARK_COST_DRAFT_OVERLAP"], ov_draft, 6e-4);
  EXPECT_NEAR(env["DS4_DSPARK_COST_DRAFT_REJECT_OVERLAP"], ov_reject, 6e-4);

  // The drafter is left usable: DSpark (with the measured costs) still equals plain decoding.
  SpecOptions spec;
  ASSERT_TRUE(apply_dspark_policy(kDefaultDsparkPolicy, {0.55f, 0.6f, 0.65f}, kDefaultDsparkMarginGate, &spec).ok());
  apply_dspark_costs(*c, &spec);
  std::vector<int32_t> prompt{engine->bos_token()};
  const std::vector<int32_t> body = engine->tokenize("{\"alpha_2\": \"FR\", \"alpha_3\": \"FRA\", \"name\": \"France\"}\n{\"alpha_2\":");
  prompt.insert(prompt.end(), body.begin(), body.end());
  const std::vector<int32_t> plain = greedy(*engine, prompt, nullptr);
  ASSERT_EQ(plain.size(), 48u);
  EXPECT_EQ(greedy(*engine, prompt, &spec), plain);
}

// Overlap prices from a calibration: free (0, overlap on under the gate) only when both pair
// extras are at least kFreeOverlapMargin below a decode; otherwise the sequential prices.
TEST(DsparkCalibrate, OverlapIsFreeOnlyWellBelowADecode) {
  DsparkCostCalibration c;
  c.draft = 0.8f;
  c.draft_reject = 0.6f;
  struct Case {
    float extra, extra_reject;
    bool free;
  };
  // -0.125 / -0.120: a 16-thread calibration whose free overlap lost on every channel but
  // structured (speculative/config.h, kFreeOverlapMargin).
  for (const Case& k : {Case{-0.25f, -0.22f, true}, Case{-0.125f, -0.12f, false}, Case{-0.05f, -0.25f, false},
                        Case{-0.25f, 0.0f, false}, Case{0.5f, 0.3f, false}}) {
    c.overlap_draft_extra = k.extra;
    c.overlap_reject_extra = k.extra_reject;
    SpecOptions so;
    apply_dspark_costs(c, &so);
    EXPECT_EQ(so.cost_draft_overlap, k.free ? speculative::kFreeOverlapCost : c.draft) << k.extra << " " << k.extra_reject;
    EXPECT_EQ(so.cost_draft_reject_overlap, k.free ? speculative::kFreeOverlapCost : c.draft_reject);
    EXPECT_EQ(so.cost_draft, c.draft);
    EXPECT_NE(format_dspark_costs(c).find(k.free ? "(free:" : "(not free:"), std::string::npos) << format_dspark_costs(c);
  }
}

TEST(DsparkCalibrate, BadInputIsAnError) {
  if (!std::filesystem::exists(kTarget) || !std::filesystem::exists(kDrafter)) GTEST_SKIP() << "shipped models missing";
  std::unique_ptr<Engine> plain = open_engine(false);
  ASSERT_TRUE(plain);
  auto no_drafter = calibrate_dspark_costs(*plain, 1);
  ASSERT_FALSE(no_drafter.ok());
  EXPECT_EQ(no_drafter.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(no_drafter.status().message().find("--mtp"), std::string::npos);
  std::unique_ptr<Engine> engine = open_engine(true);
  ASSERT_TRUE(engine);
  auto zero = calibrate_dspark_costs(*engine, 0);
  ASSERT_FALSE(zero.ok());
  EXPECT_EQ(zero.status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace ds4
