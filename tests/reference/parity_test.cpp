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
//   * argmax equal at every position whose reference top1 − top2 margin exceeds a threshold;
//   * argmax agreement over all positions and the mean top-5 |Δ| within limits.
// The same check runs on the shipped trained model (models/ds4-tiny.gguf, goldens/shipped.*).
// Every golden runs twice: in the production numerics, and with
// EngineOptions::f32_activations (no activation quantization; "reference numerics").
//
// Production numerics — why the gap is large. The reference runs float32 on the dequantized
// weights with exact activations; the engine quantizes activations to Q8_0 (32-blocks, int8)
// before every Q8_0 matvec and to Q8_K before every expert dot. Each int8 rounding is small
// (~0.4% of a block's max), but it is a real change of the math, and DS4 has many discrete
// decisions downstream (FP8/f16 rounding of KV rows, expert top-k, indexer top-k, FP4 rows);
// flipped decisions compound over positions. Component checks (component_parity.py: one
// layer active, activation quantization simulated in the reference) match to 0.0 except at
// exact Q8_0 round-half-even ties (tools/reference/README.md), so no component gap remains;
// the production bounds are set from the reference's own difference with vs without the
// simulated activation quantization (comments at kGeneratedLimits / kShippedLimits).
//
// f32 activations — same math, different summation order. With f32_activations every matvec
// against a quantized weight is dot_f32(dequantized row, f32 activation): the reference's
// math, up to the order of the sums (64-lane dot vs torch's blocked matmul, slot-order vs
// einsum expert sums, softmax/attention orders), i.e. last-bit (ulp) differences. At position
// 0 of the shipped model this gives |Δlogit| <= 3e-5. It does NOT give argmax equality at
// every position, and no independent float32 implementation can: the model's own discrete
// roundings turn ulp differences into decision flips. An f16 or FP8 rounding of a KV element
// whose pre-rounding value is within an ulp of a rounding midpoint, or two expert scores /
// indexer scores within an ulp, go either way, and a flipped KV element persists for every
// later query. Demonstrated on the reference alone (tools/reference/ulp_sensitivity.py): the
// reference with every float weight multiplied by (1 ± 2^-23) — a 1-ulp change, nothing else —
// vs the unperturbed golden, 4 perturbations each:
//   shipped: argmax 476-480/480, top-5 max |Δ| up to 1.06, mean 0.008-0.010;
//   seed1: 446-460/480, up to 0.59, mean 0.021-0.035; seeds 2/3: 447-469 / 444-462, up to
//   0.64 / 0.80, mean 0.013-0.026 (2026-12-02; flips only at margins <= 0.30).
// E.g. seed2 position 0: with the f16 KV rounding disabled in the reference, perturbed runs
// agree to 3e-6; with it, one f16 rounding of the position-0 KV row that sits within an ulp of
// its midpoint goes either way and moves the logits by 0.003-0.007 (the engine and every
// perturbed run land on the other side from the golden: |Δ| 0.0031 at position 0). Not a
// component gap: the same f32 runs agree with the reference to 3e-5 at position 0 of the
// shipped model and 0-5e-5 at seed 1 positions 0-3. Shipped position 77: |Δ| 0.33 there only
// (0.0008 at 76, 0.0013 at 78), i.e. a per-query decision; the only routing / indexer
// decision at 77 near a flip is layer 7's 4th-vs-5th expert score, 1.3e-4 apart (relative;
// every other gap >= 0.04), while by then earlier f16/FP8 KV flips have moved the hidden
// state by ~1e-4 relative (logit |Δ| ~1e-3 at 70-76). The engine in f32 mode
// measured (top-5 max / mean, full-vocab max, argmax agreement, largest reference margin at a
// flipped position), goldens before the reference's RoPE fix (numpy's float32 power was one
// ulp off powf in theta_scale; tools/reference/README.md):
//   shipped 0.674 / 0.0165, 0.118, 475/480, 0.19   (production: 1.82 / 0.10, 0.25, 454/480)
//   seed1   0.608 / 0.0411, 0.244, 429/480, 0.42   (production: 0.90 / 0.10, 0.77, 371/480)
//   seed2   0.676 / 0.0266, 0.233, 445/480, 0.31   (production: 0.85 / 0.10, 0.68, 373/480)
//   seed3   0.666 / 0.0319, 0.089, 439/480, 0.23   (production: 0.75 / 0.10, 0.65, 363/480)
// and with the goldens regenerated after it (2026-12-02):
//   shipped 0.575 / 0.0057, 0.003, 476/480         (production: 1.82 / 0.10, 0.25, 451/480)
//   seed1   0.485 / 0.0161, 0.035, 462/480         (production: 0.81 / 0.10, 0.66, 384/480)
//   seed2   0.642 / 0.0163, 0.056, 453/480         (production: 0.86 / 0.10, 0.69, 358/480)
//   seed3   0.581 / 0.0236, 0.142, 457/480         (production: 0.83 / 0.10, 0.64, 366/480)
// i.e. the same order as the reference's 1-ulp self-difference, where production is 2-6x
// further (mean top-5 |Δ| 0.10). Argmax equality at EVERY position is asserted by decision
// replay instead (ctest reference_decision_replay: decision_trace.cpp here +
// tools/reference/decision_replay.py): the engine's expert ids, indexer selections and
// queries and its rounded KV / compressed / indexer rows are traced, each verified to be a
// legitimate outcome for the reference (a rounding of the reference's pre-rounding value ±
// 4e-6·max|row|; a top-k set within 1e-5 of its scores) and replayed in the reference:
// 480/480 argmax on all four goldens, max |Δlogit| 6e-6..1.4e-5 (bound 1e-4); ~0.2% of KV
// elements are midpoint ties taken the other way, no expert or indexer set differs. The f32 limits (kF32GeneratedLimits, kF32ShippedLimits)
// sit above both the engine's and the 1-ulp reference's figures with a margin, and well below
// the production limits; a real bug (a wrong layer, mask, routing rule or dequantization)
// moves logits by O(1) at most positions and fails them at once. The f32 mode also keeps the
// engine invariants: prefill == decode and 1 thread == 2 threads, bit for bit (last test).
// Op-level checks of the f32 path: tests/reference/f32_activations_test.cpp.

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
                  const Limits& lim, bool f32_activations) {
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
  eo.f32_activations = f32_activations;
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

// ---- f32-activation mode (EngineOptions::f32_activations) --------------------------------
// See the file header: engine max top-5 |Δ| 0.61-0.68 and the 1-ulp self-perturbed reference
// up to 0.80 -> bound 1.0; argmax flips seen only at reference margins <= 0.42 (engine, 3
// seeds) / 0.30 (reference, 12 perturbed runs) -> strict argmax wherever the margin exceeds
// 0.6 (44-47 positions per seed; a flip needs Δtop1 + Δtop2 > margin and 92-97% of positions
// have max top-5 |Δ| < 0.25); agreement measured 89.4-92.7% (engine) and 92.5-97.7%
// (reference) -> >= 85%; mean top-5 |Δ| 0.027-0.041 (engine) -> <= 0.06.
// Production limits for comparison: 1.5, margin 3.0 (0 positions), 70%, 0.15.
constexpr Limits kF32GeneratedLimits{1.0f, 0.6, 0.85, 0.06};

// One test per seed runs both modes on the model it generated (generation is the slow part).
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
    const std::string label = "seed" + std::to_string(seed);
    check_parity(label, path, gold, kGeneratedLimits, false);
    check_parity(label + "_f32", path, gold, kF32GeneratedLimits, true);
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
// f32 activations (file header): engine top-5 max 0.674, mean 0.0165, full-vocab 0.118,
// 475/480 argmax, flips only at margins <= 0.19; the 1-ulp self-perturbed reference reaches
// 1.06 (3 of 4 runs) -> bound 1.25; strict argmax where margin
// > 0.5 (292 positions; production: margin > 6, 4 positions); agreement >= 97.5% (engine
// 98.96%, reference 99.2-100%); mean top-5 |Δ| <= 0.03.
constexpr Limits kF32ShippedLimits{1.25f, 0.5, 0.975, 0.03};

TEST(ReferenceParityShipped, TrainedModelMatchesReferenceAtEveryPosition) {
  const std::string path = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny.gguf";
  if (!std::ifstream(path).good()) GTEST_SKIP() << "no " << path;
  const Golden gold = read_golden("shipped");
  ASSERT_FALSE(gold.j.is_null());
  expect_same_file(path, gold.j);
  if (!::testing::Test::HasFailure()) check_parity("shipped", path, gold, kShippedLimits, false);
}

TEST(ReferenceParityShipped, TrainedModelF32ActivationsMatchReference) {
  const std::string path = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny.gguf";
  if (!std::ifstream(path).good()) GTEST_SKIP() << "no " << path;
  const Golden gold = read_golden("shipped");
  ASSERT_FALSE(gold.j.is_null());
  expect_same_file(path, gold.j);
  if (!::testing::Test::HasFailure()) check_parity("shipped_f32", path, gold, kF32ShippedLimits, true);
}

}  // namespace

