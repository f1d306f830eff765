// tests/speculative/fold_bench_test.cpp — side-by-side measurement of the fold arming rules (issue #5
// item 5): no fold, fold with the seed's rule (armed only after a full accept) and fold after
// partial accepts, on the shipped target models/ds4-tiny.gguf.
//
// DISABLED by default (it measures wall time; the suite asserts no timings). Run with
//   build/tests/test_speculative --gtest_also_run_disabled_tests --gtest_filter='*FoldBench*'
// Prompts: the first 2 of each data/prompts channel (BOS + text, <= 200 tokens) + 1 random.
// Env: DS4_FOLD_BENCH_TOKENS (128 per prompt), DS4_FOLD_BENCH_ROUNDS (3, interleaved; the best
// time of each configuration per prompt is summed), DS4_FOLD_BENCH_THREADS (1),
// DS4_FOLD_BENCH_DRAFTER (models/ds4-tiny-dspark.gguf; skipped when absent).
// Proposers: the library oracle (speculative/oracle_proposer.h) on the plain greedy future, each
// drafted position right with probability c (keyed on position and draft index: the same
// proposal at the same position whatever the policy), for several c; and the trained drafter
// when present (confidence 0.6).
// The only assertions are correctness ones: every run equals plain greedy.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/flags.h"
#include "core/timer.h"
#include "speculative/oracle_proposer.h"
#include "speculative/runtime.h"
#include "tokenizer/tokenizer.h"
#include "tests/speculative/spec_fixture.h"

