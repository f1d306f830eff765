// tests/reference/parity_test.cpp — C++ engine vs the independent PyTorch reference.
//
// Role: for each golden under tests/reference/goldens/ (tools/reference/make_goldens.py),
// regenerate the same random-weight tiny model with the project generator
// (tools::generate_model == `ds4-gguf generate --profile tiny --quant q2 --seed S`), check
// that the file is byte-identical to the one the goldens were made from (size + FNV-1a-64),
// decode the golden's 480-token prompt one token at a time through the public Engine API and
// compare the next-token logits after EVERY position with the float32 reference:
//   * top-5 reference logits (ids from the reference) at every position: |Δ| <= bound;
//   * all n_vocab logits at the golden's full positions: |Δ| <= bound;
//   * argmax equal at every position whose reference top1 − top2 margin exceeds 2·bound
//     (if every logit is within the bound, only such positions can legitimately flip);
//   * argmax agreement over all positions and the mean top-5 |Δ| within limits.
// The same check runs on the shipped trained model (models/ds4-tiny.gguf, goldens/shipped.*).
//
// Why the gap is not zero: the reference runs float32 on the dequantized weights with exact
// activations; the engine quantizes activations to Q8_0 (32-blocks, int8) before every
// Q8_0 matvec and to Q8_K before every expert dot (the reference simulates the FP8/FP4/f16
// KV roundings, not the activation quantization). Each int8 rounding is small (~0.4% of a
// block's max), but DS4 has many discrete decisions downstream — FP8 rounding of KV rows,
// top-k expert routing, indexer top-k — and a flipped decision moves logits by O(0.1-1).
// The bounds below are set from that intrinsic sensitivity, measured on the reference alone
// (float32 vs. float32 with the engine's activation quantization simulated), not from the
// engine's own gap. Component checks (tools/reference/component_parity.py, one layer active
// at a time with the activation quantization simulated) match the engine to 0.0 except where
// a Q8_0 input sits on an exact round-half-to-even tie (x·(1/d) = k + 0.5): the simulation is
// ~1 ulp off the engine's source-order sums, so such a tie can round the other way (Δ ~0.01).
// Ties are structural at position 0 (one raw KV row: the attention output is a scalar times
// an FP8/f16-grid row) and a flipped tie in a KV row persists for every later query. With the
// engine's tie decisions substituted into the reference, the ratio-4 layer (compressor, two-
// lane pool, visibility, indexer top-16 of up to 66 rows) matched to 2e-5 over 264 positions
// and the ratio-128 layer to 0.0015 (one output-head tie), so no component gap remains. The
// full-model bounds below cannot be tightened on that basis: in these chaotic models one
// flipped tie re-routes experts downstream (the reference with simulated activation
// quantization still differs from the engine by up to 1.4 over 264 positions).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <optional>
#include <string>
#include <vector>

#include "core/flags.h"
#include "engine/engine.h"
#include "model/profiles.h"
#include "tools/ds4-gguf/ds4_gguf.h"

namespace {


std::string golden_dir() { return std::string(DS4_SOURCE_DIR) + "/tests/reference/goldens/"; }

uint64_t fnv1a64_file(const std::string& path, uint64_t* size) {
  std::ifstream f(path, std::ios::binary);
  uint64_t h = 0xcbf29ce484222325ull;
  std::vector<char> buf(1 << 20);
  *size = 0;
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize n = f.gcount();
    for (std::streamsize i = 0; i < n; ++i) {
      h ^= static_cast<uint8_t>(buf[static_cast<size_t>(i)]);
      h *= 0x100000001b3ull;
    }
    *size += static_cast<uint64_t>(n);
  }
  return h;
}

// Tolerances of one comparison.
struct Limits {
  float bound;              // max |Δlogit| on the reference top-5 ids and at full positions
  double argmax_margin;     // argmax must agree where the reference margin exceeds this
  double min_agreement;     // share of ALL positions whose argmax must agree
  double max_mean_top5;     // mean |Δlogit| over the top-5 entries of all positions
};

struct Golden {
  nlohmann::json j;
  std::vector<float> full;  // [n_full, n_vocab]
};

Golden read_golden(const std::string& stem) {
  Golden g;
  const std::string base = golden_dir() + stem;
  std::ifstream jf(base + ".json");
  EXPECT_TRUE(jf.good()) << "missing golden " << base << ".json";
  if (!jf.good()) return g;
  g.j = nlohmann::json::parse(jf);
  const size_t n_full = g.j.at("full_positions").size();
  g.full.resize(n_full * g.j.at("n_vocab").get<size_t>());
  std::ifstream ff(base + ".f32", std::ios::binary);
  ff.read(reinterpret_cast<char*>(g.full.data()), static_cast<std::streamsize>(g.full.size() * 4));
  EXPECT_EQ(ff.gcount(), static_cast<std::streamsize>(g.full.size() * 4)) << base << ".f32";
  return g;
}

