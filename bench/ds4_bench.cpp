// bench/ds4_bench.cpp — `ds4-bench`: the frontier sweep (ds4-architecture.md §10.2) and the
// regression oracle for "bit-exact" changes.
//
// Loads the model once and tokenizes --prompt-file as plain text (BOS + text). For each
// frontier ctx_start, ctx_start + step (or x step_mul), ..., ctx_max it extends ONE session to
// the frontier (timing only the new tokens), hashes the frontier's full-vocabulary logits
// (SHA-256 of the little-endian float32 words, before any probe), saves an in-memory
// snapshot, greedily decodes exactly --gen-tokens tokens with EOS excluded (timed), restores
// the snapshot and continues. One CSV row per frontier:
//   ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes,logits_sha256,backend
// (backend: ModelInfo::backend, e.g. "cpu: avx512, 16 threads", quoted as a CSV field; the same
// line goes to stderr at start.)
// Invariant: logits_sha256 depends only on the model and the prompt tokens (not on the
// thread count, the frontier schedule or the probe): it is the value to compare across runs.
//
// --fill-ctx LIST (long-context timing, no prompt): for each context c, a fresh session of
// c + gen + 1 tokens is brought to c tokens by Session::fill_synthetic (counters of c decodes,
// zero KV rows: no prefill), one BOS is decoded untimed, then --gen-tokens greedy tokens are
// timed. Same CSV columns: prefill_tokens 0, kvcache_bytes = Session::state_bytes() at c,
// logits_sha256 "synthetic" (the outputs are meaningless); a c whose session does not fit
// memory gives a row with gen_tokens 0 and logits_sha256 "skipped: <needed vs free>".
#include <openssl/evp.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/flags.h"
#include "core/log.h"
#include "core/timer.h"
#include "engine/backend_flags.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/text.h"

#ifndef DS4_MODELS_DIR
#define DS4_MODELS_DIR "models"
#endif

namespace ds4::bench {
namespace {

constexpr const char* kDefaultModelName = "ds4-tiny.gguf";

struct Options {
  std::string model;
  std::string prompt_file;
  int ctx_start = 2048;
  int ctx_max = 32768;
  int step_incr = 2048;
  double step_mul = 0.0;
  int gen_tokens = 128;
  int ctx_alloc = 0;
  std::string csv;
  std::string dump_dir;
  std::string fill_ctx;          // --fill-ctx LIST ("" = the frontier sweep)
  std::vector<int> fill_list;    // parsed --fill-ctx
  BackendFlags backend;  // --backend, --device, --cpu/--cuda, -t, --isa, --f32-activations
  bool verbose = false;
};

int fail(const std::string& message) {
  std::fprintf(stderr, "ds4-bench: error: %s\n", message.c_str());
  return 1;
}

// A CSV field: in double quotes (it holds commas), inner quotes doubled.
std::string csv_quoted(const std::string& v) {
  std::string q = "\"";
  for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

// SHA-256 of the logits as little-endian float32 words, lowercase hex.
Expected<std::string> logits_sha256(std::span<const float> logits) {
  static_assert(sizeof(float) == 4);
  std::vector<unsigned char> bytes(logits.size() * 4);
  for (size_t i = 0; i < logits.size(); ++i) {
    uint32_t w = std::bit_cast<uint32_t>(logits[i]);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<unsigned char>(w >> (8 * b));
  }
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int md_len = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), md, &md_len, EVP_sha256(), nullptr) != 1) {
    return internal_error("OpenSSL SHA-256 failed");
  }
  static const char* kHex = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < md_len; ++i) {
    hex.push_back(kHex[md[i] >> 4]);
    hex.push_back(kHex[md[i] & 15]);
  }
  return hex;
}

