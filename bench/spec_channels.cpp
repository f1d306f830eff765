// bench/spec_channels.cpp — `ds4-bench-spec`: plain vs DSpark greedy decoding per prompt
// channel and per DSpark policy (issue #5; dspark.md §2.2–2.6, §4).
//
// Loads the target + drafter ONCE. For each channel (a JSONL prompt set, one object per line
// with a "text" field; the channel name is the file stem) it takes the first --prompts
// prompts (BOS + text, cut to --max-prompt-tokens) and, per policy and prompt, runs a plain
// greedy generation then a speculative one, each in a NEW session (the decoder is made before
// the prefill). EOS is banned, so every run yields exactly --gen-tokens tokens; timings are
// GenerateStats::gen_s (prefill untimed). --repeat N alternates the pair N times and keeps
// each side's fastest run (interference on a shared host only adds time).
// Policies are engine/speculative.h's presets (--help lists them and the default set); the
// "model" column is the clock-free ratio at the cost gate's costs, and --in-cycle shows where
// the wall clock departs from it. --oracle LIST adds rows oracle<h>: the same cycle with the
// oracle proposer (a measurement tool, speculative/oracle_proposer.h; docs/CUDA.md says what
// its figures mean); it needs no drafter.
//
// Invariants checked (exit 1 on any failure, after printing the table):
//   * every speculative output equals the plain output token for token;
//   * every plain run of a prompt gives the same tokens (plain determinism);
//   * the final next-token logits of the speculative session equal the plain session's bit
//     for bit (speculative.h: the final session state is identical).
// Output: a table per channel x policy on stdout, one "ALL" row per policy (sums over the
// channels), optionally --csv FILE (same rows) and --outputs-dir DIR (<channel>.jsonl with
// prompt/output texts, for tools/ngram_similarity/ngram_similarity.py).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/flags.h"
#include "core/log.h"
#include "engine/backend_flags.h"
#include "engine/dspark_flags.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "engine/text.h"

#ifndef DS4_MODELS_DIR
#define DS4_MODELS_DIR "models"
#endif
#ifndef DS4_PROMPTS_DIR
#define DS4_PROMPTS_DIR "data/prompts"
#endif

