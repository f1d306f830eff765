// tests/speculative_sweep/identity_sweep_test.cpp — issue #5's identity sweep with the shipped
// models (models/ds4-tiny.gguf + models/ds4-tiny-dspark.gguf): for every prompt of
// data/prompts/{structured,code,english,italian}.jsonl (16 each), 512 greedy tokens (EOS
// banned), the DSpark output of each planned policy combination equals the plain greedy
// output token for token, and the final next-token logits are bit-identical.
//
// Coverage (policy_matrix.h plan(); the CI budget fixes the runs per prompt): every prompt runs
// the anchor (fold+grid+backoff+margin = the bench's "all") plus kRotatedRunsPerPrompt (2) of
// the other 71 combinations of fold / fold-after-partial / grid / backoff / margin, with or
// without the cost gate, and with the cost gate also with the lookup, each of which runs on
// >= 1 prompt; stats is on in every other rotated run of each channel.
// DS4_SPEC_SWEEP_ROTATED=5 (or more) runs a deeper sweep in which every combination runs on
// >= 4 prompts of all four channels. DS4_SPEC_SWEEP_ROTATED=all runs the full cross product
// (every combination on every prompt, stats on for half of each combination's prompts): 4,608
// runs, too many for CI, meant for a many-core host (`ctest -L speculative_sweep -j16`).
//
// Same code path as `ds4-bench-spec` (bench/spec_channels.cpp) and the CLI: Engine::open with
// the drafter, prompts rendered as raw text (BOS + tokenize(text), cut to 512 tokens like
// scripts/bench_spec.sh's MAX_PROMPT), a fresh Session per run, new_speculative_decoder()
// created before the prefill, generate() with temperature 0 and stop_at_eos = false.
// Plain greedy runs once per prompt; every combination planned for that prompt is compared
// with it. DS4_TEST_BACKEND=cuda runs the sweep on the CUDA backend (make test-cuda on a GPU
// machine): DSpark == plain greedy on the device.
//
// Sharding: one gtest instance (= one ctest entry, label speculative_sweep) per channel x block of
// kPromptsPerShard prompts, each on ONE engine thread, so `ctest -j2` keeps both cores busy
// without the shards fighting. Every failure names channel, prompt (index and id),
// combination, and the first differing token position; each shard also checks that
// speculation engaged (drafts accepted), since an idle drafter would make the identity
// vacuous. Each shard prints one "[sweep]" line per run (CPU seconds, acceptance).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include <cstdio>
#include <optional>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/flags.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "engine/text.h"
#include "tests/speculative_sweep/policy_matrix.h"

namespace ds4::speculative_sweep {
namespace {

constexpr int kGenTokens = 512;         // issue #5: 512 generated tokens
constexpr int kMaxPromptTokens = 512;   // scripts/bench_spec.sh MAX_PROMPT (BOS included)
constexpr int kPromptsPerChannel = 16;  // every prompt of each data/prompts channel
constexpr int kPromptsPerShard = 4;
constexpr int kMaxReportedFailures = 20;
const char* const kChannels[] = {"structured", "code", "english", "italian"};
constexpr int kNumChannels = 4;

struct Prompt {
  std::string id;                // the record's "id" (JSON), else its line index
  std::vector<int32_t> tokens;   // BOS + tokenize(text), cut to kMaxPromptTokens
};

struct Shard {
  int channel;  // index into kChannels
  int first;    // first prompt index within the channel
};

std::string shard_name(const ::testing::TestParamInfo<Shard>& info) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s_%02d_%02d", kChannels[info.param.channel], info.param.first,
                info.param.first + kPromptsPerShard - 1);
  return buf;
}

std::vector<Shard> all_shards() {
  std::vector<Shard> s;
  for (int c = 0; c < kNumChannels; ++c) {
    for (int f = 0; f < kPromptsPerChannel; f += kPromptsPerShard) s.push_back(Shard{c, f});
  }
  return s;
}

double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