namespace ds4::spec_test {
namespace {

// Bench knobs come from the environment through core's one lookup (core/flags.h).
int env_int(const char* name, int def) {
  const std::optional<std::string> v = ds4::process_env()(name);
  return v && !v->empty() ? std::atoi(v->c_str()) : def;
}

struct Cell {  // one (proposer, policy): sums over the prompts of the best time per prompt
  double s = 0;
  int64_t tokens = 0, cycles = 0, full = 0, partial = 0, misses = 0, folded = 0, verify_rows = 0, decodes = 0;
};

std::vector<std::pair<std::string, speculative::SpecConfig>> policies(float confidence) {
  std::vector<std::pair<std::string, speculative::SpecConfig>> c;
  speculative::SpecConfig base;
  base.confidence = confidence;
  base.fold = false;
  base.fold_after_partial = false;
  c.emplace_back("nofold", base);
  base.fold = true;
  c.emplace_back("fold-seed-rule", base);
  base.fold_after_partial = true;
  base.fold_partial_min_hits = 0;
  c.emplace_back("fold-after-partial", base);
  base.fold_partial_min_hits = 6;
  c.emplace_back("fold-after-partial-gate6", base);
  return c;
}

// Prompts: 2 per channel of data/prompts (BOS + text, cut to 200 tokens) and one random one.
std::vector<std::pair<std::string, std::vector<int32_t>>> bench_prompts(const model::Model& m) {
  std::vector<std::pair<std::string, std::vector<int32_t>>> out;
  auto tk = tok::Tokenizer::from_gguf(m.file());
  if (tk.ok()) {
    for (const char* ch : {"structured", "code", "english", "italian"}) {
      std::ifstream in(std::string(DS4_SOURCE_DIR) + "/data/prompts/" + ch + ".jsonl");
      std::string line;
      for (int i = 0; i < 2 && std::getline(in, line); ++i) {
        const auto j = nlohmann::json::parse(line, nullptr, false);
        if (j.is_discarded() || !j.contains("text")) continue;
        std::vector<int32_t> t = {tk->bos()};
        const std::vector<int32_t> body = tk->encode(j["text"].get<std::string>());
        t.insert(t.end(), body.begin(), body.begin() + std::min<size_t>(body.size(), 199));
        out.emplace_back(std::string(ch) + std::to_string(i), std::move(t));
      }
    }
  }
  out.emplace_back("random", prompt_tokens(48, m.config().n_vocab, 12345));
  return out;
}

TEST(FoldBench, DISABLED_FoldSeedRuleVsFoldAfterPartial) {
  const std::string target = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny.gguf";
  if (!file_exists(target)) GTEST_SKIP() << target << " missing";
  const int n_gen = env_int("DS4_FOLD_BENCH_TOKENS", 128);
  const int rounds = env_int("DS4_FOLD_BENCH_ROUNDS", 3);
  const int threads = env_int("DS4_FOLD_BENCH_THREADS", 1);
  const std::optional<std::string> dp = ds4::process_env()("DS4_FOLD_BENCH_DRAFTER");
  const std::string drafter_path =
      dp && !dp->empty() ? *dp : std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny-dspark.gguf";

  auto m = model::Model::open(target);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto be = backend::make_cpu_backend(threads);
  const uint32_t V = (*m)->config().n_vocab;
  std::unique_ptr<speculative::Drafter> drafter;
  if (file_exists(drafter_path)) {
    auto d = speculative::load_drafter(**m, *be, drafter_path);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    drafter = std::move(d).value();
  }
  const auto prompts = bench_prompts(**m);

  // Proposer sets: geometric oracles for several c, the trained drafter at two thresholds.
  struct Set {
    std::string name;
    double c;          // oracle acceptance; < 0 = the drafter
    float confidence;
  };
  std::vector<Set> sets;
  for (double c : {0.5, 0.7, 0.8, 0.9, 0.95}) {
    char name[32];
    std::snprintf(name, sizeof name, "oracle c=%.2f", c);
    sets.push_back({name, c, 0.0f});
  }
  if (drafter) {
    sets.push_back({"drafter conf=0.6", -1, 0.6f});
    sets.push_back({"drafter conf=0.3", -1, 0.3f});
  }
  const auto pol = policies(0.0f);
  std::vector<std::vector<Cell>> cells(sets.size(), std::vector<Cell>(pol.size()));
  double plain_total = 0;

  for (const auto& [pname, prompt] : prompts) {
    const int64_t n_ctx = static_cast<int64_t>(prompt.size()) + n_gen + 16;
    auto new_session = [&]() {
      auto s = session::ModelSession::create(**m, *be, n_ctx, uint64_t{1} << 34);
      EXPECT_TRUE(s.ok());
      return std::move(s).value();
    };
    std::vector<int32_t> plain;
    double plain_best = 1e30;
    for (int r = 0; r < rounds; ++r) {
      auto s = new_session();
      ASSERT_TRUE(s->prefill(prompt).ok());
      std::vector<int32_t> out;
      Timer t;
      for (int i = 0; i < n_gen; ++i) {
        const int32_t tok = argmax(s->logits());
        ASSERT_TRUE(s->decode(tok).ok());
        out.push_back(tok);
      }
      plain_best = std::min(plain_best, t.seconds());
      plain = out;
    }
    plain_total += plain_best;
    std::vector<int32_t> timeline = prompt;
    timeline.insert(timeline.end(), plain.begin(), plain.end());

    for (size_t si = 0; si < sets.size(); ++si) {
      std::vector<double> best(pol.size(), 1e30);
      std::vector<speculative::SpecStats> st(pol.size());
      for (int r = 0; r < rounds; ++r) {
        for (size_t pi = 0; pi < pol.size(); ++pi) {
          speculative::SpecConfig cfg = pol[pi].second;
          cfg.confidence = sets[si].confidence;
          speculative::OracleOptions oo;  // the library oracle: each drafted position right w.p. c
          oo.script = plain;
          oo.start = static_cast<int64_t>(prompt.size());
          oo.hit_rate = static_cast<float>(std::max(sets[si].c, 0.0));
          oo.seed = 1;
          oo.block_size = 5;
          oo.n_vocab = static_cast<int32_t>(V);
          speculative::OracleProposer oracle(oo);
          std::unique_ptr<speculative::DSparkProposer> dprop;
          if (sets[si].c < 0) dprop = std::make_unique<speculative::DSparkProposer>(*drafter);
          speculative::Proposer& p = dprop ? static_cast<speculative::Proposer&>(*dprop) : oracle;
          auto s = new_session();
          speculative::Runtime rt(*s, p, cfg);
          ASSERT_TRUE(s->prefill(prompt).ok());
          std::vector<int32_t> got, step;
          Timer t;
          while (static_cast<int>(got.size()) < n_gen) {
            ASSERT_TRUE(rt.step(n_gen - static_cast<int>(got.size()), -1, -1, &step).ok());
            ASSERT_FALSE(step.empty());
            got.insert(got.end(), step.begin(), step.end());
          }
          best[pi] = std::min(best[pi], t.seconds());
          ASSERT_EQ(got, plain) << pname << " " << sets[si].name << " " << pol[pi].first;
          st[pi] = rt.stats();
        }
      }
      for (size_t pi = 0; pi < pol.size(); ++pi) {
        Cell& c = cells[si][pi];
        c.s += best[pi];
        c.tokens += n_gen;
        c.cycles += st[pi].cycles;
        c.full += st[pi].full_accepts;
        c.partial += st[pi].partial_accepts;
        c.misses += st[pi].first_misses;
        c.folded += st[pi].folded_seeds;
        c.verify_rows += st[pi].verify_rows;
        c.decodes += st[pi].seeds - st[pi].folded_seeds + st[pi].single_draft_decodes;
      }
    }
  }

  std::printf("fold bench: %s, drafter %s, threads %d, %zu prompts (2 per channel + 1 random), generate %d "
              "each, best of %d interleaved rounds per prompt\n",
              target.c_str(), drafter ? drafter_path.c_str() : "(missing)", threads, prompts.size(), n_gen, rounds);
  std::printf("plain: %.1f tok/s\n", prompts.size() * n_gen / plain_total);
  std::printf("%-38s %9s %7s %8s %6s %6s %6s %7s %8s %8s\n", "proposer / policy", "tok/s", "x plain", "tok/cyc",
              "full", "part", "miss", "folded", "verify_r", "decodes");
  for (size_t si = 0; si < sets.size(); ++si) {
    for (size_t pi = 0; pi < pol.size(); ++pi) {
      const Cell& c = cells[si][pi];
      std::printf("%-38s %9.1f %7.3f %8.3f %6lld %6lld %6lld %7lld %8lld %8lld\n",
                  (sets[si].name + " " + pol[pi].first).c_str(), c.tokens / c.s, plain_total / c.s,
                  static_cast<double>(c.tokens) / c.cycles, (long long)c.full, (long long)c.partial,
                  (long long)c.misses, (long long)c.folded, (long long)c.verify_rows, (long long)c.decodes);
    }
    std::printf("%-38s vs fold-seed-rule tok/s: fold-after-partial %.3f, gate6 %.3f\n", sets[si].name.c_str(),
                cells[si][1].s / cells[si][2].s, cells[si][1].s / cells[si][3].s);
  }
  std::fflush(stdout);
}

}  // namespace
}  // namespace ds4::spec_test