namespace {

// f32 activations keep the engine's invariants: prefill (batched rows, expert groups shared
// across rows) == token-by-token decode, bit for bit, and the thread count changes nothing.
TEST(ReferenceParityShipped, F32ActivationsPrefillEqualsDecodeOnAnyThreadCount) {
  const std::string path = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny.gguf";
  if (!std::ifstream(path).good()) GTEST_SKIP() << "no " << path;
  const Golden gold = read_golden("shipped");
  ASSERT_FALSE(gold.j.is_null());
  auto tokens = gold.j.at("tokens").get<std::vector<int32_t>>();
  tokens.resize(72);  // past the first raw window and several ratio-4 rows
  std::vector<std::vector<float>> results;
  for (int threads : {1, 2}) {
    for (bool prefill : {false, true}) {
      ds4::EngineOptions eo;
      eo.model_path = path;
      eo.n_threads = threads;
      eo.f32_activations = true;
      auto engine = ds4::Engine::open(eo);
      ASSERT_TRUE(engine.ok()) << engine.status().to_string();
      auto session = (*engine)->new_session(128);
      ASSERT_TRUE(session.ok()) << session.status().to_string();
      if (prefill) {
        ASSERT_TRUE((*session)->prefill(tokens).ok());
      } else {
        for (int32_t t : tokens) ASSERT_TRUE((*session)->decode(t).ok());
      }
      const auto lg = (*session)->logits();
      results.emplace_back(lg.begin(), lg.end());
    }
  }
  for (size_t i = 1; i < results.size(); ++i) {
    ASSERT_EQ(results[i].size(), results[0].size());
    EXPECT_EQ(std::memcmp(results[i].data(), results[0].data(), results[0].size() * sizeof(float)), 0)
        << "run " << i << " (threads " << (i < 2 ? 1 : 2) << ", " << (i % 2 ? "prefill" : "decode") << ")";
  }
  // And the mode is really on: production logits differ.
  ds4::EngineOptions eo;
  eo.model_path = path;
  eo.n_threads = 2;
  auto engine = ds4::Engine::open(eo);
  ASSERT_TRUE(engine.ok());
  auto session = (*engine)->new_session(128);
  ASSERT_TRUE(session.ok());
  ASSERT_TRUE((*session)->prefill(tokens).ok());
  const auto lg = (*session)->logits();
  EXPECT_NE(std::memcmp(lg.data(), results[0].data(), results[0].size() * sizeof(float)), 0);
}

}  // namespace