// The first `n` records of a channel, rendered as bench/spec_channels.cpp does.
std::vector<Prompt> load_prompts(const TextCodec& codec, const std::string& channel, int n) {
  const std::string path = std::string(DS4_SOURCE_DIR) + "/data/prompts/" + channel + ".jsonl";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::vector<Prompt> out;
  std::string line;
  int line_no = 0;
  while (static_cast<int>(out.size()) < n && std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const nlohmann::json rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (rec.is_discarded() || !rec.is_object() || !rec.contains("text") || !rec["text"].is_string()) {
      ADD_FAILURE() << path << ":" << line_no << ": not a JSON object with a string \"text\" field";
      continue;
    }
    Prompt p;
    p.id = rec.contains("id") ? rec["id"].dump() : std::to_string(line_no - 1);
    p.tokens.push_back(codec.bos());
    std::vector<int32_t> body = codec.tokenize(rec["text"].get<std::string>());
    if (body.size() > static_cast<size_t>(kMaxPromptTokens - 1)) body.resize(kMaxPromptTokens - 1);
    p.tokens.insert(p.tokens.end(), body.begin(), body.end());
    out.push_back(std::move(p));
  }
  EXPECT_EQ(static_cast<int>(out.size()), n) << path << " should hold " << n << " prompts";
  return out;
}

struct RunResult {
  std::vector<int32_t> tokens;  // generated ids
  std::vector<float> logits;    // [n_vocab] f32 after the last token
  SpecSummary summary;          // zero for plain
  std::string report;           // the decoder's stats_report() (empty for plain)
  double prefill_s = 0, gen_s = 0;  // wall (report only)
};

// One greedy generation in a fresh session (bench/spec_channels.cpp run_one); `spec` null =
// plain decoding.
Expected<RunResult> run_one(Engine& engine, const Prompt& p, const SpecOptions* spec) {
  const int n_ctx = static_cast<int>(p.tokens.size()) + kGenTokens + 16;
  DS4_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, engine.new_session(n_ctx));
  std::unique_ptr<SpeculativeDecoder> decoder;
  if (spec != nullptr) {
    DS4_ASSIGN_OR_RETURN(decoder, new_speculative_decoder(engine, *session, *spec));  // before prefill
  }
  GenerateOptions go;
  go.max_tokens = kGenTokens;
  go.sampler.temperature = 0.0f;
  go.stop_at_eos = false;
  go.decoder = decoder.get();
  DS4_ASSIGN_OR_RETURN(GenerateStats gs, generate(*session, engine.text(), p.tokens, go, nullptr));
  RunResult r;
  r.prefill_s = gs.prefill_s;
  r.gen_s = gs.gen_s;
  r.tokens = std::move(gs.tokens);
  const std::span<const float> logits = session->logits();
  r.logits.assign(logits.begin(), logits.end());
  if (decoder) {
    r.summary = decoder->summary();
    r.report = decoder->stats_report();
  }
  decoder.reset();  // must not outlive its session
  return r;
}

// "" when `spark` equals `plain` (every generated token and the final logits' bits); else
// what differs, naming the first differing generated-token position.
std::string first_difference(const RunResult& plain, const RunResult& spark) {
  const std::vector<int32_t>& a = plain.tokens;
  const std::vector<int32_t>& b = spark.tokens;
  if (a != b) {
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    return "DSpark output differs from plain greedy at generated token " + std::to_string(k) + " (plain " +
           (k < a.size() ? std::to_string(a[k]) : "<end>") + ", DSpark " +
           (k < b.size() ? std::to_string(b[k]) : "<end>") + "; " + std::to_string(b.size()) + " vs " +
           std::to_string(a.size()) + " tokens)";
  }
  if (spark.logits.size() != plain.logits.size() ||
      std::memcmp(spark.logits.data(), plain.logits.data(), plain.logits.size() * sizeof(float)) != 0) {
    return "same " + std::to_string(a.size()) + " tokens but the final next-token logits differ from plain";
  }
  return "";
}

// The shipped models on ONE engine thread (two shards share the two cores under ctest -j2);
// *error set instead when they cannot be opened.
void open_shipped(Engine** engine, std::string** error) {
  EngineOptions eo;
  eo.model_path = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny.gguf";
  eo.mtp_path = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny-dspark.gguf";
  const std::optional<std::string> backend = process_env()("DS4_TEST_BACKEND");  // core's one getenv
  eo.backend = backend == "cuda" ? BackendKind::kCuda : BackendKind::kCpu;
  eo.n_threads = 1;
  Expected<std::unique_ptr<Engine>> e = Engine::open(eo);
  if (e.ok()) {
    *engine = std::move(e).value().release();
  } else {
    *error = new std::string(e.status().to_string());
  }
}
void close_shipped(Engine** engine, std::string** error) {
  delete *engine;
  *engine = nullptr;
  delete *error;
  *error = nullptr;
}