namespace ds4::bench {
namespace {

constexpr const char* kDefaultModel = "ds4-tiny.gguf";
constexpr const char* kDefaultDrafter = "ds4-tiny-dspark.gguf";
constexpr const char* kDefaultChannels = "structured,code,english,italian";
// Default policy list: the seed's knobs one at a time, all of them, costall, and the engine's
// default (costlookup); every name of ds4::kDsparkPolicies is accepted.
constexpr const char* kBenchPolicies = "baseline,fold,grid,backoff,margin,all,costall,costlookup";

struct Options {
  std::string model;
  std::string mtp;
  std::string prompts_dir = DS4_PROMPTS_DIR;
  std::string channels = kDefaultChannels;
  std::string policies = kBenchPolicies;
  int prompts = 4;
  int gen_tokens = 128;
  int max_prompt_tokens = 512;
  std::string grid = kDefaultDsparkGrid;     // the grid of the grid / all presets
  float margin = kDefaultDsparkMarginGate;   // the margin of the margin / all presets
  // The shared DSpark flags (engine/dspark_flags.h): confidence, costs, overlap, calibration,
  // and switches applied on top of every policy of --policies.
  DsparkFlags dspark;
  int warmup = 1;
  int repeat = 1;  // timed plain/DSpark pairs per prompt; each side keeps its fastest run
  std::string oracle;                  // --oracle hit rates ("" = none)
  std::string oracle_policy = "fold";  // the policy preset of the oracle rows
  uint64_t oracle_seed = 1;            // of the oracle's hit draws
  int oracle_block = 0;                // drafts per oracle proposal; 0 = the drafter's, else 5
  std::string csv;
  std::string outputs_dir;
  BackendFlags backend;  // --backend, --device, --cpu/--cuda, -t, --isa, --f32-activations
  bool stats = false;
  bool in_cycle = false;   // --in-cycle: measured/modelled time per part under each row
  bool verbose = false;
  bool corrupt_check = false;  // checker self-test: flip the last DSpark token of every run
};

struct Policy {
  std::string name;
  SpecOptions spec;
  float oracle = -1.0f;  // >= 0: the oracle proposer at this hit rate; < 0: the drafter
};

struct Prompt {
  std::string id;
  std::string text;
  std::vector<int32_t> tokens;  // BOS + tokenize(text), cut to max_prompt_tokens
};

struct Channel {
  std::string name;
  std::vector<Prompt> prompts;
};

// Sums over the prompts of one channel x policy cell.
struct Cell {
  double plain_s = 0, spec_s = 0;
  double plain_first_s = 0;             // first plain run of each prompt (pairs the time split)
  int64_t plain_tokens = 0, spec_tokens = 0;
  std::map<std::string, double> stats;  // summed numeric fields of stats_report()
  int token_mismatches = 0, logits_mismatches = 0, plain_nondeterministic = 0;
};

int fail(const std::string& message) {
  std::fprintf(stderr, "ds4-bench-spec: error: %s\n", message.c_str());
  return 1;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// Every "key=number" token of stats_report() (a trailing '%' is dropped; the time line's
// keys get a "time_" prefix: "time_decode" is milliseconds). Histogram lists are skipped.
void accumulate_stats(const std::string& report, std::map<std::string, double>* sum) {
  std::stringstream lines(report);
  std::string line;
  while (std::getline(lines, line)) {
    const bool time_line = line.find("time_ms") != std::string::npos;
    std::stringstream words(line);
    std::string w;
    while (words >> w) {
      const size_t eq = w.find('=');
      if (eq == std::string::npos || eq == 0) continue;
      std::string value = w.substr(eq + 1);
      if (!value.empty() && value.back() == '%') value.pop_back();
      if (value.find(',') != std::string::npos) continue;
      char* end = nullptr;
      const double v = std::strtod(value.c_str(), &end);
      if (end == value.c_str() || *end != '\0') continue;
      (*sum)[(time_line ? "time_" : "") + w.substr(0, eq)] += v;
    }
  }
}

void merge(const Cell& from, Cell* into) {
  into->plain_s += from.plain_s;
  into->plain_first_s += from.plain_first_s;
  into->spec_s += from.spec_s;
  into->plain_tokens += from.plain_tokens;
  into->spec_tokens += from.spec_tokens;
  for (const auto& [k, v] : from.stats) into->stats[k] += v;
  into->token_mismatches += from.token_mismatches;
  into->logits_mismatches += from.logits_mismatches;
  into->plain_nondeterministic += from.plain_nondeterministic;
}

double stat(const Cell& c, const std::string& key) {
  auto it = c.stats.find(key);
  return it == c.stats.end() ? 0.0 : it->second;
}

// "0.9,0.7" -> hit rates in [0, 1]; an item that is not entirely a number in range gives
// kInvalidArgument naming it.
Status parse_hit_rates(const std::string& text, std::vector<float>* out) {
  out->clear();
  for (const std::string& item : split_list(text)) {
    char* end = nullptr;
    const float h = std::strtof(item.c_str(), &end);
    if (end == item.c_str() || *end != '\0' || !(h >= 0.0f && h <= 1.0f)) {
      return invalid_argument("--oracle: '%s' is not a hit rate in [0, 1]", item.c_str());
    }
    out->push_back(h);
  }
  if (out->empty() && !text.empty()) return invalid_argument("--oracle: no hit rate in '%s'", text.c_str());
  return Status();
}

bool no_policies(const Options& o) { return o.policies == "none"; }

Status validate(const Options& o) {
  if (o.prompts < 1) return invalid_argument("--prompts must be >= 1, got %d", o.prompts);
  if (o.gen_tokens < 1) return invalid_argument("--gen-tokens must be >= 1, got %d", o.gen_tokens);
  if (o.max_prompt_tokens < 2) {
    return invalid_argument("--max-prompt-tokens must be >= 2, got %d", o.max_prompt_tokens);
  }
  if (o.warmup < 0) return invalid_argument("--warmup must be >= 0, got %d", o.warmup);
  if (o.repeat < 1) return invalid_argument("--repeat must be >= 1, got %d", o.repeat);
  if (!(o.margin >= 0.0f)) return invalid_argument("--margin-gate must be >= 0, got %g", o.margin);
  DS4_RETURN_IF_ERROR(validate_dspark_flags(o.dspark));
  if (split_list(o.channels).empty()) return invalid_argument("--channels is empty");
  if (split_list(o.policies).empty()) return invalid_argument("--policies is empty");
  std::vector<float> rates;
  DS4_RETURN_IF_ERROR(parse_hit_rates(o.oracle, &rates));
  if (no_policies(o) && rates.empty()) return invalid_argument("--policies none needs --oracle");
  if (o.oracle_block < 0 || o.oracle_block > 16) {
    return invalid_argument("--oracle-block must be in 0..16, got %d", o.oracle_block);
  }
  return Status();
}

// The named policy configurations (ds4::apply_dspark_policy, the table the CLI's
// --dspark-policy uses): each "+X" changes one knob from the baseline (scheduler on, fold
// off, flat confidence); "all" turns every knob on, "costall" adds the cost gate, "costlookup"
// the lookup.
// Then the oracle rows (--oracle), at the --oracle-policy preset; `drafter`: whether the
// drafter policies can run.
Expected<std::vector<Policy>> make_policies(const Options& o, bool drafter) {
  std::vector<float> grid;
  DS4_RETURN_IF_ERROR(parse_dspark_confidence_grid(o.grid, &grid));
  std::vector<Policy> out;
  if (drafter && !no_policies(o)) {
    for (const std::string& name : split_list(o.policies)) {
      DS4_ASSIGN_OR_RETURN(SpecOptions spec, dspark_options(o.dspark, name, grid, o.margin));
      out.push_back(Policy{name, std::move(spec)});
    }
  }
  std::vector<float> rates;
  DS4_RETURN_IF_ERROR(parse_hit_rates(o.oracle, &rates));
  for (size_t i = 0; i < rates.size(); ++i) {
    DS4_ASSIGN_OR_RETURN(SpecOptions spec, dspark_options(o.dspark, o.oracle_policy, grid, o.margin));
    // Never beside the seed's decode: the oracle's proposal takes no time, so a pair would only
    // split the decode's threads (overlap's auto setting turns it on at 2 CPU threads).
    spec.overlap = 0;
    char name[32];
    std::snprintf(name, sizeof name, "oracle%g", static_cast<double>(rates[i]));
    out.push_back(Policy{name, std::move(spec), rates[i]});
  }
  return out;
}

Expected<Channel> load_channel(const Options& o, const TextCodec& codec, const std::string& name) {
  const std::string path = (std::filesystem::path(o.prompts_dir) / (name + ".jsonl")).string();
  std::ifstream in(path);
  if (!in) return not_found("cannot read prompt set '%s'", path.c_str());
  Channel ch{name, {}};
  std::string line;
  int line_no = 0;
  while (static_cast<int>(ch.prompts.size()) < o.prompts && std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json rec = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (rec.is_discarded() || !rec.is_object() || !rec.contains("text") || !rec["text"].is_string()) {
      return corrupt("%s:%d: not a JSON object with a string \"text\" field", path.c_str(), line_no);
    }
    Prompt p;
    p.id = rec.contains("id") ? rec["id"].dump() : std::to_string(line_no - 1);
    p.text = rec["text"].get<std::string>();
    p.tokens.push_back(codec.bos());
    std::vector<int32_t> body = codec.tokenize(p.text);
    const size_t room = static_cast<size_t>(o.max_prompt_tokens) - 1;
    if (body.size() > room) body.resize(room);
    p.tokens.insert(p.tokens.end(), body.begin(), body.end());
    ch.prompts.push_back(std::move(p));
  }
  if (ch.prompts.empty()) return invalid_argument("prompt set '%s' has no prompts", path.c_str());
  if (static_cast<int>(ch.prompts.size()) < o.prompts) {
    DS4_LOG_WARN("channel %s: only %zu prompts (asked for %d)", name.c_str(), ch.prompts.size(), o.prompts);
  }
  return ch;
}

struct RunResult {
  GenerateStats gen;
  std::vector<float> final_logits;  // [n_vocab] f32 after the last token
  std::string report;               // stats_report() ("" for plain)
};

// One greedy generation in a fresh session; `spec` null = plain decoding; `oracle` non-null:
// the oracle proposer of that script instead of the drafter.
Expected<RunResult> run_one(Engine& engine, const Prompt& p, int gen_tokens, const SpecOptions* spec,
                            const OracleScript* oracle = nullptr) {
  const int n_ctx = static_cast<int>(p.tokens.size()) + gen_tokens + 16;
  DS4_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, engine.new_session(n_ctx));
  std::unique_ptr<SpeculativeDecoder> decoder;
  if (spec != nullptr && oracle != nullptr) {
    DS4_ASSIGN_OR_RETURN(decoder, new_oracle_speculative_decoder(engine, *session, *spec, *oracle));
  } else if (spec != nullptr) {
    DS4_ASSIGN_OR_RETURN(decoder, new_speculative_decoder(engine, *session, *spec));  // before prefill
  }
  GenerateOptions go;
  go.max_tokens = gen_tokens;
  go.sampler.temperature = 0.0f;
  go.stop_at_eos = false;  // EOS banned: exactly gen_tokens tokens
  go.decoder = decoder.get();
  RunResult r;
  DS4_ASSIGN_OR_RETURN(r.gen, generate(*session, engine.text(), p.tokens, go, nullptr));
  std::span<const float> logits = session->logits();
  r.final_logits.assign(logits.begin(), logits.end());
  if (decoder) r.report = decoder->stats_report();
  decoder.reset();  // the decoder must not outlive its session
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void print_header(FILE* f) {
  std::fprintf(f, "%-11s %-9s %5s %9s %9s %6s %6s %7s %8s %8s %8s %6s %6s %6s %6s %6s %s\n", "channel",
               "policy", "tok", "plain_t/s", "spark_t/s", "ratio", "model", "accept%", "acc/cyc",
               "tok/cyc", "vrow/cyc", "dec%", "prop%", "ver%", "com%", "oth%", "identity");
}

const char* csv_header() {
  return "channel,policy,prompts,gen_tokens,plain_tps,dspark_tps,ratio,cycles,proposed,accepted,"
         "accept_rate,accepted_per_cycle,tokens_per_cycle,full_accepts,partial_accepts,"
         "first_misses,no_draft,scheduler_skips,margin_skips,folded_seeds,verify_calls,"
         "verify_rows,t_total_ms,t_decode_ms,t_propose_ms,t_sync_ms,t_verify_ms,t_commit_ms,"
         "t_replay_ms,token_mismatches,logits_mismatches,model_ratio,cost_skips,cost_probes,cost_trims,"
         "cost_unfolds,incycle_decode,incycle_verify,incycle_propose,incycle_other_pct,verify_rows_per_cycle\n";
}

// The cost-gate model's charge for the run's counters, in decode(1) units: every ordinary decode 1,
// every verify base + row * rows, every proposal draft (or draft_reject when stopped by conf0);
// a proposal run beside the seed's decode (overlap), kept or dropped by a gate, is charged what
// it adds to that decode: draft_overlap (or draft_reject_overlap).
struct ModelledCost {
  double decode = 0, verify = 0, propose = 0;
  double total() const { return decode + verify + propose; }
};

ModelledCost modelled_cost(const Cell& c, const SpecOptions& k) {
  const double rejects = stat(c, "conf0_rejects");
  ModelledCost m;
  m.decode = stat(c, "seeds") - stat(c, "folded_seeds") + stat(c, "single_draft_decodes");
  m.verify = k.cost_verify_base * stat(c, "verify_calls") + k.cost_verify_row * stat(c, "verify_rows");
  const double pairs = stat(c, "overlapped"), pair_rejects = stat(c, "overlap_conf0");
  const double kept = pairs - stat(c, "overlap_discards");
  const double kept_rejects = pair_rejects - stat(c, "overlap_discard_conf0");
  const double seq = stat(c, "proposals") - kept, seq_rejects = rejects - kept_rejects;
  m.propose = k.cost_draft * (seq - seq_rejects) + k.cost_draft_reject * seq_rejects +
              k.cost_draft_overlap * (pairs - pair_rejects) + k.cost_draft_reject_overlap * pair_rejects;
  return m;
}

// Modelled speed ratio from the run's counters alone (reproducible, no clock): tokens / cost.
double modelled_ratio(const Cell& c, const SpecOptions& k) {
  const double cost = modelled_cost(c, k).total();
  return cost > 0 ? static_cast<double>(c.spec_tokens) / cost : 0.0;
}

// Measured over modelled time of the DSpark run's decodes, verifies and proposals (1 = as the
// cost constants say), in units of the paired plain run's time per token, and the share of the
// DSpark run's time outside them. 0 where a part did not occur.
struct InCycle {
  double decode = 0, verify = 0, propose = 0, other_pct = 0;
};

InCycle in_cycle(const Cell& c, const SpecOptions& k) {
  InCycle r;
  const double unit_ms = c.plain_tokens > 0 ? 1e3 * c.plain_first_s / c.plain_tokens : 0.0;
  if (unit_ms <= 0) return r;
  const ModelledCost m = modelled_cost(c, k);
  auto ratio = [&](const char* t, double cost) { return cost > 0 ? stat(c, t) / (cost * unit_ms) : 0.0; };
  r.decode = ratio("time_decode", m.decode);
  r.verify = ratio("time_verify", m.verify);
  r.propose = ratio("time_propose", m.propose);
  const double total = stat(c, "time_total");
  const double parts = stat(c, "time_decode") + stat(c, "time_verify") + stat(c, "time_propose");
  r.other_pct = total > 0 ? 100.0 * (total - parts) / total : 0.0;
  return r;
}

void print_row(FILE* f, FILE* csv, const std::string& channel, const std::string& policy, int n_prompts,
               const Cell& c, const SpecOptions& k, bool show_in_cycle) {
  const double model = modelled_ratio(c, k);
  const InCycle ic = in_cycle(c, k);
  const double plain_tps = c.plain_s > 0 ? c.plain_tokens / c.plain_s : 0.0;
  const double spec_tps = c.spec_s > 0 ? c.spec_tokens / c.spec_s : 0.0;
  const double ratio = plain_tps > 0 ? spec_tps / plain_tps : 0.0;
  const double cycles = stat(c, "cycles"), proposed = stat(c, "proposed"), accepted = stat(c, "accepted");
  const double accept = proposed > 0 ? 100.0 * accepted / proposed : 0.0;
  const double acc_cyc = cycles > 0 ? accepted / cycles : 0.0;
  const double tok_cyc = cycles > 0 ? c.spec_tokens / cycles : 0.0;
  const double vrow_cyc = cycles > 0 ? stat(c, "verify_rows") / cycles : 0.0;
  const double total = stat(c, "time_total");
  auto pct = [&](const char* k) { return total > 0 ? 100.0 * stat(c, k) / total : 0.0; };
  const double other = total > 0 ? 100.0 - pct("time_decode") - pct("time_propose") -
                                       pct("time_verify") - pct("time_commit")
                                 : 0.0;
  const bool ok = c.token_mismatches == 0 && c.logits_mismatches == 0 && c.plain_nondeterministic == 0;
  char ident[96];
  if (ok) {
    std::snprintf(ident, sizeof ident, "ok %d/%d", n_prompts, n_prompts);
  } else {
    std::snprintf(ident, sizeof ident, "FAIL tok=%d logits=%d plain=%d", c.token_mismatches,
                  c.logits_mismatches, c.plain_nondeterministic);
  }
  std::fprintf(f, "%-11s %-9s %5lld %9.2f %9.2f %6.3f %6.3f %7.1f %8.3f %8.3f %8.3f %6.1f %6.1f %6.1f %6.1f %6.1f %s\n",
               channel.c_str(), policy.c_str(), static_cast<long long>(c.spec_tokens), plain_tps,
               spec_tps, ratio, model, accept, acc_cyc, tok_cyc, vrow_cyc, pct("time_decode"), pct("time_propose"),
               pct("time_verify"), pct("time_commit"), other, ident);
  if (show_in_cycle) {
    std::fprintf(f, "#   in-cycle / model: decode %.3f  verify %.3f  propose %.3f  outside them %.1f%%\n",
                 ic.decode, ic.verify, ic.propose, ic.other_pct);
  }
  std::fflush(f);
  if (csv != nullptr) {
    std::fprintf(csv,
                 "%s,%s,%d,%lld,%.3f,%.3f,%.4f,%.0f,%.0f,%.0f,%.4f,%.4f,%.4f,%.0f,%.0f,%.0f,%.0f,%.0f,"
                 "%.0f,%.0f,%.0f,%.0f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%.2f,%d,%d,%.4f,%.0f,%.0f,%.0f,%.0f,%.4f,%.4f,"
                 "%.4f,%.2f,%.4f\n",
                 channel.c_str(), policy.c_str(), n_prompts, static_cast<long long>(c.spec_tokens),
                 plain_tps, spec_tps, ratio, cycles, proposed, accepted, accept / 100.0, acc_cyc,
                 tok_cyc, stat(c, "full"), stat(c, "partial"), stat(c, "miss_first"),
                 stat(c, "no_draft"), stat(c, "scheduler_skips"), stat(c, "margin_skips"),
                 stat(c, "folded_seeds"), stat(c, "verify_calls"), stat(c, "verify_rows"), total,
                 stat(c, "time_decode"), stat(c, "time_propose"), stat(c, "time_sync"),
                 stat(c, "time_verify"), stat(c, "time_commit"), stat(c, "time_replay"),
                 c.token_mismatches, c.logits_mismatches, model, stat(c, "cost_skips"),
                 stat(c, "cost_probes"), stat(c, "cost_trims"), stat(c, "cost_unfolds"), ic.decode, ic.verify,
                 ic.propose, ic.other_pct, vrow_cyc);
    std::fflush(csv);
  }
}

Status write_outputs(const std::string& dir, const Channel& ch,
                     const std::vector<std::vector<int32_t>>& outputs, const TextCodec& codec) {
  const std::string path = (std::filesystem::path(dir) / (ch.name + ".jsonl")).string();
  std::ofstream out(path, std::ios::binary);
  if (!out) return resource_error("cannot write '%s'", path.c_str());
  for (size_t i = 0; i < ch.prompts.size(); ++i) {
    nlohmann::json rec;
    rec["channel"] = ch.name;
    rec["id"] = ch.prompts[i].id;
    rec["prompt"] = ch.prompts[i].text;
    rec["prompt_tokens"] = ch.prompts[i].tokens;
    rec["output"] = codec.detokenize(outputs[i]);
    rec["output_tokens"] = outputs[i];
    out << rec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  if (!out) return resource_error("short write to '%s'", path.c_str());
  return Status();
}

int main_impl(int argc, char** argv) {
  Options o;
  FlagTable t("ds4-bench-spec",
              "ds4-bench-spec — plain vs DSpark greedy decoding per prompt channel and policy, and (--oracle) "
              "the speculative cycle with an oracle proposer at given hit rates");
  t.option("-m,--model", &o.model,
           std::string("Target GGUF (default: ") + DS4_MODELS_DIR + "/" + kDefaultModel + ")",
           "DS4_MODEL", "FILE")
      .option("--mtp", &o.mtp,
              std::string("DSpark support GGUF (default: ") + DS4_MODELS_DIR + "/" +
                  kDefaultDrafter + ")",
              "DS4_MTP", "FILE")
      .option("--prompts-dir", &o.prompts_dir, "Folder with <channel>.jsonl prompt sets", "", "DIR")
      .option("--channels", &o.channels, "Comma-separated channels (file stems)", "", "LIST")
      .option("--policies", &o.policies,
              std::string("Comma-separated policies (") + kDsparkPolicies + "), or 'none' (oracle rows only)",
              "", "LIST")
      .option("--oracle", &o.oracle,
              "MEASUREMENT: comma-separated hit rates in [0, 1] (e.g. 0.9,0.7). After the policies, one row "
              "oracle<h> per rate: the speculative cycle (--oracle-policy) with drafts taken from the plain "
              "run's greedy continuation of the same prompt, each drafted position right with probability h "
              "(a deterministic draw per seed, position and draft index), wrong otherwise. Its proposals "
              "cost nothing, so its tokens/s is what speculation pays at that acceptance with a free "
              "drafter (the model column prices them as drafter proposals; they never overlap the seed's decode). "
              "Needs no drafter: with --policies none, "
              "or without --mtp when the default support file is absent, the engine opens without one and only "
              "the oracle rows run",
              "DS4_BENCH_ORACLE", "LIST")
      .option("--oracle-policy", &o.oracle_policy,
              "Policy preset of the oracle rows (fold: scheduler and fold; no margin or cost gate, whose inputs and "
              "prices are a drafter's; no lookup, so the rows measure the oracle alone)", "", "NAME")
      .option("--oracle-seed", &o.oracle_seed, "Seed of the oracle's hit draws")
      .option("--oracle-block", &o.oracle_block,
              "Drafts per oracle proposal (0 = the drafter's block size, 5 without a drafter)", "", "N")
      .option("-n,--prompts", &o.prompts, "Prompts per channel (the first N lines)")
      .option("--gen-tokens", &o.gen_tokens, "Greedy tokens per run (EOS excluded)")
      .option("--max-prompt-tokens", &o.max_prompt_tokens, "Cut each prompt to this many tokens (BOS included)")
      .option("--grid", &o.grid, "Confidence grid of the 'grid' and 'all' policies", "", "LIST")
      .option("--margin-gate", &o.margin, "Logit margin of the 'margin' and 'all' policies")
      .option("--warmup", &o.warmup, "Untimed plain + DSpark warm-up runs (16 tokens, first prompt)")
      .option("--repeat", &o.repeat,
              "Timed plain/DSpark pairs per prompt (alternating); each side counts its fastest run, which "
              "filters out a shared host's interference. Every run is checked for identity", "", "N")
      .option("--csv", &o.csv, "Also write the table as CSV here", "", "FILE")
      .option("--outputs-dir", &o.outputs_dir,
              "Write <channel>.jsonl (prompt, prompt_tokens, output, output_tokens) for ngram_similarity.py", "", "DIR")
      .flag("--self-test-corrupt", &o.corrupt_check,
            "Checker self-test: alter each DSpark output before comparing (must exit 1)")
      .flag("--stats", &o.stats, "Print each DSpark run's stats_report() on stderr")
      .flag("--in-cycle", &o.in_cycle,
            "Under each row: measured over modelled time of the DSpark decodes, verifies and proposals "
            "(units: the paired plain run's time per token) and the share of time outside them")
      .flag("-v,--verbose", &o.verbose, "Verbose logging", "DS4_VERBOSE");
  register_dspark_flags(t, &o.dspark, DsparkFlagSet::kBench);
  register_backend_flags(t, &o.backend);
  ParseResult pr = t.parse(argc, argv);
  if (pr.should_exit()) return print_parse_result(pr);
  set_log_level(o.verbose ? LogLevel::kInfo : LogLevel::kWarn);
  EngineOptions eo;
  Status valid = validate(o);
  if (valid.ok()) valid = apply_backend_flags(o.backend, t, &eo);
  if (Status s = valid; !s.ok()) {
    return flag_error(t, s);
  }
  Expected<std::vector<Policy>> policies = make_policies(o, true);  // names and values checked here
  if (!policies.ok()) {
    std::fprintf(stderr, "ds4-bench-spec: error: %s\n", policies.status().message().c_str());
    return 2;
  }

  std::error_code ec;
  const std::string model = o.model.empty() ? std::string(DS4_MODELS_DIR) + "/" + kDefaultModel : o.model;
  std::string mtp = o.mtp.empty() ? std::string(DS4_MODELS_DIR) + "/" + kDefaultDrafter : o.mtp;
  if (!std::filesystem::exists(model, ec)) return fail("target file '" + model + "' does not exist");
  // The oracle rows need no drafter: without --mtp, a missing default support file (or
  // --policies none) leaves the engine without one and only the oracle rows run.
  const bool oracle_only = !o.oracle.empty() && (no_policies(o) || (o.mtp.empty() && !std::filesystem::exists(mtp, ec)));
  if (oracle_only) {
    if (!no_policies(o)) {
      std::fprintf(stderr, "ds4-bench-spec: no drafter ('%s' does not exist): the --policies rows are skipped, "
                   "only the oracle rows run\n", mtp.c_str());
    }
    mtp.clear();
    if (o.dspark.calibrate) return fail("--calibrate needs a drafter (it times proposals)");
  } else if (!std::filesystem::exists(mtp, ec)) {
    return fail("drafter file '" + mtp + "' does not exist");
  }
  if (!o.outputs_dir.empty()) {
    std::filesystem::create_directories(o.outputs_dir, ec);
    if (ec) return fail("cannot create '" + o.outputs_dir + "': " + ec.message());
  }

  eo.model_path = model;
  eo.mtp_path = mtp;
  Expected<std::unique_ptr<Engine>> opened = Engine::open(eo);
  if (!opened.ok()) return fail(opened.status().message());
  Engine& engine = **opened;
  if (oracle_only) policies = make_policies(o, false);  // no drafter: the oracle rows only
  if (!policies.ok()) return fail(policies.status().message());
  std::fprintf(stderr, "%s\n", backend_line("ds4-bench-spec", engine.info()).c_str());
  const TextCodec& codec = engine.text();
  if (o.dspark.calibrate) {
    std::fprintf(stderr, "ds4-bench-spec: calibrating the cost gate (%d rounds)...\n", o.dspark.calibrate_reps);
    Expected<DsparkCostCalibration> cal = calibrate_dspark_costs(engine, o.dspark.calibrate_reps);
    if (!cal.ok()) return fail("calibration: " + cal.status().message());
    const std::string text = format_dspark_costs(*cal);
    for (size_t i = 0; i < text.size();) {  // as '#' comment lines
      size_t j = text.find('\n', i);
      if (j == std::string::npos) j = text.size();
      std::printf("# %.*s\n", static_cast<int>(j - i), text.data() + i);
      i = j + 1;
    }
    apply_dspark_costs(*cal, &o.dspark.values);
    policies = make_policies(o, !oracle_only);  // the policies carry the measured costs
    if (!policies.ok()) return fail(policies.status().message());
  }

  std::vector<Channel> channels;
  for (const std::string& name : split_list(o.channels)) {
    Expected<Channel> ch = load_channel(o, codec, name);
    if (!ch.ok()) return fail(ch.status().message());
    channels.push_back(std::move(ch).value());
  }

  FILE* csv = nullptr;
  if (!o.csv.empty()) {
    csv = std::fopen(o.csv.c_str(), "w");
    if (csv == nullptr) return fail("cannot write CSV file '" + o.csv + "'");
    std::fputs(csv_header(), csv);
  }
  std::printf("# ds4-bench-spec: target %s\n# drafter %s\n# backend %s\n", model.c_str(),
              mtp.empty() ? "none (oracle rows only)" : mtp.c_str(), engine.info().backend.c_str());
  if (!o.oracle.empty()) {
    std::printf("# oracle<h> rows (MEASUREMENT): policy %s, drafts = the plain run's greedy continuation, "
                "each drafted position right with probability h (seed %llu, mixed with each prompt's channel "
                "and id), wrong otherwise; block %s; never beside the seed's decode; the proposals cost nothing "
                "(the model column prices them as drafter proposals)\n",
                o.oracle_policy.c_str(), static_cast<unsigned long long>(o.oracle_seed),
                o.oracle_block > 0 ? std::to_string(o.oracle_block).c_str()
                                   : (mtp.empty() ? "5" : "the drafter's"));
  }
  std::printf("# %d prompt(s)/channel (<= %d prompt tokens), %d greedy tokens/run (EOS banned), "
              "confidence %.2f, grid %s, margin %.2f; plain and DSpark alternate per prompt%s\n",
              o.prompts, o.max_prompt_tokens, o.gen_tokens, o.dspark.values.confidence, o.grid.c_str(), o.margin,
              o.repeat > 1 ? (", " + std::to_string(o.repeat) + " pairs each, fastest run per side").c_str() : "");
  std::printf("# model = tokens / modelled cost from the counters (decode 1, verify(n), proposals at "
              "the cost-gate costs below): the clock-free ratio\n");
  std::printf("# accept%%=accepted/proposed drafts; acc/cyc=accepted drafts per cycle; tok/cyc=tokens "
              "per cycle; vrow/cyc=verify rows per cycle; dec/prop/ver/com/oth%% = DSpark time split (stats time_ms)\n");
  std::printf("# cost gate (cost* policies): verify(n) ~ %.2f + %.2f n, draft %.2f, draft rejected %.2f "
              "decode(1) units, window %d\n",
              o.dspark.values.cost_verify_base, o.dspark.values.cost_verify_row, o.dspark.values.cost_draft, o.dspark.values.cost_draft_reject,
              o.dspark.values.cost_window);
  std::printf("# overlap (standalone proposal alongside the seed's decode, the threads split in two): %s; overlapped "
              "draft %.2f, rejected %.2f (what a pair adds to its decode; the model ratio charges overlapped proposals these)\n",
              o.dspark.values.overlap < 0 ? "auto (on with 2 threads and no cost gate, or free overlap prices)" : (o.dspark.values.overlap > 0 ? "on" : "off"),
              o.dspark.values.cost_draft_overlap, o.dspark.values.cost_draft_reject_overlap);

  // The oracle script of a prompt: the plain run's greedy continuation. The hit draws are keyed
  // on (seed, position, draft index), so the seed is --oracle-seed mixed with the prompt's
  // channel and id (FNV-1a): prompts of the same length (cut to --max-prompt-tokens) must not
  // share one hit pattern.
  auto script_of = [&](const std::string& channel, const Prompt& p, const RunResult& plain, float h) {
    uint64_t seed = 0xcbf29ce484222325ull ^ o.oracle_seed;
    for (const std::string* part : {&channel, &p.id}) {
      for (const char c : *part) seed = (seed ^ static_cast<uint8_t>(c)) * 0x100000001b3ull;
      seed = (seed ^ 0xffu) * 0x100000001b3ull;  // separator
    }
    OracleScript sc;
    sc.tokens = plain.gen.tokens;
    sc.start = static_cast<int64_t>(p.tokens.size());
    sc.hit_rate = h;
    sc.seed = seed;
    sc.block_size = o.oracle_block;
    return sc;
  };
  for (int w = 0; w < o.warmup; ++w) {
    const Prompt& p = channels.front().prompts.front();
    Expected<RunResult> a = run_one(engine, p, 16, nullptr);
    if (!a.ok()) return fail("warm-up (plain): " + a.status().message());
    const Policy& first = policies->front();
    const OracleScript sc = script_of(channels.front().name, p, *a, std::max(first.oracle, 0.0f));
    Expected<RunResult> b = run_one(engine, p, 16, &first.spec, first.oracle >= 0 ? &sc : nullptr);
    if (!b.ok()) return fail("warm-up (DSpark): " + b.status().message());
  }

  print_header(stdout);
  std::fflush(stdout);
  int failures = 0;
  std::vector<Cell> totals(policies->size());  // per policy, over all channels
  int total_prompts = 0;
  for (const Channel& ch : channels) {
    total_prompts += static_cast<int>(ch.prompts.size());
    std::vector<std::vector<int32_t>> reference(ch.prompts.size());
    std::vector<std::vector<float>> reference_logits(ch.prompts.size());
    for (size_t pi = 0; pi < policies->size(); ++pi) {
      const Policy& pol = (*policies)[pi];
      Cell cell;
      for (size_t i = 0; i < ch.prompts.size(); ++i) {
        const Prompt& p = ch.prompts[i];
        // --repeat: alternate plain and DSpark; each side keeps its fastest time, every run is
        // checked. The counters and the time split are the first DSpark run's (the counters
        // are the same in every run: decisions read no clock).
        double plain_best = 0, spark_best = 0;
        std::optional<RunResult> plain, spark;
        for (int rep = 0; rep < o.repeat; ++rep) {
          Expected<RunResult> pr = run_one(engine, p, o.gen_tokens, nullptr);
          if (!pr.ok()) return fail(ch.name + "/" + p.id + " plain: " + pr.status().message());
          const OracleScript sc = script_of(ch.name, p, *pr, std::max(pol.oracle, 0.0f));
          Expected<RunResult> sr = run_one(engine, p, o.gen_tokens, &pol.spec, pol.oracle >= 0 ? &sc : nullptr);
          if (!sr.ok()) return fail(ch.name + "/" + p.id + " " + pol.name + ": " + sr.status().message());
          if (o.corrupt_check && !sr->gen.tokens.empty()) sr->gen.tokens.back() ^= 1;
          if (reference[i].empty()) {
            reference[i] = pr->gen.tokens;
            reference_logits[i] = pr->final_logits;
          } else if (pr->gen.tokens != reference[i] || !same_bits(pr->final_logits, reference_logits[i])) {
            ++cell.plain_nondeterministic;
            std::fprintf(stderr, "ds4-bench-spec: %s/%s: plain output changed between runs\n",
                         ch.name.c_str(), p.id.c_str());
          }
          if (sr->gen.tokens != pr->gen.tokens) {
            ++cell.token_mismatches;
            size_t k = 0;
            while (k < sr->gen.tokens.size() && k < pr->gen.tokens.size() && sr->gen.tokens[k] == pr->gen.tokens[k]) {
              ++k;
            }
            std::fprintf(stderr,
                         "ds4-bench-spec: %s/%s policy %s: DSpark output differs from plain at token "
                         "%zu (%zu vs %zu tokens)\n",
                         ch.name.c_str(), p.id.c_str(), pol.name.c_str(), k, sr->gen.tokens.size(),
                         pr->gen.tokens.size());
          } else if (!same_bits(sr->final_logits, pr->final_logits)) {
            ++cell.logits_mismatches;
            std::fprintf(stderr, "ds4-bench-spec: %s/%s policy %s: same tokens but final logits differ\n",
                         ch.name.c_str(), p.id.c_str(), pol.name.c_str());
          }
          if (rep == 0 || pr->gen.gen_s < plain_best) plain_best = pr->gen.gen_s;
          if (rep == 0 || sr->gen.gen_s < spark_best) spark_best = sr->gen.gen_s;
          if (rep == 0) {
            plain = std::move(pr).value();
            spark = std::move(sr).value();
          }
        }
        if (o.stats) {
          std::fprintf(stderr, "--- %s/%s policy %s\n%s", ch.name.c_str(), p.id.c_str(),
                       pol.name.c_str(), spark->report.c_str());
        }
        cell.plain_first_s += plain->gen.gen_s;
        plain->gen.gen_s = plain_best;
        spark->gen.gen_s = spark_best;
        cell.plain_s += plain->gen.gen_s;
        cell.plain_tokens += plain->gen.gen_tokens;
        cell.spec_s += spark->gen.gen_s;
        cell.spec_tokens += spark->gen.gen_tokens;
        accumulate_stats(spark->report, &cell.stats);
      }
      failures += cell.token_mismatches + cell.logits_mismatches + cell.plain_nondeterministic;
      print_row(stdout, csv, ch.name, pol.name, static_cast<int>(ch.prompts.size()), cell, o.dspark.values, o.in_cycle);
      merge(cell, &totals[pi]);
    }
    if (!o.outputs_dir.empty()) {
      if (Status s = write_outputs(o.outputs_dir, ch, reference, codec); !s.ok()) return fail(s.message());
    }
  }
  if (channels.size() > 1) {
    for (size_t pi = 0; pi < policies->size(); ++pi) {
      print_row(stdout, csv, "ALL", (*policies)[pi].name, total_prompts, totals[pi], o.dspark.values, o.in_cycle);
    }
  }
  if (csv != nullptr) std::fclose(csv);
  if (failures > 0) {
    std::printf("# IDENTITY FAILED: %d run(s) differ (details on stderr)\n", failures);
    return 1;
  }
  std::printf("# identity: every DSpark output equals the plain output (tokens and final logits)\n");
  return 0;
}

}  // namespace
}  // namespace ds4::bench

int main(int argc, char** argv) { return ds4::bench::main_impl(argc, argv); }