void expect_same_file(const std::string& path, const nlohmann::json& g) {
  uint64_t size = 0;
  const uint64_t fnv = fnv1a64_file(path, &size);
  char fnv_hex[17];
  std::snprintf(fnv_hex, sizeof fnv_hex, "%016llx", static_cast<unsigned long long>(fnv));
  EXPECT_EQ(size, g.at("model_bytes").get<uint64_t>())
      << path << " differs from the file the goldens were made from; rerun "
      << "tools/reference/make_goldens.py";
  EXPECT_EQ(std::string(fnv_hex), g.at("model_fnv1a64").get<std::string>())
      << path << " differs from the file the goldens were made from; rerun "
      << "tools/reference/make_goldens.py";
}

// Decodes the golden's tokens one by one and checks every position against `lim`.
void check_parity(const std::string& label, const std::string& model_path, const Golden& gold,
                  const Limits& lim) {
  const nlohmann::json& g = gold.j;
  const auto tokens = g.at("tokens").get<std::vector<int32_t>>();
  const auto argmax = g.at("argmax").get<std::vector<int32_t>>();
  const auto margin = g.at("margin").get<std::vector<double>>();
  const auto top5 = g.at("top5").get<std::vector<std::vector<int32_t>>>();
  const auto top5_logits = g.at("top5_logits").get<std::vector<std::vector<float>>>();
  const auto full_pos = g.at("full_positions").get<std::vector<int>>();
  const int n_vocab = g.at("n_vocab").get<int>();

  ds4::EngineOptions eo;
  eo.model_path = model_path;
  eo.n_threads = 2;
  auto engine = ds4::Engine::open(eo);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  auto session = (*engine)->new_session(static_cast<int>(tokens.size()) + 16);
  ASSERT_TRUE(session.ok()) << session.status().to_string();

  // DS4_PARITY_DUMP=DIR writes the engine's logits ([n_tokens, n_vocab] f32) for debugging.
  const std::optional<std::string> dump_dir = ds4::process_env()("DS4_PARITY_DUMP");
  std::ofstream dump;
  if (dump_dir) dump.open(*dump_dir + "/engine_" + label + ".f32", std::ios::binary);
  float max_top5 = 0.0f, max_full = 0.0f;
  double sum_top5 = 0.0;
  int excluded = 0, mismatched = 0, agree = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const ds4::Status st = (*session)->decode(tokens[i]);
    ASSERT_TRUE(st.ok()) << "decode at " << i << ": " << st.to_string();
    const std::span<const float> lg = (*session)->logits();
    ASSERT_EQ(static_cast<int>(lg.size()), n_vocab);
    if (dump.is_open()) {
      dump.write(reinterpret_cast<const char*>(lg.data()),
                 static_cast<std::streamsize>(lg.size() * sizeof(float)));
    }
    for (int k = 0; k < 5; ++k) {
      const float d = std::fabs(lg[static_cast<size_t>(top5[i][static_cast<size_t>(k)])] -
                                top5_logits[i][static_cast<size_t>(k)]);
      max_top5 = std::max(max_top5, d);
      sum_top5 += d;
      EXPECT_LE(d, lim.bound) << label << " position " << i << " token "
                              << top5[i][static_cast<size_t>(k)];
    }
    const int32_t am = static_cast<int32_t>(
        std::max_element(lg.begin(), lg.end()) - lg.begin());  // first max: ties -> lowest id
    if (am == argmax[i]) ++agree;
    if (margin[i] > lim.argmax_margin) {
      if (am != argmax[i]) ++mismatched;
      EXPECT_EQ(am, argmax[i]) << label << " position " << i << " (margin " << margin[i] << ")";
    } else {
      ++excluded;
    }
    for (size_t f = 0; f < full_pos.size(); ++f) {
      if (static_cast<size_t>(full_pos[f]) != i) continue;
      for (int v = 0; v < n_vocab; ++v) {
        const float d = std::fabs(lg[static_cast<size_t>(v)] -
                                  gold.full[f * static_cast<size_t>(n_vocab) + static_cast<size_t>(v)]);
        max_full = std::max(max_full, d);
        EXPECT_LE(d, lim.bound) << label << " position " << i << " token " << v;
      }
    }
  }
  const double n = static_cast<double>(tokens.size());
  const double mean_top5 = sum_top5 / (5.0 * n);
  std::printf("[parity] %s: max|dlogit| top5 %.5f (mean %.5f), full-vocab %.5f; argmax agrees at "
              "%d/%zu positions; strict check at margin > %.3f: %d positions, %d mismatches "
              "(%d near-ties excluded)\n",
              label.c_str(), max_top5, mean_top5, max_full, agree, tokens.size(),
              lim.argmax_margin, static_cast<int>(tokens.size()) - excluded, mismatched, excluded);
  EXPECT_GE(static_cast<double>(agree) / n, lim.min_agreement) << label;
  EXPECT_LE(mean_top5, lim.max_mean_top5) << label;
}

