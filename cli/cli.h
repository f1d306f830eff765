// cli/cli.h — shared pieces of the `ds4` command: options, the loaded model, SIGINT state.
//
// Role: main.cpp parses flags and runs one-shot mode; repl.cpp runs interactive chat. Both go
// through engine/ only (engine.h, text.h, generate.h) — frontends never include lower layers.
// Invariant: Ctrl+C (SIGINT) only sets a flag; generation polls it through the generate()
// callback and stops cleanly. Two Ctrl+C while busy exit the process at once (exit 130).
#pragma once

#include <csignal>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/backend_flags.h"
#include "engine/dspark_flags.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "engine/text.h"

namespace ds4 {
class FlagTable;  // core/flags.h
}

namespace ds4::cli {

struct Options {
  std::string model;            // "" = default model (models/ds4-tiny.gguf)
  std::string prompt;
  std::string prompt_file;
  std::string system = "You are a helpful assistant";
  std::string mtp;
  int tokens = 50000;
  int ctx = 32768;
  float temp = 1.0f;
  float top_p = 1.0f;
  int top_k = 0;
  float min_p = 0.05f;
  uint64_t seed = 0;
  bool seed_given = false;
  bool think = false;
  bool nothink = false;
  bool raw = false;
  bool interactive = false;
  DsparkFlags dspark;            // --dspark and every --dspark-* flag (engine/dspark_flags.h)
  BackendFlags backend;          // --backend, --device, --cpu/--cuda, -t, --isa, --f32-activations
  EngineOptions engine;          // the backend flags applied (model paths filled at load)
  bool verbose = false;
  // Debugging (debug_dump.cpp).
  bool dump_tokens = false;
  std::string dump_logprobs;  // FILE
  int logprobs_top_k = 5;
};

// What one run of the program holds.
struct Loaded {
  std::unique_ptr<Engine> engine;
  const TextCodec* text = nullptr;  // owned by engine
  std::unique_ptr<Session> session;
  std::unique_ptr<SpeculativeDecoder> decoder;  // DSpark (--dspark), bound to `session`
};

// (Re)binds the DSpark decoder to loaded.session, which must be empty (before its prefill).
// No-op without --dspark.
Status attach_decoder(const Options& o, Loaded& loaded);
// Replaces loaded.session with a fresh one of n_ctx tokens (decoder re-attached).
Status replace_session(const Options& o, Loaded& loaded, int n_ctx);

// SIGINT handling (cli.cpp).
void install_sigint_handler();
// True once Ctrl+C was pressed since the last clear; clear() also leaves "busy" state.
bool interrupted();
void clear_interrupt();
// While busy (prefill/generation), a second Ctrl+C exits immediately.
void set_busy(bool busy);

// Sampler settings from the flags.
GenerateOptions generate_options(const Options& o);
// Prints "prefill: ... generation: ..." to stderr.
void print_stats(const GenerateStats& stats);
// Prefill progress on stderr for long prompts (only when stderr is a terminal or verbose).
ProgressFn prefill_progress(bool verbose);

// Token/logprob inspection (debug_dump.cpp): --dump-tokens, --dump-logprobs, --logprobs-top-k.
void declare_debug_flags(FlagTable& t, Options& o);
bool debug_dump_requested(const Options& o);
// The one-shot prompt ids (template, or BOS + plain text with --raw).
std::vector<int32_t> prompt_tokens(const Options& o, const Loaded& loaded, const std::string& prompt_text);
// Runs the requested dump on the one-shot prompt; returns the exit code.
int run_debug_dump(const Options& o, Loaded& loaded, const std::string& prompt_text);

// Interactive chat (repl.cpp). Returns the process exit code.
int run_repl(const Options& options, Loaded& loaded);

}  // namespace ds4::cli
