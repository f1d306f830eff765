// cli/common.cpp — SIGINT state, sampler options from flags, speed report, prefill progress.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <memory>

#include "cli/cli.h"
#include "core/timer.h"

namespace ds4::cli {

namespace {

volatile std::sig_atomic_t g_interrupts = 0;  // Ctrl+C presses since the last clear
volatile std::sig_atomic_t g_busy = 0;

void on_sigint(int) {
  g_interrupts = g_interrupts + 1;
  if (g_busy && g_interrupts >= 2) {
    const char msg[] = "\n[interrupted twice: exiting]\n";
    ssize_t ignored = ::write(STDERR_FILENO, msg, sizeof(msg) - 1);
    (void)ignored;
    ::_exit(130);
  }
}

}  // namespace

void install_sigint_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: a blocking read at the prompt returns EINTR
  sigaction(SIGINT, &sa, nullptr);
}

bool interrupted() { return g_interrupts > 0; }
void clear_interrupt() { g_interrupts = 0; }
void set_busy(bool busy) { g_busy = busy ? 1 : 0; }

GenerateOptions generate_options(const Options& o) {
  GenerateOptions g;
  g.max_tokens = o.tokens;
  g.sampler.temperature = o.temp;
  g.sampler.top_k = o.top_k;
  g.sampler.top_p = o.top_p;
  g.sampler.min_p = o.min_p;
  g.sampler.seed = o.seed;
  g.stop_at_eos = true;
  return g;
}

void print_stats(const GenerateStats& s) {
  std::fprintf(stderr, "prefill: %d tokens, %.2f t/s, generation: %d tokens, %.2f t/s (%s)\n",
               s.prompt_tokens, s.prefill_tps(), s.gen_tokens, s.gen_tps(),
               stop_reason_name(s.stop));
}

ProgressFn prefill_progress(bool verbose) {
  if (!verbose && !::isatty(STDERR_FILENO)) return {};
  // Shown only for long prompts; redrawn at most every ~100 ms.
  auto timer = std::make_shared<Timer>();
  auto last = std::make_shared<double>(-1.0);
  return [timer, last](int done, int total) {
    if (total < 256) return;
    const double now = timer->seconds();
    if (done < total && now - *last < 0.1) return;
    *last = now;
    std::fprintf(stderr, "\rprefill %d/%d tokens (%d%%)%s", done, total,
                 total > 0 ? static_cast<int>(100.0 * done / total) : 100,
                 done >= total ? "\n" : "");
    std::fflush(stderr);
  };
}

Status attach_decoder(const Options& o, Loaded& loaded) {
  loaded.decoder.reset();  // unbinds from the old session first (it holds a capture hook)
  if (!o.dspark.enabled) return Status();
  DS4_ASSIGN_OR_RETURN(SpecOptions so, dspark_options(o.dspark));
  DS4_ASSIGN_OR_RETURN(loaded.decoder,
                       new_speculative_decoder(*loaded.engine, *loaded.session, so));
  return Status();
}

Status replace_session(const Options& o, Loaded& loaded, int n_ctx) {
  DS4_ASSIGN_OR_RETURN(std::unique_ptr<Session> fresh, loaded.engine->new_session(n_ctx));
  loaded.decoder.reset();
  loaded.session = std::move(fresh);
  return attach_decoder(o, loaded);
}

}  // namespace ds4::cli