class IdentitySweep : public ::testing::TestWithParam<Shard> {
 protected:
  static void SetUpTestSuite() { open_shipped(&engine_, &open_error_); }
  static void TearDownTestSuite() { close_shipped(&engine_, &open_error_); }
  static Engine* engine_;
  static std::string* open_error_;
};
Engine* IdentitySweep::engine_ = nullptr;
std::string* IdentitySweep::open_error_ = nullptr;

// The same engine for plain tests (not parameterized).
class LookupIdentity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { open_shipped(&engine_, &open_error_); }
  static void TearDownTestSuite() { close_shipped(&engine_, &open_error_); }
  static Engine* engine_;
  static std::string* open_error_;
};
Engine* LookupIdentity::engine_ = nullptr;
std::string* LookupIdentity::open_error_ = nullptr;

// The checker itself: a changed token is reported at its position, a short output at its end,
// and a single flipped logit bit (here 0.0 -> -0.0) with equal tokens is still a difference.
TEST(IdentitySweepChecker, NamesTheFirstDifference) {
  RunResult plain;
  plain.tokens = {5, 6, 7, 8, 9};
  plain.logits = {0.0f, 1.5f, -2.0f};
  RunResult same = plain;
  EXPECT_EQ(first_difference(plain, same), "");
  RunResult changed = plain;
  changed.tokens[3] = 42;
  EXPECT_NE(first_difference(plain, changed).find("at generated token 3 (plain 8, DSpark 42; 5 vs 5 tokens)"),
            std::string::npos)
      << first_difference(plain, changed);
  RunResult shorter = plain;
  shorter.tokens.pop_back();
  EXPECT_NE(first_difference(plain, shorter).find("at generated token 4 (plain 9, DSpark <end>; 4 vs 5 tokens)"),
            std::string::npos)
      << first_difference(plain, shorter);
  RunResult logits = plain;
  logits.logits[0] = -0.0f;
  EXPECT_NE(first_difference(plain, logits).find("final next-token logits differ"), std::string::npos);
}

// Coverage of plan() with `rotated` rotated runs per prompt (or kFullCross); min_prompts: the
// floor every rotated combination must reach; all_channels: whether each must run on every
// channel.
void check_plan(int rotated, int min_prompts, bool all_channels) {
  SCOPED_TRACE("rotated runs per prompt = " + std::to_string(rotated));
  const std::vector<Combo> combos = combinations();
  const int n_prompts = kNumChannels * kPromptsPerChannel;
  const std::vector<std::vector<PlannedRun>> runs = plan(combos, kNumChannels, kPromptsPerChannel, rotated);
  ASSERT_EQ(static_cast<int>(runs.size()), n_prompts);
  std::map<std::string, int> names;
  for (const Combo& c : combos) {
    EXPECT_EQ(++names[c.name], 1) << "duplicate combination name " << c.name;
    // A knob that needs another never appears without it (fold-after-partial without fold).
    if (c.options.fold_after_partial) {
      EXPECT_TRUE(c.options.fold) << c.name;
    }
    if (c.options.lookup) {
      EXPECT_TRUE(c.options.cost_gate) << c.name;
    }
    EXPECT_FALSE(c.options.stats) << c.name << ": neutral knobs are not crossed";
    EXPECT_TRUE(c.options.scheduler && !c.options.replay) << c.name << ": plumbing controls are PolicyTest's";
  }
  // 24 policy sets (fold, grid, backoff, margin; fold-after-partial only with fold) x (cost gate
  // off, on, on + lookup).
  EXPECT_EQ(combos.size(), 72u);
  EXPECT_EQ(names.count("baseline"), 1u);
  EXPECT_EQ(names.count("fold+grid+backoff+margin"), 1u);  // the bench's "all"
  EXPECT_EQ(names.count("fold+grid+backoff+margin+foldpartial+cost"), 1u);
  EXPECT_EQ(names.count("foldpartial"), 0u);
  EXPECT_EQ(names.count("fold+grid+backoff+margin+foldpartial+cost+lookup"), 1u);  // costlookup
  EXPECT_EQ(names.count("lookup"), 0u);  // the lookup only with the cost gate

  int n_anchors = 0;
  for (const Combo& c : combos) n_anchors += c.anchor ? 1 : 0;
  EXPECT_EQ(n_anchors, 1);  // the bench's "all"
  std::vector<int> prompts_of(combos.size(), 0);
  std::vector<std::vector<bool>> channel_of(combos.size(), std::vector<bool>(kNumChannels, false));
  std::vector<int> neutral_runs(kNumChannels, 0);
  for (int g = 0; g < n_prompts; ++g) {
    const int expected = rotated == kFullCross ? static_cast<int>(combos.size()) : n_anchors + rotated;
    EXPECT_EQ(static_cast<int>(runs[g].size()), expected) << "prompt " << g;
    for (const PlannedRun& r : runs[g]) {
      ++prompts_of[r.combo];
      channel_of[r.combo][g / kPromptsPerChannel] = true;
      if (r.neutral_on) ++neutral_runs[g / kPromptsPerChannel];
    }
  }
  for (size_t ci = 0; ci < combos.size(); ++ci) {
    if (combos[ci].anchor) {
      EXPECT_EQ(prompts_of[ci], n_prompts) << combos[ci].name;
      continue;
    }
    EXPECT_GE(prompts_of[ci], min_prompts)
        << combos[ci].name << ": too few prompts; raise kRotatedRunsPerPrompt (policy_matrix.h)";
    if (!all_channels) continue;
    for (int ch = 0; ch < kNumChannels; ++ch) {
      EXPECT_TRUE(channel_of[ci][ch]) << combos[ci].name << " never runs on channel " << kChannels[ch];
    }
  }
  for (int ch = 0; ch < kNumChannels; ++ch) EXPECT_GT(neutral_runs[ch], 0) << kChannels[ch];
}

