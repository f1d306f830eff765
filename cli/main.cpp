// cli/main.cpp — `ds4`: one-shot generation (-p / --prompt-file / piped stdin) and interactive
// chat (REPL, repl.cpp) on a DS4-architecture GGUF model.
//
// Flag names follow antirez/ds4 where they exist (design.md §1). Every user mistake (unknown
// flag, bad value, missing or invalid model, prompt longer than the context, context too big
// for memory) ends with one clear message on stderr and a non-zero exit code; messages about
// the model file itself come from the engine.
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/flags.h"
#include "core/log.h"

#ifndef DS4_MODELS_DIR
#define DS4_MODELS_DIR "models"
#endif

namespace ds4::cli {

namespace {

constexpr const char* kDefaultModelName = "ds4-tiny.gguf";
constexpr const char* kDefaultDrafterName = "ds4-tiny-dspark.gguf";

int fail(const std::string& message) {
  std::fprintf(stderr, "ds4: error: %s\n", message.c_str());
  return 1;
}

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

void declare_flags(FlagTable& t, Options& o) {
  t.option("-m,--model", &o.model,
           std::string("Model GGUF file (default: ") + DS4_MODELS_DIR + "/" + kDefaultModelName +
               ")",
           "DS4_MODEL", "FILE")
      .option("-p,--prompt", &o.prompt, "One-shot prompt (reply printed to stdout)", "", "TEXT")
      .option("--prompt-file", &o.prompt_file, "One-shot prompt read from a file", "", "FILE")
      .option("--system", &o.system, "System prompt (empty disables)", "", "TEXT")
      .option("-n,--tokens", &o.tokens, "Maximum tokens to generate per reply", "DS4_TOKENS")
      .option("-c,--ctx", &o.ctx, "Context size in tokens", "DS4_CTX")
      .option("-t,--threads", &o.threads, "CPU threads (0 = all cores)", "DS4_THREADS")
      .option("--temp", &o.temp, "Sampling temperature (0 = greedy)", "DS4_TEMP")
      .option("--top-p", &o.top_p, "Nucleus sampling: keep the top mass P (1 = off)")
      .option("--top-k", &o.top_k, "Keep the K most probable tokens (0 = off)")
      .option("--min-p", &o.min_p, "Drop tokens below P x the top probability (0 = off)")
      .option("--seed", &o.seed, "Sampling seed (default: from the clock)", "DS4_SEED")
      .flag("--think", &o.think, "Thinking mode (the default)")
      .flag("--nothink", &o.nothink, "Non-thinking mode")
      .flag("--raw", &o.raw, "No chat template: BOS + the prompt as plain text")
      .flag("-i,--interactive", &o.interactive, "Interactive chat even when stdin is not a TTY")
      .option("--mtp", &o.mtp, "DSpark support GGUF (drafter)", "DS4_MTP", "FILE")
      .flag("--dspark", &o.dspark,
            "DSpark speculative decoding, greedy only, output identical to plain decoding "
            "(drafter: --mtp, or the bundled one with the default model)")
      .option("--dspark-policy", &o.dspark_policy,
              std::string("DSpark: policy preset, then the switches below add to it (") + kDsparkPolicies +
                  "; costall = fold + grid + backoff + margin gate + cost gate; costlookup = costall + lookup)",
              "DS4_DSPARK_POLICY", "NAME")
      .option("--dspark-confidence", &o.dspark_confidence,
              "DSpark: sigmoid confidence threshold per draft position, 0..1",
              "DS4_DSPARK_CONFIDENCE")
      .option("--dspark-confidence-grid", &o.dspark_grid,
              "DSpark: per-position thresholds 'a,b,c' (last value extends; default: the preset's)",
              "DS4_DSPARK_CONFIDENCE_GRID", "LIST")
      .flag("--dspark-fold", &o.dspark_fold,
            "DSpark: verify the seed as row 0 after a full accept", "DS4_DSPARK_FOLD")
      .option("--dspark-fold-partial", &o.dspark_fold_partial,
              "DSpark: with fold, also fold after a partial accept 0/1 (default: the preset's; costall 1)",
              "DS4_DSPARK_FOLD_PARTIAL")
      .option("--dspark-scheduler", &o.dspark_scheduler,
              "DSpark: windowed pause scheduler (counters only) 0/1", "DS4_DSPARK_SCHEDULER")
      .flag("--dspark-scheduler-backoff", &o.dspark_backoff,
            "DSpark: pause x2 per unproductive cycle (<= x8), bar +0.05 (<= +0.20)",
            "DS4_DSPARK_SCHEDULER_BACKOFF")
      .option("--dspark-margin-gate", &o.dspark_margin_gate,
              "DSpark: skip standalone proposals when target top1-top2 < this (logits; -1 = the preset's)",
              "DS4_DSPARK_MARGIN_GATE")
      .flag("--dspark-replay", &o.dspark_replay,
            "DSpark: commit partial accepts by rollback + decode (strict control)",
            "DS4_DSPARK_REPLAY")
      .flag("--dspark-stats", &o.dspark_stats, "DSpark: print counters and time split",
            "DS4_DSPARK_STATS")
      .flag("--dspark-cost-gate", &o.dspark_cost_gate,
            "DSpark: propose/verify/fold only when the expected tokens beat the expected cost",
            "DS4_DSPARK_COST_GATE")
      .option("--dspark-cost-verify-base", &o.dspark_cost_verify_base,
              "DSpark cost gate: verify(n) ~ BASE + ROW*n decode(1) units (base)",
              "DS4_DSPARK_COST_VERIFY_BASE")
      .option("--dspark-cost-verify-row", &o.dspark_cost_verify_row,
              "DSpark cost gate: verify cost per row, decode(1) units", "DS4_DSPARK_COST_VERIFY_ROW")
      .option("--dspark-cost-draft", &o.dspark_cost_draft,
              "DSpark cost gate: one proposal reaching the vocab head, decode(1) units",
              "DS4_DSPARK_COST_DRAFT")
      .option("--dspark-cost-draft-reject", &o.dspark_cost_draft_reject,
              "DSpark cost gate: one proposal stopped by the conf0 precheck, decode(1) units",
              "DS4_DSPARK_COST_DRAFT_REJECT")
      .option("--dspark-cost-draft-overlap", &o.dspark_cost_draft_overlap,
              "DSpark cost gate: a standalone proposal overlapped with the seed's decode, decode(1) units",
              "DS4_DSPARK_COST_DRAFT_OVERLAP")
      .option("--dspark-cost-draft-reject-overlap", &o.dspark_cost_draft_reject_overlap,
              "DSpark cost gate: an overlapped proposal stopped by the conf0 precheck, decode(1) units",
              "DS4_DSPARK_COST_DRAFT_REJECT_OVERLAP")
      .option("--dspark-cost-window", &o.dspark_cost_window,
              "DSpark cost gate: memory of the acceptance statistics, proposals",
              "DS4_DSPARK_COST_WINDOW")
      .option("--dspark-overlap", &o.dspark_overlap,
              "DSpark: propose while the seed decodes, the threads split in two: -1 auto (on with 2 threads and no cost gate, or cost gate with free overlap prices), 0 off, 1 on",
              "DS4_DSPARK_OVERLAP")
      .option("--dspark-lookup", &o.dspark_lookup,
              "DSpark: prompt-lookup drafts (n-gram continuations of the context) before each DSpark "
              "proposal, verified like drafts 0/1 (default: the preset's; costlookup 1)",
              "DS4_DSPARK_LOOKUP")
      .flag("--dspark-calibrate", &o.dspark_calibrate,
            "DSpark: measure the cost gate's costs on this machine (threads, ISA), print them as "
            "DS4_DSPARK_COST_* lines and exit (drafter: --mtp, or the bundled one)")
      .option("--dspark-calibrate-reps", &o.dspark_calibrate_reps, "DSpark: rounds of --dspark-calibrate (medians)",
              "", "N")
      .flag("--cpu", &o.cpu, "Run on the CPU backend (default)")
      .flag("--cuda", &o.cuda, "Run on the CUDA backend")
      .option("--isa", &o.isa, "CPU kernel path: auto|scalar|avx2|avx512 (same bits on every path)",
              "DS4_CPU_ISA", "ISA")
      .flag("--f32-activations", &o.f32_activations,
            "Reference numerics: no Q8_0/Q8_K activation quantization (slower; parity/quality checks)",
            "DS4_F32_ACTIVATIONS")
      .flag("-v,--verbose", &o.verbose, "Verbose logging", "DS4_VERBOSE");
  declare_debug_flags(t, o);
}

Status validate(const Options& o) {
  if (o.tokens < 0) return invalid_argument("-n/--tokens must be >= 0, got %d", o.tokens);
  if (o.ctx < 2) return invalid_argument("-c/--ctx must be >= 2 tokens, got %d", o.ctx);
  if (o.threads < 0) return invalid_argument("-t/--threads must be >= 0, got %d", o.threads);
  if (!(o.temp >= 0.0f)) return invalid_argument("--temp must be >= 0, got %g", o.temp);
  if (!(o.top_p >= 0.0f && o.top_p <= 1.0f)) {
    return invalid_argument("--top-p must be in [0, 1], got %g", o.top_p);
  }
  if (o.top_k < 0) return invalid_argument("--top-k must be >= 0, got %d", o.top_k);
  if (!(o.min_p >= 0.0f && o.min_p <= 1.0f)) {
    return invalid_argument("--min-p must be in [0, 1], got %g", o.min_p);
  }
  if (!(o.dspark_confidence >= 0.0f && o.dspark_confidence <= 1.0f)) {
    return invalid_argument("--dspark-confidence must be in [0, 1], got %g", o.dspark_confidence);
  }
  if (o.think && o.nothink) return invalid_argument("--think and --nothink are exclusive");
  if (o.cpu && o.cuda) return invalid_argument("--cpu and --cuda are exclusive");
  if (!o.prompt.empty() && !o.prompt_file.empty()) {
    return invalid_argument("-p/--prompt and --prompt-file are exclusive");
  }
  if (!(o.dspark_margin_gate >= 0.0f) && o.dspark_margin_gate != -1.0f) {
    return invalid_argument("--dspark-margin-gate must be >= 0 (or -1 for the preset's), got %g",
                            o.dspark_margin_gate);
  }
  if (!(o.dspark_cost_verify_base >= 0.0f && o.dspark_cost_verify_row >= 0.0f &&
        o.dspark_cost_draft >= 0.0f && o.dspark_cost_draft_reject >= 0.0f &&
        o.dspark_cost_draft_overlap >= 0.0f && o.dspark_cost_draft_reject_overlap >= 0.0f)) {
    return invalid_argument("--dspark-cost-* costs must be >= 0");
  }
  if (o.dspark_overlap < -1 || o.dspark_overlap > 1) {
    return invalid_argument("--dspark-overlap must be -1 (auto), 0 or 1, got %d", o.dspark_overlap);
  }
  if (o.dspark_lookup < -1 || o.dspark_lookup > 1) {
    return invalid_argument("--dspark-lookup must be 0 or 1 (-1 for the preset's), got %d", o.dspark_lookup);
  }
  if (o.dspark_calibrate_reps < 1) {
    return invalid_argument("--dspark-calibrate-reps must be >= 1, got %d", o.dspark_calibrate_reps);
  }
  if (o.dspark_cost_window < 1) {
    return invalid_argument("--dspark-cost-window must be >= 1, got %d", o.dspark_cost_window);
  }
  if (!o.dspark_grid.empty()) {
    std::vector<float> grid;
    DS4_RETURN_IF_ERROR(parse_dspark_confidence_grid(o.dspark_grid, &grid));
  }
  {
    SpecOptions probe;
    DS4_RETURN_IF_ERROR(apply_dspark_policy(o.dspark_policy, {}, 0.0f, &probe));
  }
  if ((o.dspark || o.dspark_calibrate) && o.mtp.empty() && !o.model.empty()) {
    return invalid_argument("--dspark%s needs the drafter GGUF: pass it with --mtp FILE",
                            o.dspark_calibrate ? "-calibrate" : "");
  }
  return Status();
}

// --dspark with the bundled default model and no --mtp uses the bundled drafter.
Status resolve_drafter(Options& o) {
  if (!(o.dspark || o.dspark_calibrate) || !o.mtp.empty()) return Status();
  const std::string def = std::string(DS4_MODELS_DIR) + "/" + kDefaultDrafterName;
  std::error_code ec;
  if (!std::filesystem::exists(def, ec)) {
    return not_found("--dspark without --mtp uses the bundled drafter '%s', which does not exist; "
                     "pass one with --mtp FILE", def.c_str());
  }
  o.mtp = def;
  return Status();
}

// Resolves the model path: -m as given, else the repository's default model.
Expected<std::string> resolve_model(const Options& o) {
  std::error_code ec;
  if (!o.model.empty()) {
    if (!std::filesystem::exists(o.model, ec)) {
      return not_found("model file '%s' does not exist", o.model.c_str());
    }
    return o.model;
  }
  const std::string def = std::string(DS4_MODELS_DIR) + "/" + kDefaultModelName;
  if (!std::filesystem::exists(def, ec)) {
    return not_found("no model given and the default model '%s' does not exist; pass one with "
                     "-m FILE (or run 'make run', which generates a random tiny model)",
                     def.c_str());
  }
  return def;
}

EngineOptions engine_options(const Options& o, const std::string& model_path) {
  EngineOptions eo;
  eo.model_path = model_path;
  eo.mtp_path = o.mtp;
  eo.backend = o.cuda ? BackendKind::kCuda : BackendKind::kCpu;
  eo.n_threads = o.threads;
  eo.cpu_isa = o.isa;
  eo.f32_activations = o.f32_activations;
  return eo;
}

Status load(const Options& o, const std::string& model_path, Loaded* loaded) {
  DS4_ASSIGN_OR_RETURN(loaded->engine, Engine::open(engine_options(o, model_path)));
  loaded->text = &loaded->engine->text();
  DS4_ASSIGN_OR_RETURN(loaded->session, loaded->engine->new_session(o.ctx));
  return attach_decoder(o, *loaded);
}

int run_one_shot(const Options& o, Loaded& loaded, const std::string& prompt_text) {
  const ThinkMode mode = TextCodec::think_mode_for_context(
      o.nothink ? ThinkMode::kNoThink : ThinkMode::kThink, o.ctx);
  std::vector<int32_t> prompt;
  if (o.raw) {
    prompt.push_back(loaded.text->bos());
    std::vector<int32_t> body = loaded.text->tokenize(prompt_text);
    prompt.insert(prompt.end(), body.begin(), body.end());
  } else {
    prompt = loaded.text->encode_prompt(o.system, prompt_text, mode);
  }
  DS4_LOG_INFO("prompt: %zu tokens, context %d", prompt.size(), o.ctx);

  GenerateOptions g = generate_options(o);
  g.decoder = loaded.decoder.get();
  g.cancel_prefill = [] { return interrupted(); };
  g.prefill_progress = prefill_progress(o.verbose);
  set_busy(true);
  Expected<GenerateStats> r =
      generate(*loaded.session, *loaded.text, prompt, g, [](int32_t, std::string_view text) {
        if (!text.empty()) {
          std::fwrite(text.data(), 1, text.size(), stdout);
          std::fflush(stdout);
        }
        return !interrupted();
      });
  set_busy(false);
  if (!r.ok()) return fail(r.status().message());
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (r->stop == StopReason::kContextFull) {
    std::fprintf(stderr, "ds4: context full (%d tokens); raise -c/--ctx for longer replies\n",
                 o.ctx);
  } else if (r->stop == StopReason::kCancelled) {
    std::fprintf(stderr, "[interrupted]\n");
  }
  print_stats(*r);
  return 0;
}

// --dspark-calibrate: engine with the drafter, no session of its own (the calibration makes one).
int run_calibration(const Options& o, const std::string& model_path) {
  Expected<std::unique_ptr<Engine>> engine = Engine::open(engine_options(o, model_path));
  if (!engine.ok()) return fail(engine.status().message());
  Expected<DsparkCostCalibration> c =
      calibrate_dspark_costs(**engine, o.dspark_calibrate_reps, [](int done, int total) {
        std::fprintf(stderr, "\rds4: calibrating the DSpark cost gate: round %d/%d", done, total);
        if (done == total) std::fputc('\n', stderr);
      });
  if (!c.ok()) return fail(c.status().message());
  std::fputs(format_dspark_costs(*c).c_str(), stdout);
  return 0;
}

int main_impl(int argc, char** argv) {
  Options o;
  FlagTable flags("ds4", "ds4 — DeepSeek V4 Flash inference (one-shot with -p, else chat)");
  declare_flags(flags, o);
  ParseResult pr = flags.parse(argc, argv);
  if (pr.should_exit()) {
    std::fprintf(pr.kind == ParseResult::Kind::kHelp ? stdout : stderr, "%s\n",
                 pr.message.c_str());
    return pr.exit_code;
  }
  o.seed_given = flags.given("--seed");
  if (!o.seed_given) o.seed = static_cast<uint64_t>(std::time(nullptr));
  set_log_level(o.verbose ? LogLevel::kInfo : LogLevel::kWarn);
  if (Status s = validate(o); !s.ok()) {
    std::fprintf(stderr, "ds4: error: %s\nRun 'ds4 --help' for the list of flags.\n",
                 s.message().c_str());
    return 2;
  }

  // The prompt, if any: -p, --prompt-file, or piped stdin.
  std::string prompt_text;
  bool one_shot = false;
  if (flags.given("--prompt")) {
    prompt_text = o.prompt;
    one_shot = true;
  } else if (!o.prompt_file.empty()) {
    if (!read_file(o.prompt_file, &prompt_text)) {
      return fail("cannot read prompt file '" + o.prompt_file + "'");
    }
    one_shot = true;
  } else if (!o.interactive && !::isatty(STDIN_FILENO)) {
    prompt_text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    one_shot = true;
  }

  Expected<std::string> model_path = resolve_model(o);
  if (!model_path.ok()) return fail(model_path.status().message());
  if (Status s = resolve_drafter(o); !s.ok()) return fail(s.message());

  if (o.dspark_calibrate) return run_calibration(o, *model_path);

  install_sigint_handler();
  Loaded loaded;
  if (Status s = load(o, *model_path, &loaded); !s.ok()) return fail(s.message());
  DS4_LOG_INFO("model %s: %s", model_path->c_str(), loaded.engine->info().name.c_str());
  if (o.dspark && o.temp > 0.0f) {
    std::fprintf(stderr, "ds4: note: DSpark speculates only for greedy decoding (--temp 0); "
                         "sampling at --temp %g decodes normally\n", o.temp);
  }

  if (debug_dump_requested(o)) {
    if (!one_shot) return fail("--dump-tokens/--dump-logprobs need a prompt (-p, --prompt-file or stdin)");
    return run_debug_dump(o, loaded, prompt_text);
  }
  if (one_shot) return run_one_shot(o, loaded, prompt_text);
  return run_repl(o, loaded);
}

}  // namespace
}  // namespace ds4::cli

int main(int argc, char** argv) { return ds4::cli::main_impl(argc, argv); }
