// tools/greedy-gen/main.cpp — `ds4-greedy-gen`: extends token-id prompts greedily with the
// engine (the drafter's training sequences are what the runtime will actually see).
//
// Input: --in FILE of raw little-endian int32 token ids, rows of --prompt-len tokens.
// Output: --out FILE of rows of --total-len int32 ids: the prompt, then greedy tokens (argmax
// of the full-vocabulary logits, ties -> smallest id; EOS is an ordinary token, generation
// never stops early), for rows [--first, --first + --count) of the input (count 0 = to the
// end). Every row runs in a fresh timeline of one session (reset), so a row's tokens depend
// only on its prompt: the output of several processes over disjoint row ranges concatenates
// to the output of one process over all rows (the engine is batch and thread invariant).
// Exit codes: 0 done, 1 run-time failure, 2 bad flags or input.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/flags.h"
#include "core/log.h"
#include "core/reduce.h"
#include "core/timer.h"
#include "engine/engine.h"

namespace {

using namespace ds4;

struct Options {
  std::string model;
  std::string in;
  std::string out;
  int prompt_len = 32;
  int total_len = 128;
  int64_t first = 0;
  int64_t count = 0;
  int threads = 1;
  std::string isa = "auto";
  bool quiet = false;
};

int fail(const std::string& m, int code = 1) {
  std::fprintf(stderr, "ds4-greedy-gen: error: %s\n", m.c_str());
  return code;
}

int main_impl(int argc, char** argv) {
  Options o;
  FlagTable t("ds4-greedy-gen", "ds4-greedy-gen — greedy continuations of int32 token-id prompts");
  t.option("-m,--model", &o.model, "Model GGUF file (required)", "DS4_MODEL", "FILE")
      .option("--in", &o.in, "Prompts: raw little-endian int32, rows of --prompt-len ids", "", "FILE")
      .option("--out", &o.out, "Output: raw int32 rows of --total-len ids", "", "FILE")
      .option("--prompt-len", &o.prompt_len, "Tokens per prompt row")
      .option("--total-len", &o.total_len, "Tokens per output row (prompt + greedy)")
      .option("--first", &o.first, "First input row to extend")
      .option("--count", &o.count, "Rows to extend (0 = to the end of the input)")
      .option("-t,--threads", &o.threads, "CPU threads (0 = all cores)", "DS4_THREADS")
      .option("--isa", &o.isa, "CPU kernel path: auto|scalar|avx2|avx512 (same bits on every path)",
              "DS4_CPU_ISA", "ISA")
      .flag("-q,--quiet", &o.quiet, "No progress lines");
  ParseResult pr = t.parse(argc, argv);
  if (pr.should_exit()) {
    std::fprintf(pr.kind == ParseResult::Kind::kHelp ? stdout : stderr, "%s\n", pr.message.c_str());
    return pr.exit_code;
  }
  set_log_level(LogLevel::kWarn);
  if (o.model.empty() || o.in.empty() || o.out.empty()) return fail("-m, --in and --out are required", 2);
  if (o.prompt_len < 1 || o.total_len <= o.prompt_len)
    return fail("need 1 <= --prompt-len < --total-len", 2);
  if (o.first < 0 || o.count < 0) return fail("--first and --count must be >= 0", 2);

  std::error_code ec;
  const auto bytes = std::filesystem::file_size(o.in, ec);
  if (ec) return fail("cannot read '" + o.in + "': " + ec.message(), 2);
  const uint64_t row_bytes = sizeof(int32_t) * static_cast<uint64_t>(o.prompt_len);
  if (bytes % row_bytes != 0)
    return fail("'" + o.in + "' holds " + std::to_string(bytes) + " bytes, not a multiple of " +
                    std::to_string(row_bytes) + " (--prompt-len " + std::to_string(o.prompt_len) + " int32)",
                2);
  const int64_t n_rows = static_cast<int64_t>(bytes / row_bytes);
  if (o.first > n_rows) return fail("--first is past the " + std::to_string(n_rows) + " input rows", 2);
  const int64_t n = o.count == 0 ? n_rows - o.first : std::min(o.count, n_rows - o.first);
  std::vector<int32_t> prompts(static_cast<size_t>(n) * o.prompt_len);
  {
    std::ifstream f(o.in, std::ios::binary);
    f.seekg(static_cast<std::streamoff>(o.first * row_bytes));
    f.read(reinterpret_cast<char*>(prompts.data()), static_cast<std::streamsize>(prompts.size() * sizeof(int32_t)));
    if (!f) return fail("short read from '" + o.in + "'", 2);
  }

  EngineOptions eo;
  eo.model_path = o.model;
  eo.n_threads = o.threads;
  eo.cpu_isa = o.isa;
  Expected<std::unique_ptr<Engine>> engine = Engine::open(eo);
  if (!engine.ok()) return fail(engine.status().message(), 2);
  const int n_vocab = (*engine)->info().n_vocab;
  for (int32_t id : prompts)
    if (id < 0 || id >= n_vocab)
      return fail("token id " + std::to_string(id) + " outside the vocabulary [0, " + std::to_string(n_vocab) + ")", 2);
  Expected<std::unique_ptr<Session>> session = (*engine)->new_session(o.total_len);
  if (!session.ok()) return fail(session.status().message());
  Session& s = **session;

  std::vector<int32_t> out(static_cast<size_t>(n) * o.total_len);
  Timer timer;
  for (int64_t r = 0; r < n; ++r) {
    const std::span<const int32_t> prompt(prompts.data() + r * o.prompt_len, o.prompt_len);
    int32_t* row = out.data() + r * o.total_len;
    std::copy(prompt.begin(), prompt.end(), row);
    s.reset();
    if (Status st = s.prefill(prompt); !st.ok()) return fail("row " + std::to_string(o.first + r) + ": " + st.message());
    for (int p = o.prompt_len; p < o.total_len; ++p) {
      row[p] = top_two(s.logits()).id;  // greedy: ties -> smallest id
      if (p + 1 < o.total_len) {
        if (Status st = s.decode(row[p]); !st.ok()) return fail("row " + std::to_string(o.first + r) + ": " + st.message());
      }
    }
    if (!o.quiet && ((r + 1) % 256 == 0 || r + 1 == n)) {
      const double sec = timer.seconds();
      std::fprintf(stderr, "ds4-greedy-gen: rows %lld/%lld (%.0f generated tok/s)\n", static_cast<long long>(r + 1),
                   static_cast<long long>(n), (r + 1) * double(o.total_len - o.prompt_len) / std::max(sec, 1e-9));
    }
  }
  std::ofstream f(o.out, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(int32_t)));
  if (!f) return fail("cannot write '" + o.out + "'");
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return main_impl(argc, argv); }