TEST(IdentitySweepPlan, CoversEveryCombinationAndPrompt) {
  check_plan(kRotatedRunsPerPrompt, 1, false);                       // what CI runs
  check_plan(kDeepRotatedRunsPerPrompt, kDeepMinPrompts, true);      // DS4_SPEC_SWEEP_ROTATED=5
  check_plan(kFullCross, kNumChannels * kPromptsPerChannel, true);   // DS4_SPEC_SWEEP_ROTATED=all
  check_plan(rotated_runs_per_prompt(), 1, false);                   // what this process runs
}

TEST_P(IdentitySweep, DSparkEqualsPlainGreedy) {
  ASSERT_EQ(open_error_, nullptr) << "cannot open the shipped models: " << *open_error_;
  Engine& engine = *engine_;
  const Shard shard = GetParam();
  const std::string channel = kChannels[shard.channel];
  const std::vector<Combo> combos = combinations();
  const std::vector<std::vector<PlannedRun>> runs =
      plan(combos, kNumChannels, kPromptsPerChannel, rotated_runs_per_prompt());
  const std::vector<Prompt> prompts = load_prompts(engine.text(), channel, kPromptsPerChannel);
  ASSERT_EQ(static_cast<int>(prompts.size()), kPromptsPerChannel);

  const double cpu0 = cpu_seconds();
  int n_runs = 0, failures = 0;
  int64_t proposed = 0, accepted = 0;
  for (int i = shard.first; i < shard.first + kPromptsPerShard; ++i) {
    const Prompt& p = prompts[i];
    const std::string where = channel + " prompt #" + std::to_string(i) + " (id " + p.id + ", " +
                              std::to_string(p.tokens.size()) + " prompt tokens)";
    double t = cpu_seconds();
    Expected<RunResult> plain = run_one(engine, p, nullptr);
    ASSERT_TRUE(plain.ok()) << where << " plain: " << plain.status().to_string();
    ASSERT_EQ(static_cast<int>(plain->tokens.size()), kGenTokens) << where << " plain run is short";
    std::printf("[sweep] %s plain: %.2f CPU s (wall: prefill %.3f s, generation %.3f s)\n", where.c_str(),
                cpu_seconds() - t, plain->prefill_s, plain->gen_s);
    for (const PlannedRun& pr : runs[shard.channel * kPromptsPerChannel + i]) {
      const std::string name = run_name(combos[pr.combo], pr.neutral_on);
      const SpecOptions options = options_for(combos[pr.combo], pr.neutral_on);
      t = cpu_seconds();
      Expected<RunResult> spark = run_one(engine, p, &options);
      ASSERT_TRUE(spark.ok()) << where << ", combination " << name << ": " << spark.status().to_string();
      ++n_runs;
      proposed += spark->summary.proposed;
      accepted += spark->summary.accepted;
      std::printf("[sweep]   %-48s %.2f CPU s, accepted %lld/%lld drafts in %lld cycles\n", name.c_str(),
                  cpu_seconds() - t, static_cast<long long>(spark->summary.accepted),
                  static_cast<long long>(spark->summary.proposed), static_cast<long long>(spark->summary.cycles));
      const std::string diff = first_difference(*plain, *spark);
      if (!diff.empty() && ++failures <= kMaxReportedFailures) {
        ADD_FAILURE() << where << ", combination " << name << ": " << diff;
      }
    }
  }
  EXPECT_EQ(failures, 0) << failures << " of " << n_runs << " DSpark runs differ from plain greedy"
                         << (failures > kMaxReportedFailures ? " (the first ones are listed above)" : "");
  // An idle drafter would make the identity vacuous: drafts must be proposed and accepted.
  EXPECT_GT(proposed, 0) << channel << ": no drafts proposed in this shard";
  EXPECT_GT(accepted, 0) << channel << ": no drafts accepted in this shard";
  std::printf("[sweep] %s prompts %d-%d: %d plain + %d DSpark runs x %d tokens, accepted %lld/%lld drafts, "
              "%.1f CPU s\n",
              channel.c_str(), shard.first, shard.first + kPromptsPerShard - 1, kPromptsPerShard, n_runs,
              kGenTokens, static_cast<long long>(accepted), static_cast<long long>(proposed), cpu_seconds() - cpu0);
}