Status dump_logits(const std::string& dir, int ctx, std::span<const float> logits) {
  char name[64];
  std::snprintf(name, sizeof(name), "frontier_%06d.logits.f32", ctx);
  const std::string path = (std::filesystem::path(dir) / name).string();
  std::ofstream out(path, std::ios::binary);
  if (!out) return resource_error("cannot write '%s'", path.c_str());
  for (float v : logits) {
    uint32_t w = std::bit_cast<uint32_t>(v);
    char le[4] = {static_cast<char>(w), static_cast<char>(w >> 8), static_cast<char>(w >> 16),
                  static_cast<char>(w >> 24)};
    out.write(le, 4);
  }
  if (!out) return resource_error("short write to '%s'", path.c_str());
  return Status();
}

// Context sizes of --fill-ctx: comma-separated positive integers, each optionally suffixed
// K (x1024) or M (x1048576); the session (c + gen + 1 tokens) must stay below 2^31.
Status parse_fill_list(const std::string& text, int gen_tokens, std::vector<int>* out) {
  out->clear();
  size_t at = 0;
  while (at <= text.size()) {
    const size_t comma = text.find(',', at);
    const std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    at = comma == std::string::npos ? text.size() + 1 : comma + 1;
    size_t digits = 0;
    while (digits < item.size() && item[digits] >= '0' && item[digits] <= '9') ++digits;
    int64_t mul = 1;
    const std::string suffix = item.substr(digits);
    if (suffix == "K" || suffix == "k") mul = 1024;
    else if (suffix == "M" || suffix == "m") mul = 1048576;
    else if (!suffix.empty()) digits = 0;
    if (digits == 0 || digits > 10) {
      return invalid_argument("--fill-ctx: '%s' is not a context size (a positive integer, optionally with K or M)",
                              item.c_str());
    }
    const int64_t c = std::stoll(item.substr(0, digits)) * mul;
    if (c < 1 || c + gen_tokens + 1 > INT32_MAX) {
      return invalid_argument("--fill-ctx: context %lld out of range (1 .. %lld with --gen-tokens %d)",
                              static_cast<long long>(c), static_cast<long long>(INT32_MAX) - gen_tokens - 1,
                              gen_tokens);
    }
    out->push_back(static_cast<int>(c));
  }
  return Status();
}

Status validate(Options& o) {
  if (!o.fill_ctx.empty()) {
    if (!o.prompt_file.empty()) return invalid_argument("--fill-ctx runs without a prompt: drop --prompt-file");
    if (!o.dump_dir.empty()) return invalid_argument("--fill-ctx has no logits to dump: drop --dump-frontier-logits-dir");
    if (o.ctx_alloc != 0) return invalid_argument("--fill-ctx sizes each session itself (c + gen-tokens + 1): drop --ctx-alloc");
    if (o.gen_tokens < 1) return invalid_argument("--fill-ctx needs --gen-tokens >= 1, got %d", o.gen_tokens);
    return parse_fill_list(o.fill_ctx, o.gen_tokens, &o.fill_list);
  }
  if (o.prompt_file.empty()) return invalid_argument("--prompt-file FILE is required (or --fill-ctx LIST)");
  if (o.ctx_start < 1) return invalid_argument("--ctx-start must be >= 1, got %d", o.ctx_start);
  if (o.ctx_max < o.ctx_start) {
    return invalid_argument("--ctx-max (%d) must be >= --ctx-start (%d)", o.ctx_max, o.ctx_start);
  }
  if (o.step_mul == 0.0 && o.step_incr < 1) {
    return invalid_argument("--step-incr must be >= 1, got %d", o.step_incr);
  }
  if (o.step_mul != 0.0 && !(o.step_mul > 1.0)) {
    return invalid_argument("--step-mul must be > 1 (or 0 for --step-incr), got %g", o.step_mul);
  }
  if (o.gen_tokens < 0) return invalid_argument("--gen-tokens must be >= 0, got %d", o.gen_tokens);
  if (o.ctx_alloc != 0 && o.ctx_alloc <= o.ctx_max + o.gen_tokens) {
    return invalid_argument("--ctx-alloc (%d) must exceed ctx-max + gen-tokens (%d)", o.ctx_alloc,
                            o.ctx_max + o.gen_tokens);
  }
  return Status();
}

