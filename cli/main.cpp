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
      .option("--temp", &o.temp, "Sampling temperature (0 = greedy)", "DS4_TEMP")
      .option("--top-p", &o.top_p, "Nucleus sampling: keep the top mass P (1 = off)")
      .option("--top-k", &o.top_k, "Keep the K most probable tokens (0 = off)")
      .option("--min-p", &o.min_p, "Drop tokens below P x the top probability (0 = off)")
      .option("--seed", &o.seed, "Sampling seed (default: from the clock)", "DS4_SEED")
      .flag("--think", &o.think, "Thinking mode (the default)")
      .flag("--nothink", &o.nothink, "Non-thinking mode")
      .flag("--raw", &o.raw, "No chat template: BOS + the prompt as plain text")
      .flag("-i,--interactive", &o.interactive, "Interactive chat even when stdin is not a TTY")
      .option("--mtp", &o.mtp, "DSpark support GGUF (drafter)", "DS4_MTP", "FILE");
  register_dspark_flags(t, &o.dspark);
  register_backend_flags(t, &o.backend);
  t.flag("-v,--verbose", &o.verbose, "Verbose logging", "DS4_VERBOSE");
  declare_debug_flags(t, o);
}

Status validate(Options& o, const FlagTable& flags) {
  DS4_RETURN_IF_ERROR(apply_backend_flags(o.backend, flags, &o.engine));
  if (o.tokens < 0) return invalid_argument("-n/--tokens must be >= 0, got %d", o.tokens);
  if (o.ctx < 2) return invalid_argument("-c/--ctx must be >= 2 tokens, got %d", o.ctx);
  if (!(o.temp >= 0.0f)) return invalid_argument("--temp must be >= 0, got %g", o.temp);
  if (!(o.top_p >= 0.0f && o.top_p <= 1.0f)) {
    return invalid_argument("--top-p must be in [0, 1], got %g", o.top_p);
  }
  if (o.top_k < 0) return invalid_argument("--top-k must be >= 0, got %d", o.top_k);
  if (!(o.min_p >= 0.0f && o.min_p <= 1.0f)) {
    return invalid_argument("--min-p must be in [0, 1], got %g", o.min_p);
  }
  if (o.think && o.nothink) return invalid_argument("--think and --nothink are exclusive");
  if (!o.prompt.empty() && !o.prompt_file.empty()) {
    return invalid_argument("-p/--prompt and --prompt-file are exclusive");
  }
  DS4_RETURN_IF_ERROR(validate_dspark_flags(o.dspark));
  if ((o.dspark.enabled || o.dspark.calibrate) && o.mtp.empty() && !o.model.empty()) {
    return invalid_argument("--dspark%s needs the drafter GGUF: pass it with --mtp FILE",
                            o.dspark.calibrate ? "-calibrate" : "");
  }
  return Status();
}

// --dspark with the bundled default model and no --mtp uses the bundled drafter.
Status resolve_drafter(Options& o) {
  if (!(o.dspark.enabled || o.dspark.calibrate) || !o.mtp.empty()) return Status();
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
  EngineOptions eo = o.engine;
  eo.model_path = model_path;
  eo.mtp_path = o.mtp;
  return eo;
}

Status load(const Options& o, const std::string& model_path, Loaded* loaded) {
  DS4_ASSIGN_OR_RETURN(loaded->engine, Engine::open(engine_options(o, model_path)));
  loaded->text = &loaded->engine->text();
  DS4_ASSIGN_OR_RETURN(loaded->session, loaded->engine->new_session(o.ctx));
  DS4_RETURN_IF_ERROR(attach_decoder(o, *loaded));
  // Once everything is loaded (an error before this stays the only line on stderr).
  std::fprintf(stderr, "%s\n", backend_line("ds4", loaded->engine->info()).c_str());
  return Status();
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
  std::fprintf(stderr, "%s\n", backend_line("ds4", (*engine)->info()).c_str());
  Expected<DsparkCostCalibration> c =
      calibrate_dspark_costs(**engine, o.dspark.calibrate_reps, [](int done, int total) {
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
  if (pr.should_exit()) return print_parse_result(pr);
  o.seed_given = flags.given("--seed");
  if (!o.seed_given) o.seed = static_cast<uint64_t>(std::time(nullptr));
  set_log_level(o.verbose ? LogLevel::kInfo : LogLevel::kWarn);
  if (Status s = validate(o, flags); !s.ok()) {
    return flag_error(flags, s);
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

  if (o.dspark.calibrate) return run_calibration(o, *model_path);

  install_sigint_handler();
  Loaded loaded;
  if (Status s = load(o, *model_path, &loaded); !s.ok()) return fail(s.message());
  DS4_LOG_INFO("model %s: %s", model_path->c_str(), loaded.engine->info().name.c_str());
  if (o.dspark.enabled && o.temp > 0.0f) {
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
