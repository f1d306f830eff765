// server/main.cpp — `ds4-server`: OpenAI- and Anthropic-compatible HTTP serving of one
// DS4-architecture model (engine/), with a request queue and a scheduler thread.
//
// Lifecycle: flags -> Engine::open (model [+ DSpark drafter]) -> Scheduler -> HttpServer
// bound on --host:--port (default 127.0.0.1:8000) -> serve. SIGTERM/SIGINT: stop accepting
// generation requests (503), let in-flight ones finish for up to --shutdown-timeout seconds,
// cancel the rest, close the listener, exit 0. Bad flags or an unloadable model: one message on
// stderr, exit code 2 / 1.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "core/flags.h"
#include "core/log.h"
#include "engine/engine.h"
#include "engine/speculative.h"
#include "server/http.h"
#include "server/scheduler.h"

#ifndef DS4_MODELS_DIR
#define DS4_MODELS_DIR "models"
#endif
#ifndef DS4_SERVER_PAGE
#define DS4_SERVER_PAGE ""
#endif

namespace ds4::server {
namespace {

struct Flags {
  std::string model;
  std::string mtp;
  bool dspark = false;
  bool no_dspark = false;
  std::string dspark_policy = kDefaultDsparkPolicy;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string model_name;
  int ctx = 8192;
  int threads = 0;
  int parallel = 8;
  int max_queue = 64;
  int max_tokens = 4096;
  int max_body_mb = 8;
  int kv_memory_mb = 512;
  int read_timeout = 60;
  int write_timeout = 60;
  int http_threads = 64;
  double shutdown_timeout = 10.0;
  int default_thinking = 1;
  std::string isa = "auto";
  bool verbose = false;
};

void declare(FlagTable& t, Flags& f) {
  t.option("-m,--model", &f.model,
           std::string("Model GGUF file (default: ") + DS4_MODELS_DIR + "/ds4-tiny.gguf)", "DS4_MODEL", "FILE")
      .option("--mtp", &f.mtp, "DSpark support GGUF (drafter); DSpark is then on for greedy requests",
              "DS4_MTP", "FILE")
      .flag("--dspark", &f.dspark, "DSpark with the bundled drafter when --mtp is not given")
      .flag("--no-dspark", &f.no_dspark, "Load no drafter: plain decoding only")
      .option("--dspark-policy", &f.dspark_policy,
              std::string("DSpark policy preset (") + kDsparkPolicies + ")", "DS4_DSPARK_POLICY", "NAME")
      .option("--host", &f.host, "Address to listen on", "DS4_HOST", "ADDR")
      .option("--port", &f.port, "TCP port (0 = any free port, printed at start)", "DS4_PORT")
      .option("--api-key", &f.api_key,
              "Require 'Authorization: Bearer KEY' or 'x-api-key: KEY' on /v1/* and /metrics", "DS4_API_KEY", "KEY")
      .option("--model-name", &f.model_name, "Model id reported and accepted (default: the file name without .gguf)",
              "", "NAME")
      .option("-c,--ctx", &f.ctx, "Context of each request in tokens (prompt + reply)", "DS4_CTX")
      .option("-t,--threads", &f.threads, "CPU threads (0 = all cores)", "DS4_THREADS")
      .option("--parallel", &f.parallel, "Requests advanced together (1..8)", "DS4_PARALLEL")
      .option("--max-queue", &f.max_queue, "Requests waiting for a slot before 429", "DS4_MAX_QUEUE")
      .option("--max-tokens", &f.max_tokens, "Cap (and default) of generated tokens per request", "DS4_MAX_TOKENS")
      .option("--kv-memory", &f.kv_memory_mb,
              "MiB of idle sessions kept for prefix reuse (LRU; a prompt that extends a cached one "
              "resumes it); 0 = no reuse",
              "DS4_KV_MEMORY", "MIB")
      .option("--max-body", &f.max_body_mb, "Request body limit in MiB (then 413)", "", "MIB")
      .option("--read-timeout", &f.read_timeout, "Seconds to wait for a client's request bytes", "", "S")
      .option("--write-timeout", &f.write_timeout, "Seconds a client may stall reading the response", "", "S")
      .option("--http-threads", &f.http_threads, "Connections served at once", "", "N")
      .option("--shutdown-timeout", &f.shutdown_timeout,
              "Seconds in-flight requests may finish after SIGTERM/SIGINT before they are cancelled", "", "S")
      .option("--default-thinking", &f.default_thinking,
              "OpenAI requests without reasoning_effort/thinking: 1 think, 0 no thinking", "", "0|1")
      .option("--isa", &f.isa, "CPU kernel path: auto|scalar|avx2|avx512", "DS4_CPU_ISA", "ISA")
      .flag("-v,--verbose", &f.verbose, "Verbose logging", "DS4_VERBOSE");
}

Status validate(const Flags& f) {
  if (f.port < 0 || f.port > 65535) return invalid_argument("--port must be in [0, 65535], got %d", f.port);
  if (f.ctx < 16) return invalid_argument("-c/--ctx must be >= 16 tokens, got %d", f.ctx);
  if (f.threads < 0) return invalid_argument("-t/--threads must be >= 0, got %d", f.threads);
  if (f.parallel < 1 || f.parallel > 8) return invalid_argument("--parallel must be in [1, 8], got %d", f.parallel);
  if (f.kv_memory_mb < 0) return invalid_argument("--kv-memory must be >= 0, got %d", f.kv_memory_mb);
  if (f.max_queue < 0) return invalid_argument("--max-queue must be >= 0, got %d", f.max_queue);
  if (f.max_tokens < 1) return invalid_argument("--max-tokens must be >= 1, got %d", f.max_tokens);
  if (f.max_body_mb < 1 || f.max_body_mb > 1024) return invalid_argument("--max-body must be in [1, 1024] MiB");
  if (f.read_timeout < 1 || f.write_timeout < 1) return invalid_argument("timeouts must be >= 1 s");
  if (f.http_threads < 4 || f.http_threads > 4096) return invalid_argument("--http-threads must be in [4, 4096]");
  if (!(f.shutdown_timeout >= 0)) return invalid_argument("--shutdown-timeout must be >= 0");
  if (f.default_thinking != 0 && f.default_thinking != 1) return invalid_argument("--default-thinking must be 0 or 1");
  if (f.dspark && f.no_dspark) return invalid_argument("--dspark and --no-dspark are exclusive");
  SpecOptions probe;
  return apply_dspark_policy(f.dspark_policy, {}, 0.0f, &probe);
}

int fail(const std::string& m) {
  std::fprintf(stderr, "ds4-server: error: %s\n", m.c_str());
  return 1;
}

int main_impl(int argc, char** argv) {
  Flags f;
  FlagTable flags("ds4-server", "ds4-server — OpenAI/Anthropic-compatible HTTP server for DS4 models");
  declare(flags, f);
  ParseResult pr = flags.parse(argc, argv);
  if (pr.should_exit()) {
    std::fprintf(pr.kind == ParseResult::Kind::kHelp ? stdout : stderr, "%s\n", pr.message.c_str());
    return pr.exit_code;
  }
  set_log_level(f.verbose ? LogLevel::kInfo : LogLevel::kWarn);
  if (Status s = validate(f); !s.ok()) {
    std::fprintf(stderr, "ds4-server: error: %s\nRun 'ds4-server --help' for the list of flags.\n",
                 s.message().c_str());
    return 2;
  }
  std::error_code ec;
  if (f.model.empty()) f.model = std::string(DS4_MODELS_DIR) + "/ds4-tiny.gguf";
  if (!std::filesystem::exists(f.model, ec)) return fail("model file '" + f.model + "' does not exist");
  if (f.no_dspark) f.mtp.clear();
  if (f.dspark && f.mtp.empty()) {
    f.mtp = std::string(DS4_MODELS_DIR) + "/ds4-tiny-dspark.gguf";
    if (!std::filesystem::exists(f.mtp, ec)) return fail("--dspark: bundled drafter '" + f.mtp + "' does not exist");
  }
  if (f.model_name.empty()) f.model_name = std::filesystem::path(f.model).stem().string();

  // Signals are taken by one sigwait thread; every thread started below inherits the mask.
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  EngineOptions eo;
  eo.model_path = f.model;
  eo.mtp_path = f.mtp;
  eo.n_threads = f.threads;
  eo.cpu_isa = f.isa;
  Expected<std::unique_ptr<Engine>> engine = Engine::open(eo);
  if (!engine.ok()) return fail(engine.status().message());
  {
    Expected<std::unique_ptr<Session>> probe = (*engine)->new_session(f.ctx);
    if (!probe.ok()) return fail(probe.status().message());
  }

  SchedulerOptions so;
  so.max_active = f.parallel;
  so.max_queue = f.max_queue;
  so.n_ctx = f.ctx;
  so.dspark = !f.mtp.empty();
  so.kv_memory_bytes = static_cast<uint64_t>(f.kv_memory_mb) << 20;
  if (so.dspark) {
    std::vector<float> grid;
    Status s = parse_dspark_confidence_grid(kDefaultDsparkGrid, &grid);
    if (s.ok()) s = apply_dspark_policy(f.dspark_policy, grid, kDefaultDsparkMarginGate, &so.spec);
    if (!s.ok()) return fail(s.message());
  }
  Scheduler scheduler(**engine, so);

  ServerOptions sopt;
  sopt.host = f.host;
  sopt.port = f.port;
  sopt.api_key = f.api_key;
  sopt.max_body_bytes = static_cast<size_t>(f.max_body_mb) << 20;
  sopt.read_timeout_s = f.read_timeout;
  sopt.write_timeout_s = f.write_timeout;
  sopt.http_threads = f.http_threads;
  sopt.model_name = f.model_name;
  sopt.max_tokens = f.max_tokens;
  sopt.default_thinking = f.default_thinking != 0;
  sopt.chat_page = DS4_SERVER_PAGE;
  HttpServer http(**engine, scheduler, sopt);
  std::string error;
  if (!http.bind(&error)) return fail(error);
  std::fprintf(stderr, "ds4-server: serving '%s' on http://%s:%d (context %d, %d slots, DSpark %s)\n",
               f.model_name.c_str(), f.host.c_str(), http.port(), f.ctx, so.max_active,
               so.dspark ? "on for greedy requests" : "off");
  std::fprintf(stdout, "listening on %s:%d\n", f.host.c_str(), http.port());
  std::fflush(stdout);

  std::atomic<bool> served{false};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    std::fprintf(stderr, "ds4-server: %s: draining (up to %.0f s), then exiting\n",
                 sig == SIGTERM ? "SIGTERM" : "SIGINT", f.shutdown_timeout);
    http.set_draining();
    scheduler.stop(f.shutdown_timeout);
    http.stop();
    // httplib joins its workers, and an idle keep-alive connection holds one until the read
    // timeout. Every job has ended by now and nothing is left to write to disk, so after a
    // short bound the process exits without waiting for those idle sockets.
    for (int i = 0; i < 30 && !served.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!served.load()) {
      std::fprintf(stderr, "ds4-server: idle connections still open; exiting\n");
      std::fflush(nullptr);
      std::_Exit(0);
    }
  });
  http.serve();
  served.store(true);
  waiter.join();
  std::fprintf(stderr, "ds4-server: stopped\n");
  return 0;
}

}  // namespace
}  // namespace ds4::server

int main(int argc, char** argv) { return ds4::server::main_impl(argc, argv); }