std::vector<int> frontiers(const Options& o) {
  std::vector<int> out;
  int64_t f = o.ctx_start;
  while (f <= o.ctx_max) {
    out.push_back(static_cast<int>(f));
    const int64_t next = o.step_mul > 0.0 ? static_cast<int64_t>(f * o.step_mul)
                                          : f + o.step_incr;
    f = std::max(next, f + 1);
  }
  return out;
}

// The CSV stream (stdout when path is empty) with its header written; nullptr when the file
// cannot be opened.
FILE* open_csv(const std::string& path) {
  FILE* csv = path.empty() ? stdout : std::fopen(path.c_str(), "w");
  if (csv == nullptr) return nullptr;
  std::fprintf(csv, "ctx_tokens,prefill_tokens,prefill_tps,gen_tokens,gen_tps,kvcache_bytes,"
                    "logits_sha256,backend\n");
  std::fflush(csv);
  return csv;
}

// --fill-ctx: one fresh session per context, filled synthetically, then a timed greedy decode.
// A context whose session does not fit memory (kResource from new_session: needed vs free) is
// reported and skipped; any other error stops the run.
int run_fill(Engine& engine, const Options& o, FILE* csv) {
  const std::string backend = engine.info().backend;
  const TextCodec& codec = engine.text();
  GenerateOptions probe;
  probe.max_tokens = o.gen_tokens;
  probe.sampler.temperature = 0.0f;
  probe.stop_at_eos = false;  // greedy with EOS excluded: always exactly gen_tokens tokens
  for (int c : o.fill_list) {
    const int n_ctx = c + o.gen_tokens + 1;
    Expected<std::unique_ptr<Session>> made = engine.new_session(n_ctx);
    if (!made.ok()) {
      if (made.status().code() != ErrorCode::kResource) {
        return fail("session of " + std::to_string(n_ctx) + " tokens: " + made.status().message());
      }
      std::fprintf(stderr, "ds4-bench: fill-ctx %d: skipped: %s\n", c, made.status().message().c_str());
      std::fprintf(csv, "%d,0,0.00,0,0.00,0,%s,%s\n", c, csv_quoted("skipped: " + made.status().message()).c_str(),
                   csv_quoted(backend).c_str());
      std::fflush(csv);
      continue;
    }
    Session& s = **made;
    if (c > engine.info().n_ctx_train) {
      std::fprintf(stderr, "ds4-bench: fill-ctx %d: beyond the model's trained context (%d tokens): timing only\n", c,
                   engine.info().n_ctx_train);
    }
    Timer fill_timer;
    if (Status st = s.fill_synthetic(c); !st.ok()) return fail("fill to " + std::to_string(c) + ": " + st.message());
    const uint64_t kv_bytes = s.state_bytes();  // the state payload at c tokens
    if (Status st = s.decode(codec.bos()); !st.ok()) {
      return fail("decode after the fill to " + std::to_string(c) + ": " + st.message());
    }
    (void)s.greedy_next(codec.eos());  // waits for the device: the fill and the warm-up decode are done
    const double fill_s = fill_timer.seconds();
    Expected<GenerateStats> r = generate(s, codec, {}, probe, nullptr);
    if (!r.ok()) return fail("decode at fill-ctx " + std::to_string(c) + ": " + r.status().message());
    std::fprintf(stderr,
                 "ds4-bench: fill-ctx %d: fill + first decode %.2f s, %d tokens decoded at %.2f tokens/s, state "
                 "%.1f MiB (%.0f bytes/token), session %.1f MiB allocated\n",
                 c, fill_s, r->gen_tokens, r->gen_tps(), kv_bytes / 1048576.0, static_cast<double>(kv_bytes) / c,
                 engine.session_bytes(n_ctx) / 1048576.0);
    std::fprintf(csv, "%d,0,0.00,%d,%.2f,%llu,synthetic,%s\n", c, r->gen_tokens, r->gen_tps(),
                 static_cast<unsigned long long>(kv_bytes), csv_quoted(backend).c_str());
    std::fflush(csv);
  }
  return 0;
}