INSTANTIATE_TEST_SUITE_P(Shipped, IdentitySweep, ::testing::ValuesIn(all_shards()), shard_name);

// A counter of a stats report ("dspark: ... key=value ..."); -1 when absent.
int64_t report_counter(const std::string& report, const std::string& key) {
  const size_t at = report.find(" " + key + "=");
  return at == std::string::npos ? -1 : std::atoll(report.c_str() + at + key.size() + 2);
}

// The lookup without the cost gate, where it verifies every candidate it finds (the sweep runs
// it under the gate only): alone, with fold after partial accepts, and with replay commits,
// on the first prompt of the code and structured channels, where the shipped target repeats
// itself enough for the lookup to be accepted, partially accepted and missed.
TEST_F(LookupIdentity, UngatedLookupEqualsPlainGreedy) {
  ASSERT_EQ(open_error_, nullptr) << "cannot open the shipped models: " << *open_error_;
  struct Variant {
    const char* name;
    bool fold, fold_partial, replay;
  };
  const Variant variants[] = {{"lookup", false, false, false},
                              {"lookup+fold+foldpartial", true, true, false},
                              {"lookup+fold+replay", true, false, true}};
  for (const char* channel : {"code", "structured"}) {
    const std::vector<Prompt> prompts = load_prompts(engine_->text(), channel, 1);
    ASSERT_EQ(prompts.size(), 1u);
    Expected<RunResult> plain = run_one(*engine_, prompts[0], nullptr);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    for (const Variant& v : variants) {
      SCOPED_TRACE(std::string(channel) + " " + v.name);
      SpecOptions o;
      o.confidence = kConfidence;
      o.lookup = true;
      o.fold = v.fold;
      o.fold_after_partial = v.fold_partial;
      o.replay = v.replay;
      Expected<RunResult> spark = run_one(*engine_, prompts[0], &o);
      ASSERT_TRUE(spark.ok()) << spark.status().to_string();
      EXPECT_EQ(first_difference(*plain, *spark), "");
      const std::string& r = spark->report;
      EXPECT_GT(report_counter(r, "lookup_accepted"), 0) << r;
      EXPECT_GT(report_counter(r, "lookup_first_misses"), 0) << r;
      EXPECT_GT(report_counter(r, "partial"), 0) << r;
      if (v.replay) {
        EXPECT_GT(report_counter(r, "replay"), 0) << r;
      } else {
        EXPECT_GT(report_counter(r, "direct_partial"), 0) << r;
      }
      if (v.fold) {
        EXPECT_GT(report_counter(r, "folded_seeds"), 0) << r;
      }
    }
  }
}


}  // namespace
}  // namespace ds4::speculative_sweep