// ---- random-weight generated models ------------------------------------------------------
// These models are chaotic: N(0,1) embeddings and random routers put many routing / FP8 /
// indexer decisions on a knife edge, so int8 rounding of activations flips some of them and
// the flips compound over 480 positions. Measured on seed 1: the REFERENCE ITSELF, run once
// in exact float32 and once with the engine's Q8_0/Q8_K activation quantization simulated
// (Ds4Model.sim_act_quant), differs by max |Δ| 1.34, mean |Δ| 0.099 and agrees on the argmax
// at 78% of positions; the engine vs the float32 reference measured max top-5 |Δ| 0.90 /
// 0.85 / 0.75, full-vocab 0.77 / 0.68 / 0.65, mean top-5 |Δ| 0.10, argmax agreement 77-78%
// (seeds 1/2/3). So these goldens can only bound the gap at the level numerics allow:
// bound 1.5 (> the self-difference 1.34), mean top-5 |Δ| <= 0.15, argmax agreement >= 70%,
// and strict argmax agreement where the reference margin exceeds 2 x 1.5. A wrong layer, a
// wrong mask or a wrong routing rule moves logits by O(1) at most positions and drops the
// agreement far below 70% (e.g. zeroing one attention layer's output moves logits by ~1.3).
constexpr Limits kGeneratedLimits{1.5f, 3.0, 0.70, 0.15};

class ReferenceParity : public ::testing::TestWithParam<int> {};

TEST_P(ReferenceParity, GeneratedModelMatchesReferenceAtEveryPosition) {
  const int seed = GetParam();
  const Golden gold = read_golden("seed" + std::to_string(seed));
  ASSERT_FALSE(gold.j.is_null());
  // Regenerate the model exactly as `ds4-gguf generate --profile tiny --quant q2 --seed S`.
  const std::string path = ::testing::TempDir() + "ds4_parity_seed" + std::to_string(seed) +
                           "_" + std::to_string(::getpid()) + ".gguf";
  ds4::tools::GenerateOptions opt;
  opt.quant = ds4::model::ExpertQuant::kQ2;
  opt.seed = static_cast<uint64_t>(seed);
  const ds4::Status gst = ds4::tools::generate_model(ds4::model::tiny_profile(), opt, path);
  ASSERT_TRUE(gst.ok()) << gst.to_string();
  expect_same_file(path, gold.j);
  if (!::testing::Test::HasFailure()) {
    check_parity("seed" + std::to_string(seed), path, gold, kGeneratedLimits);
  }
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Seeds, ReferenceParity, ::testing::Values(1, 2, 3));

// ---- the shipped trained model ---------------------------------------------------------
// The trained model (logit std 2.5, max ~19) on a 480-token prompt of real text (BOS + the
// first benchmark prompt of each channel). Measured: the reference vs itself with the
// engine's activation quantization simulated differs by max |Δ| 2.65, mean 0.087, argmax
// agreement 94.2%; the engine vs the reference: max top-5 |Δ| 1.82 (mean 0.10), full-vocab
// |Δ| at positions 31 and 479 0.25, argmax agreement 94.6% (454/480), no argmax flip where
// the reference margin exceeds 2. Limits: bound 3.0 (> the 2.65 self-difference), strict
// argmax where margin > 2 x 3.0, agreement >= 90%, mean top-5 |Δ| <= 0.15.
constexpr Limits kShippedLimits{3.0f, 6.0, 0.90, 0.15};

TEST(ReferenceParityShipped, TrainedModelMatchesReferenceAtEveryPosition) {
  const std::string path = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny.gguf";
  if (!std::ifstream(path).good()) GTEST_SKIP() << "no " << path;
  const Golden gold = read_golden("shipped");
  ASSERT_FALSE(gold.j.is_null());
  expect_same_file(path, gold.j);
  if (!::testing::Test::HasFailure()) check_parity("shipped", path, gold, kShippedLimits);
}

}  // namespace