int main_impl(int argc, char** argv) {
  Options o;
  FlagTable t("ds4-bench", "ds4-bench — frontier sweep (prefill/decode speed, logits hashes) or --fill-ctx long-context decode timing");
  t.option("-m,--model", &o.model,
           std::string("Model GGUF file (default: ") + DS4_MODELS_DIR + "/" + kDefaultModelName +
               ")",
           "DS4_MODEL", "FILE")
      .option("--prompt-file", &o.prompt_file, "Text to tokenize (plain text, BOS prepended)", "",
              "FILE")
      .option("--ctx-start", &o.ctx_start, "First frontier in tokens")
      .option("--ctx-max", &o.ctx_max, "Last frontier in tokens")
      .option("--step-incr", &o.step_incr, "Frontier step in tokens")
      .option("--step-mul", &o.step_mul, "Multiply the frontier by F instead (0 = use --step-incr)")
      .option("--gen-tokens", &o.gen_tokens, "Greedy non-EOS tokens decoded at each frontier")
      .option("--ctx-alloc", &o.ctx_alloc, "Session context (0 = ctx-max + gen-tokens + 1)")
      .option("--csv", &o.csv, "Write the CSV here (default: stdout)", "", "FILE")
      .option("--dump-frontier-logits-dir", &o.dump_dir,
              "Write each frontier's logits as raw little-endian f32 "
              "(frontier_<ctx>.logits.f32)",
              "", "DIR")
      .option("--fill-ctx", &o.fill_ctx,
              "Long-context decode timing, instead of the frontier sweep (no prompt): for each "
              "context c in LIST (e.g. 1K,16K,128K,1M), a fresh session of c + gen-tokens + 1 "
              "tokens is filled SYNTHETICALLY to c tokens (the row counters of c decodes, zero KV "
              "rows, no prefill: seconds at any c), then --gen-tokens greedy tokens are timed. "
              "Measures decode tokens/s at context c (gen_tps) and the state bytes at c "
              "(kvcache_bytes; / c = KV bytes per token). The outputs are MEANINGLESS (logits_sha256 "
              "reads 'synthetic'); a c whose session does not fit memory gets a 'skipped: ...' row "
              "saying the bytes needed and free",
              "", "LIST")
      .flag("-v,--verbose", &o.verbose, "Verbose logging", "DS4_VERBOSE");
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

  std::error_code ec;
  std::string model = o.model.empty() ? std::string(DS4_MODELS_DIR) + "/" + kDefaultModelName
                                      : o.model;
  if (!std::filesystem::exists(model, ec)) {
    return fail("model file '" + model + "' does not exist" +
                (o.model.empty() ? " (no -m given; this is the default model)" : ""));
  }
  const bool fill = !o.fill_list.empty();
  std::string text;
  if (!fill) {  // the sweep's inputs are checked before the (slow) model load
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) return fail("cannot read prompt file '" + o.prompt_file + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    text = ss.str();
    if (!o.dump_dir.empty()) {
      std::filesystem::create_directories(o.dump_dir, ec);
      if (ec) return fail("cannot create '" + o.dump_dir + "': " + ec.message());
    }
  }

  eo.model_path = model;
  Expected<std::unique_ptr<Engine>> engine = Engine::open(eo);
  if (!engine.ok()) return fail(engine.status().message());
  const std::string backend = (*engine)->info().backend;
  std::fprintf(stderr, "%s\n", backend_line("ds4-bench", (*engine)->info()).c_str());
  if (fill) {
    FILE* csv = open_csv(o.csv);
    if (csv == nullptr) return fail("cannot write CSV file '" + o.csv + "'");
    const int rc = run_fill(**engine, o, csv);
    if (csv != stdout) std::fclose(csv);
    return rc;
  }
  const TextCodec* codec = &(*engine)->text();

  std::vector<int32_t> tokens;
  tokens.push_back(codec->bos());
  std::vector<int32_t> body = codec->tokenize(text);
  tokens.insert(tokens.end(), body.begin(), body.end());
  if (static_cast<int64_t>(tokens.size()) < o.ctx_max) {
    return fail("prompt file '" + o.prompt_file + "' gives " + std::to_string(tokens.size()) +
                " tokens; --ctx-max " + std::to_string(o.ctx_max) + " needs at least that many");
  }
  const int ctx_alloc = o.ctx_alloc != 0 ? o.ctx_alloc : o.ctx_max + o.gen_tokens + 1;
  Expected<std::unique_ptr<Session>> session = (*engine)->new_session(ctx_alloc);
  if (!session.ok()) return fail(session.status().message());
  Session& s = **session;

  FILE* csv = open_csv(o.csv);
  if (csv == nullptr) return fail("cannot write CSV file '" + o.csv + "'");

  GenerateOptions probe;
  probe.max_tokens = o.gen_tokens;
  probe.sampler.temperature = 0.0f;
  probe.stop_at_eos = false;  // greedy with EOS excluded: always exactly gen_tokens tokens

  int rc = 0;
  for (int frontier : frontiers(o)) {
    const int have = s.n_tokens();
    std::span<const int32_t> fresh(tokens.data() + have, static_cast<size_t>(frontier - have));
    // Prefill only the new interval, timed (generate() with a zero budget = prefill only).
    GenerateOptions pre;
    pre.max_tokens = 0;
    Expected<GenerateStats> p = generate(s, *codec, fresh, pre, nullptr);
    if (!p.ok()) {
      rc = fail("prefill to frontier " + std::to_string(frontier) + ": " + p.status().message());
      break;
    }
    std::span<const float> logits = s.logits();
    Expected<std::string> sha = logits_sha256(logits);
    if (!sha.ok()) {
      rc = fail(sha.status().message());
      break;
    }
    if (!o.dump_dir.empty()) {
      if (Status st = dump_logits(o.dump_dir, frontier, logits); !st.ok()) {
        rc = fail(st.message());
        break;
      }
    }
    const uint64_t kv_bytes = s.state_bytes();

    GenerateStats g;
    if (o.gen_tokens > 0) {
      if (Status st = s.save_snapshot(); !st.ok()) {
        rc = fail("snapshot at frontier " + std::to_string(frontier) + ": " + st.message());
        break;
      }
      // -v: the greedy ids on stderr, so two backends' runs can be compared token by token.
      std::string ids;
      const TokenCallback keep = [&ids](int32_t id, std::string_view) {
        ids += (ids.empty() ? "" : " ") + std::to_string(id);
        return true;
      };
      Expected<GenerateStats> r = generate(s, *codec, {}, probe, o.verbose ? keep : TokenCallback{});
      if (r.ok() && o.verbose) std::fprintf(stderr, "ds4-bench: frontier %d greedy tokens: %s\n", frontier, ids.c_str());
      if (!r.ok()) {
        rc = fail("probe at frontier " + std::to_string(frontier) + ": " + r.status().message());
        break;
      }
      g = std::move(r).value();
      if (Status st = s.restore_snapshot(); !st.ok()) {
        rc = fail("restore at frontier " + std::to_string(frontier) + ": " + st.message());
        break;
      }
    }
    std::fprintf(csv, "%d,%d,%.2f,%d,%.2f,%llu,%s,%s\n", frontier, p->prompt_tokens,
                 p->prefill_tps(), g.gen_tokens, g.gen_tps(),
                 static_cast<unsigned long long>(kv_bytes), sha->c_str(), csv_quoted(backend).c_str());
    std::fflush(csv);
  }
  if (csv != stdout) std::fclose(csv);
  return rc;
}

}  // namespace
}  // namespace ds4::bench

int main(int argc, char** argv) { return ds4::bench::main_impl(argc, argv); }
