// cli/repl.cpp — interactive chat: a `ds4>` prompt over one live session.
//
// Each turn appends only the new tokens (the previous reply's EOS, the user turn and the
// generation prefix) to the session, so the conversation's KV state is never recomputed.
// Commands: /help /think /nothink /ctx N /read FILE /quit (/exit). Ctrl+C stops the current
// reply; at the prompt, Ctrl+C twice in a row (or Ctrl+D) exits.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"

namespace ds4::cli {
namespace {

enum class ReadResult { kLine, kEof, kInterrupted };

// Reads one line from stdin with read(2) so that Ctrl+C (EINTR) is seen at the prompt.
ReadResult read_line(std::string* line) {
  line->clear();
  for (;;) {
    char c;
    const ssize_t n = ::read(STDIN_FILENO, &c, 1);
    if (n == 1) {
      if (c == '\n') return ReadResult::kLine;
      line->push_back(c);
      continue;
    }
    if (n == 0) return line->empty() ? ReadResult::kEof : ReadResult::kLine;
    if (errno == EINTR) {
      if (interrupted()) return ReadResult::kInterrupted;
      continue;
    }
    return ReadResult::kEof;
  }
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

void print_help() {
  std::printf(
      "Commands:\n"
      "  /help         this help\n"
      "  /think        thinking mode for the next replies\n"
      "  /nothink      non-thinking mode for the next replies\n"
      "  /ctx N        start a new conversation with a context of N tokens\n"
      "  /read FILE    send the file's contents as the next user message\n"
      "  /quit, /exit  leave (Ctrl+D too)\n"
      "Ctrl+C stops the current reply; Ctrl+C twice at the prompt exits.\n");
}

class Repl {
 public:
  Repl(const Options& o, Loaded& loaded)
      : options_(o),
        loaded_(loaded),
        n_ctx_(o.ctx),
        mode_(o.nothink ? ThinkMode::kNoThink : ThinkMode::kThink),
        sampler_(generate_options(o).sampler, loaded.engine->info().n_vocab),
        conv_(loaded.text->new_conversation(o.system, ThinkMode::kThink)) {
    start_conversation();
  }

  int run() {
    std::printf("ds4 interactive chat (%s, context %d tokens). /help for commands.\n",
                loaded_.engine->info().name.c_str(), n_ctx_);
    int interrupts_at_prompt = 0;
    for (;;) {
      std::printf("ds4> ");
      std::fflush(stdout);
      std::string line;
      clear_interrupt();
      const ReadResult rr = read_line(&line);
      if (rr == ReadResult::kEof) {
        std::printf("\n");
        return 0;
      }
      if (rr == ReadResult::kInterrupted) {
        if (++interrupts_at_prompt >= 2) {
          std::printf("\n");
          return 0;
        }
        std::printf("\n(press Ctrl+C again to exit, or type /quit)\n");
        continue;
      }
      interrupts_at_prompt = 0;
      line = trim(line);
      if (line.empty()) continue;
      if (line[0] == '/') {
        if (!command(line)) return 0;
        continue;
      }
      turn(line);
    }
  }

 private:
  // Returns false to quit.
  bool command(const std::string& line) {
    std::istringstream in(line);
    std::string cmd;
    in >> cmd;
    if (cmd == "/quit" || cmd == "/exit") return false;
    if (cmd == "/help") {
      print_help();
    } else if (cmd == "/think") {
      mode_ = ThinkMode::kThink;
      std::printf("thinking mode on\n");
    } else if (cmd == "/nothink") {
      mode_ = ThinkMode::kNoThink;
      std::printf("thinking mode off\n");
    } else if (cmd == "/ctx") {
      long long n = 0;
      std::string rest;
      if (!(in >> n) || (in >> rest) || n < 2 || n > (1LL << 30)) {
        std::printf("usage: /ctx N   (N >= 2 tokens)\n");
        return true;
      }
      if (Status s = replace_session(options_, loaded_, static_cast<int>(n)); !s.ok()) {
        std::printf("error: %s (keeping the current context of %d tokens)\n",
                    s.message().c_str(), n_ctx_);
        return true;
      }
      n_ctx_ = static_cast<int>(n);
      start_conversation();
      std::printf("new conversation, context %d tokens\n", n_ctx_);
    } else if (cmd == "/read") {
      std::string path;
      std::getline(in, path);
      path = trim(path);
      if (path.empty()) {
        std::printf("usage: /read FILE\n");
        return true;
      }
      std::ifstream f(path, std::ios::binary);
      if (!f) {
        std::printf("error: cannot read '%s'\n", path.c_str());
        return true;
      }
      std::ostringstream ss;
      ss << f.rdbuf();
      turn(ss.str());
    } else {
      std::printf("unknown command '%s' (/help lists them)\n", cmd.c_str());
    }
    return true;
  }

  void start_conversation() {
    loaded_.decoder.reset();
    loaded_.session->reset();
    if (Status s = attach_decoder(options_, loaded_); !s.ok()) {
      std::printf("error: %s; continuing without DSpark\n", s.message().c_str());
    }
    conv_ = loaded_.text->new_conversation(options_.system,
                                           TextCodec::think_mode_for_context(mode_, n_ctx_));
    pending_ = conv_.start();
  }

  void turn(const std::string& user_text) {
    const ThinkMode mode = TextCodec::think_mode_for_context(mode_, n_ctx_);
    std::vector<int32_t> prompt = pending_;
    std::vector<int32_t> t = conv_.user_turn(user_text, mode);
    prompt.insert(prompt.end(), t.begin(), t.end());
    if (static_cast<int64_t>(loaded_.session->n_tokens()) + static_cast<int64_t>(prompt.size()) >=
        n_ctx_) {
      std::printf("[context full: %d + %zu tokens do not fit %d; starting a new conversation "
                  "(use /ctx N for a larger context)]\n",
                  loaded_.session->n_tokens(), prompt.size(), n_ctx_);
      start_conversation();
      return;
    }

    GenerateOptions g = generate_options(options_);
    g.decoder = loaded_.decoder.get();
    g.persistent_sampler = &sampler_;
    g.cancel_prefill = [] { return interrupted(); };
    g.prefill_progress = prefill_progress(options_.verbose);
    clear_interrupt();
    set_busy(true);
    Expected<GenerateStats> r = generate(*loaded_.session, *loaded_.text, prompt, g,
                                         [](int32_t, std::string_view text) {
                                           if (!text.empty()) {
                                             std::fwrite(text.data(), 1, text.size(), stdout);
                                             std::fflush(stdout);
                                           }
                                           return !interrupted();
                                         });
    set_busy(false);
    std::printf("\n");
    if (!r.ok()) {
      std::printf("error: %s; starting a new conversation\n", r.status().message().c_str());
      start_conversation();
      return;
    }
    if (r->prefill_cancelled) {
      std::printf("[interrupted while reading the prompt; starting a new conversation]\n");
      start_conversation();
      return;
    }
    if (r->stop == StopReason::kCancelled) std::printf("[stopped]\n");
    print_stats(*r);
    if (r->stop == StopReason::kContextFull) {
      std::printf("[context full; starting a new conversation (use /ctx N for more)]\n");
      start_conversation();
      return;
    }
    // The reply's closing EOS is prefilled together with the next user turn.
    pending_ = conv_.assistant_generated(r->tokens);
  }

  const Options& options_;
  Loaded& loaded_;
  int n_ctx_;
  ThinkMode mode_;
  Sampler sampler_;
  Conversation conv_;
  std::vector<int32_t> pending_;  // tokens recorded in conv_ but not yet in the session
};

}  // namespace

int run_repl(const Options& options, Loaded& loaded) {
  Repl repl(options, loaded);
  return repl.run();
}

}  // namespace ds4::cli
