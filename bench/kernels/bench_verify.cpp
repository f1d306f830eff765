// bench/kernels/bench_verify.cpp — verify(r)/decode(1) cost curve of the whole forward pass on a
// generated tiny model, plus a per-op time split (issue #6 performance).
//
// Role: generates (or opens) a tiny DS4 model, prefills a fixed prompt, then times, side by
// side in interleaved rounds, decode(1) and verify(r) for r = 1..8 from the same frontier
// (checkpoint before, rollback after each call), and prints the best and median time of each
// and verify(r)/decode(1). --profile adds a per-op split for decode(1) and verify(--profile_r)
// measured through a timing decorator around the CPU backend (the library hot paths carry no
// timers). Flags: --model=PATH (default: generate tiny q2, seed 1234, random blocks, into
// /tmp), --quant=q2|q4, --threads=N (default 2), --ctx=N prompt tokens (default 96),
// --rounds=N (default 15), --isa=scalar|avx2|avx512, --profile, --profile_r=R (default 6),
// --csv, --only_r=R (0 = decode) with --only_calls=N (default 200): time only that call, N
// times (for an external profiler such as perf). --drafter=PATH (a DSpark support file for
// --model) adds a full proposal (block_size drafts, no confidence stop, the ring filled with
// fixed pseudo-random hidden rows) to the timing table and, with --profile, its per-op split. Timing is wall time (best of the rounds is
// the figure least disturbed by a shared machine); with --threads=1 it is this thread's CPU
// time. --backend=cuda [--device=N] runs on the GPU (wall time; every timed call ends with a
// backend sync), e.g. on a full-shape Flash file (--model); --cuda_profile turns on the op
// profiler there (backend/op_profile.h; report on stderr at exit); --cuda_moe=new|tc|old picks the
// routed-expert kernels there (ds4's --cuda-moe, default new), --cuda_pdl=1|0 the programmatic
// dependent launch (default on), --cuda_lanes=1|0 the two-stream lanes (ds4's --cuda-lanes,
// default on). --ab=CFG;CFG;... times decode(1) and verify(--ab_r, default 6) under each
// configuration of the process-wide switches, in interleaved rounds on ONE loaded model (no
// reload between configurations): a CFG is base or names joined by '+' (no_lanes, fold_post,
// products, fold_norm, persistent, no_pdl_all, no_fuse_norms, moe_tc), applied over the command line's
// options; it prints each one's best and median, the ratio to the first, and whether its
// logits are the first's bits. --csv_out=FILE writes
// r,call,best_ms,median_ms,bytes (r = 0: decode(1)), bytes = what one call reads and writes by
// backend/op_profile.h's op costs, counted in one untimed pass (routed experts: the distinct
// experts of the call, read back). --only_r takes a list (--only_r=0,6). Nothing here is a test.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/op_profile.h"
#include "backend/registry.h"
#include "core/threadpool.h"
#include "core/timer.h"
#include "backend/cpu/kernels.h"
#include "gguf/types.h"
#include "model/model.h"
#include "model/profiles.h"
#include "session/session.h"
#include "session/state.h"
#include "speculative/drafter.h"
#include "tools/ds4-gguf/ds4_gguf.h"

namespace {

using namespace ds4;  // NOLINT: benchmark program
namespace cpu = ds4::backend::cpu;

// Wall time, or this thread's CPU time when g_cpu_clock (--threads=1: robust on a shared,
// oversubscribed machine, where wall time mostly measures other people's jobs).
bool g_cpu_clock = false;
double now_s() {
  if (g_cpu_clock) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Per-op wall time, keyed by op name (matmuls by weight type and shape).
class TimingBackend final : public backend::ForwardingBackend {
 public:
  explicit TimingBackend(backend::Backend& inner) : ForwardingBackend(inner), in_(inner) {}
  const char* name() const override { return "timing"; }
  int n_threads() const override { return in_.n_threads(); }

  void matmul(const backend::MatmulParams& p) override {
    char key[96];
    std::snprintf(key, sizeof key, "matmul %s %lldx%lld", gguf::type_name(p.w.type),
                  static_cast<long long>(p.w.n_in), static_cast<long long>(p.w.n_out));
    timed(key, [&] { in_.matmul(p); });
  }
  void matmul_grouped(const backend::MatmulParams* p, int n) override {
    char key[96];
    backend::format_matmul_grouped_key(key, sizeof key, p, n);
    timed(key, [&] { in_.matmul_grouped(p, n); });
  }
  void rms_norm(const backend::RmsNormParams& p) override { timed("rms_norm", [&] { in_.rms_norm(p); }); }
  void hc_pre(const backend::HcPreParams& p) override { timed("hc_pre", [&] { in_.hc_pre(p); }); }
  void hc_post(const backend::HcPostParams& p) override { timed("hc_post", [&] { in_.hc_post(p); }); }
  void attention_inputs(const backend::AttentionInputsParams& p) override {
    timed("attention_inputs", [&] { in_.attention_inputs(p); });
  }
  void compressor_step(const backend::CompressorStepParams& p) override {
    timed("compressor_step", [&] { in_.compressor_step(p); });
  }
  void indexer_select(const backend::IndexerSelectParams* p, int n) override {
    timed("indexer_select", [&] { in_.indexer_select(p, n); });
  }
  void sink_attention(const backend::SinkAttentionParams* p, int n) override {
    timed("sink_attention", [&] { in_.sink_attention(p, n); });
  }
  void swiglu(const backend::SwigluParams& p) override { timed("swiglu", [&] { in_.swiglu(p); }); }
  void route(const backend::RouteParams& p) override { timed("route", [&] { in_.route(p); }); }
  void moe(const backend::MoeParams& p) override {
    char key[64];
    std::snprintf(key, sizeof key, "moe %s/%s", gguf::type_name(p.gate.type), gguf::type_name(p.down.type));
    timed(key, [&] { in_.moe(p); });
  }
  void hc_collapse(const backend::HcCollapseParams& p) override {
    timed("hc_collapse", [&] { in_.hc_collapse(p); });
  }

  void reset() {
    acc_.clear();
    jobs_.clear();
  }
  const std::map<std::string, std::pair<double, long>>& acc() const { return acc_; }
  // Pool jobs published inside each op (ThreadPool::published_jobs deltas), by op name.
  const std::map<std::string, uint64_t>& jobs() const { return jobs_; }

 private:
  template <typename F>
  void timed(const std::string& key, F&& f) {
    const uint64_t j0 = ThreadPool::published_jobs();
    const double t0 = now_s();
    f();
    auto& a = acc_[key];
    a.first += now_s() - t0;
    a.second += 1;
    jobs_[key] += ThreadPool::published_jobs() - j0;
  }
  backend::Backend& in_;
  std::map<std::string, std::pair<double, long>> acc_;
  std::map<std::string, uint64_t> jobs_;
};

// Bytes moved by the ops while `on` (backend/op_profile.h op costs), routed experts counted
// by their distinct ids (read back: a sync per moe, so only for an untimed pass).
class CountingBackend final : public backend::ForwardingBackend {
 public:
  explicit CountingBackend(backend::Backend& inner) : ForwardingBackend(inner) {}
  bool on = false;
  double bytes = 0;

  // The timed calls run through this wrapper: the lanes reach the backend (--cuda_lanes). The
  // counting pass's moe read-back comes after each fork's join.
  void fork() override { inner_.fork(); }
  void to_main() override { inner_.to_main(); }
  void join() override { inner_.join(); }

  void matmul(const backend::MatmulParams& p) override { count(backend::op_cost(p)); inner_.matmul(p); }
  void matmul_grouped(const backend::MatmulParams* p, int n) override {
    count(backend::op_cost(p, n)); inner_.matmul_grouped(p, n);
  }
  void rms_norm(const backend::RmsNormParams& p) override { count(backend::op_cost(p)); inner_.rms_norm(p); }
  void hc_pre(const backend::HcPreParams& p) override { count(backend::op_cost(p)); inner_.hc_pre(p); }
  void hc_post(const backend::HcPostParams& p) override { count(backend::op_cost(p)); inner_.hc_post(p); }
  void attention_inputs(const backend::AttentionInputsParams& p) override {
    count(backend::op_cost(p)); inner_.attention_inputs(p);
  }
  void compressor_step(const backend::CompressorStepParams& p) override {
    count(backend::op_cost(p)); inner_.compressor_step(p);
  }
  void indexer_select(const backend::IndexerSelectParams* p, int n) override {
    count(backend::op_cost(p, n)); inner_.indexer_select(p, n);
  }
  void sink_attention(const backend::SinkAttentionParams* p, int n) override {
    count(backend::op_cost(p, n)); inner_.sink_attention(p, n);
  }
  void swiglu(const backend::SwigluParams& p) override { count(backend::op_cost(p)); inner_.swiglu(p); }
  void route(const backend::RouteParams& p) override { count(backend::op_cost(p)); inner_.route(p); }
  void moe(const backend::MoeParams& p) override {
    if (on) {
      std::vector<int32_t> sel(static_cast<size_t>(p.n_rows) * p.n_used);
      inner_.download(sel.data(), p.sel, sel.size() * sizeof(int32_t));
      std::sort(sel.begin(), sel.end());
      count(backend::op_cost(p, static_cast<int>(std::unique(sel.begin(), sel.end()) - sel.begin())));
    }
    inner_.moe(p);
  }
  void hc_collapse(const backend::HcCollapseParams& p) override { count(backend::op_cost(p)); inner_.hc_collapse(p); }
  void embed(const backend::EmbedParams& p) override { count(backend::op_cost(p)); inner_.embed(p); }
  void add(const backend::AddParams& p) override { count(backend::op_cost(p)); inner_.add(p); }
  void hc_mean(const backend::HcMeanParams& p) override { count(backend::op_cost(p)); inner_.hc_mean(p); }
  void argmax(const backend::ArgmaxParams& p) override { count(backend::op_cost(p)); inner_.argmax(p); }
  void get_rows(const backend::GetRowsParams& p) override { count(backend::op_cost(p)); inner_.get_rows(p); }

 private:
  void count(backend::OpCost c) {
    if (on) bytes += static_cast<double>(c.bytes);
  }
};

std::vector<int32_t> tokens(int n, uint32_t n_vocab, uint64_t seed) {
  std::vector<int32_t> t(n);
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (int i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t[i] = static_cast<int32_t>(x % n_vocab);
  }
  return t;
}

int die(const char* what, const Status& st) {
  std::fprintf(stderr, "bench_verify: %s: %s\n", what, st.to_string().c_str());
  return 1;
}

// --ab's switch names: each sets one field of the backend options.
struct AbSwitch {
  const char* name;
  void (*apply)(backend::BackendOptions*);
};
constexpr AbSwitch kAbSwitches[] = {
    {"no_lanes", [](backend::BackendOptions* o) { o->cuda_lanes = false; }},
    {"fold_post", [](backend::BackendOptions* o) { o->cuda_fold_hc_post = true; }},
    {"products", [](backend::BackendOptions* o) { o->cuda_hc_products = true; }},
    {"fold_norm", [](backend::BackendOptions* o) { o->cuda_fold_input_norm = true; }},
    {"persistent", [](backend::BackendOptions* o) { o->cuda_wide_persistent = true; }},
    {"no_pdl_all", [](backend::BackendOptions* o) { o->cuda_pdl_all = false; }},
    {"no_fuse_norms", [](backend::BackendOptions* o) { o->cuda_fuse_norms = false; }},
    {"moe_tc", [](backend::BackendOptions* o) { o->cuda_moe = "tc"; }},
};

// Splits s at sep (empty pieces kept).
std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t k = s.find(sep); k != std::string::npos; k = s.find(sep, at)) {
    out.push_back(s.substr(at, k - at));
    at = k + 1;
  }
  out.push_back(s.substr(at));
  return out;
}

// One timed call from the checkpointed frontier: r == 0 is decode(1), else verify(r). The
// backend sync ends the timed span on a device backend (decode reads nothing back) and keeps
// the rollback's copies out of the next call's time.
double timed_call(session::ModelSession& s, backend::Backend& be, int r, const std::vector<int32_t>& rows) {
  const double t0 = now_s();
  if (r == 0) {
    (void)s.decode(rows[0]);
  } else {
    (void)s.verify(std::span<const int32_t>(rows.data(), r));
  }
  be.sync();
  const double t = now_s() - t0;
  s.rollback();
  be.sync();
  return t;
}

// --ab: each configuration's options (`base` plus its switches), applied between calls of one
// live session; rounds interleaved with a rotating first configuration; then the table.
int run_ab(const std::string& spec, int ab_r, int rounds, const std::string& backend_name,
           const backend::BackendOptions& base, session::ModelSession& s, backend::Backend& be,
           const std::vector<int32_t>& rows) {
  struct Config {
    std::string name;
    backend::BackendOptions o;
    std::vector<double> dec, ver;
    std::vector<float> logits;
  };
  std::vector<Config> cfgs;
  for (const std::string& name : split(spec, ';')) {
    if (name.empty()) continue;
    Config c{name, base, {}, {}, {}};
    if (name != "base") {
      for (const std::string& sw : split(name, '+')) {
        const AbSwitch* hit = nullptr;
        for (const AbSwitch& k : kAbSwitches) hit = sw == k.name ? &k : hit;
        if (hit == nullptr) {
          std::string known = "base";
          for (const AbSwitch& k : kAbSwitches) known += std::string(", ") + k.name;
          return die("--ab", invalid_argument("unknown switch '%s' (known: %s)", sw.c_str(), known.c_str()));
        }
        hit->apply(&c.o);
      }
    }
    if (Status st = backend::apply_backend_switches(backend_name, c.o); !st.ok()) return die("--ab", st);
    cfgs.push_back(std::move(c));
  }
  if (cfgs.empty()) return die("--ab", invalid_argument("no configuration in '%s'", spec.c_str()));
  // Each configuration's logits of one decode (its bits against the first's), and a warm-up.
  for (Config& c : cfgs) {
    (void)backend::apply_backend_switches(backend_name, c.o);
    (void)s.decode(rows[0]);
    c.logits.assign(s.logits().begin(), s.logits().end());
    s.rollback();
    timed_call(s, be, ab_r, rows);
  }
  const int n = static_cast<int>(cfgs.size());
  for (int round = 0; round < rounds; ++round) {
    for (int j = 0; j < n; ++j) {
      Config& c = cfgs[(round + j) % n];
      (void)backend::apply_backend_switches(backend_name, c.o);
      c.dec.push_back(timed_call(s, be, 0, rows));
      c.ver.push_back(timed_call(s, be, ab_r, rows));
    }
  }
  (void)backend::apply_backend_switches(backend_name, base);
  std::printf("bench_verify --ab: backend %s, %d rounds, decode(1) and verify(%d) per round and configuration\n",
              be.description().c_str(), rounds, ab_r);
  std::printf("%-44s %10s %10s %9s %10s %10s %9s %s\n", "config", "dec_best", "dec_med", "tok/s", "ratio_med",
              "ver_med", "ratio_med", "bits");
  const double d0 = median_of(cfgs[0].dec), v0 = median_of(cfgs[0].ver);
  bool all_same = true;
  for (const Config& c : cfgs) {
    const bool same = c.logits.size() == cfgs[0].logits.size() &&
                      std::memcmp(c.logits.data(), cfgs[0].logits.data(), c.logits.size() * sizeof(float)) == 0;
    all_same = all_same && same;
    const double dm = median_of(c.dec), vm = median_of(c.ver);
    std::printf("%-44s %10.3f %10.3f %9.1f %10.3f %10.3f %9.3f %s\n", c.name.c_str(),
                *std::min_element(c.dec.begin(), c.dec.end()) * 1e3, dm * 1e3, 1.0 / dm, dm / d0, vm * 1e3, vm / v0,
                same ? "same" : "DIFFERENT");
  }
  return all_same ? 0 : 3;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, drafter_path, backend_name = "cpu", csv_out, cuda_moe = "new";
  int device = 0;
  bool cuda_profile = false, cuda_pdl = true, cuda_lanes = true;
  std::string ab;
  int ab_r = 6;
  std::vector<int> only_list;
  model::ExpertQuant quant = model::ExpertQuant::kQ2;
  int threads = 2, ctx = 96, rounds = 15, profile_r = 6, only_r = -1, only_calls = 200;
  bool profile = false, csv = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&](const char* pfx) { return a.substr(std::string(pfx).size()); };
    if (a.rfind("--model=", 0) == 0) {
      model_path = val("--model=");
    } else if (a.rfind("--drafter=", 0) == 0) {
      drafter_path = val("--drafter=");
    } else if (a == "--quant=q4") {
      quant = model::ExpertQuant::kQ4;
    } else if (a == "--quant=q2") {
      quant = model::ExpertQuant::kQ2;
    } else if (a.rfind("--threads=", 0) == 0) {
      threads = std::max(1, std::atoi(val("--threads=").c_str()));
    } else if (a.rfind("--ctx=", 0) == 0) {
      ctx = std::max(1, std::atoi(val("--ctx=").c_str()));
    } else if (a.rfind("--rounds=", 0) == 0) {
      rounds = std::max(1, std::atoi(val("--rounds=").c_str()));
    } else if (a.rfind("--profile_r=", 0) == 0) {
      profile_r = std::clamp(std::atoi(val("--profile_r=").c_str()), 1, session::kMaxBatchRows);
      profile = true;
    } else if (a == "--profile") {
      profile = true;
    } else if (a.rfind("--only_r=", 0) == 0) {
      const std::string list = val("--only_r=");
      for (size_t at = 0; at <= list.size();) {
        const size_t comma = std::min(list.find(',', at), list.size());
        only_list.push_back(std::clamp(std::atoi(list.substr(at, comma - at).c_str()), 0, session::kMaxBatchRows));
        at = comma + 1;
      }
      only_r = only_list.front();
    } else if (a.rfind("--backend=", 0) == 0) {
      backend_name = val("--backend=");
    } else if (a.rfind("--device=", 0) == 0) {
      device = std::atoi(val("--device=").c_str());
    } else if (a == "--cuda_pdl" || a == "--cuda_pdl=1") {
      cuda_pdl = true;
    } else if (a == "--cuda_pdl=0") {
      cuda_pdl = false;
    } else if (a == "--cuda_lanes" || a == "--cuda_lanes=1") {
      cuda_lanes = true;
    } else if (a == "--cuda_lanes=0") {
      cuda_lanes = false;
    } else if (a.rfind("--ab=", 0) == 0) {
      ab = val("--ab=");
    } else if (a.rfind("--ab_r=", 0) == 0) {
      ab_r = std::clamp(std::atoi(val("--ab_r=").c_str()), 1, session::kMaxBatchRows);
    } else if (a.rfind("--cuda_moe=", 0) == 0) {
      cuda_moe = val("--cuda_moe=");
    } else if (a == "--cuda_profile") {
      cuda_profile = true;
    } else if (a.rfind("--csv_out=", 0) == 0) {
      csv_out = val("--csv_out=");
    } else if (a.rfind("--only_calls=", 0) == 0) {
      only_calls = std::max(1, std::atoi(val("--only_calls=").c_str()));
    } else if (a == "--csv") {
      csv = true;
    } else if (a.rfind("--isa=", 0) == 0) {
      cpu::Isa isa;
      if (!cpu::parse_isa(val("--isa="), &isa) || !cpu::set_isa(isa)) {
        std::fprintf(stderr, "bench_verify: ISA '%s' unknown or unsupported here\n", val("--isa=").c_str());
        return 2;
      }
    } else {
      std::fprintf(stderr, "bench_verify: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  const bool on_cpu = backend_name == "cpu";
  if (!on_cpu && profile) {
    std::fprintf(stderr, "bench_verify: --profile times ops on the host (CPU backend); on %s use --cuda_profile\n",
                 backend_name.c_str());
    return 2;
  }
  g_cpu_clock = threads == 1 && on_cpu;
  if (model_path.empty()) {
    model_path = "/tmp/ds4_bench_verify_tiny_" + std::string(model::expert_quant_name(quant)) + "_" +
                 std::to_string(::getpid()) + ".gguf";
    tools::GenerateOptions opt;
    opt.quant = quant;
    opt.seed = 1234;
    opt.fill = tools::FillMode::kRandomBlocks;
    const Status st = tools::generate_model(model::tiny_profile(), opt, model_path);
    if (!st.ok()) return die("generate", st);
  }
  auto m = model::Model::open(model_path);
  if (!m.ok()) return die("open model", m.status());
  const auto& model = *m.value();
  const auto& cfg = model.config();
  backend::BackendOptions bo;
  bo.n_threads = threads;
  bo.device = device;
  bo.cuda_profile = cuda_profile;
  bo.cuda_moe = cuda_moe;
  bo.cuda_pdl = cuda_pdl;
  bo.cuda_lanes = cuda_lanes;
  auto be_or = backend::make_backend(backend_name, bo);
  if (!be_or.ok()) return die("backend", be_or.status());
  std::unique_ptr<backend::Backend> cpu_be = std::move(be_or).value();  // the CPU unless --backend
  TimingBackend tbe(*cpu_be);
  CountingBackend cbe(*cpu_be);

  const int64_t n_ctx = ctx + 2 * session::kMaxBatchRows + 8;
  // Memory by the session's own formulas (what the engine checks free memory against): the
  // state (KV caches, compressor states), the rest of the session (the forward's scratch, the
  // frontier copies of verify rows and the checkpoint, the logits) and the whole, for a few
  // contexts; the weights are the file's bytes (holes of a sparse file included: the device
  // copy holds them as zeros).
  std::printf("memory: weights_bytes=%llu\n", static_cast<unsigned long long>(model.file().file_size()));
  std::vector<int64_t> mem_ctx = {1024, n_ctx, 8192, 65536, static_cast<int64_t>(cfg.context_length)};
  std::sort(mem_ctx.begin(), mem_ctx.end());
  mem_ctx.erase(std::unique(mem_ctx.begin(), mem_ctx.end()), mem_ctx.end());
  for (int64_t c : mem_ctx) {
    const uint64_t state = session::State::estimate_bytes(cfg, c);
    const uint64_t all = session::ModelSession::estimate_bytes(cfg, c);
    std::printf("memory: ctx=%lld state_bytes=%llu state_bytes_per_token=%.0f scratch_bytes=%llu session_bytes=%llu"
                "\n",
                static_cast<long long>(c), static_cast<unsigned long long>(state),
                static_cast<double>(state) / static_cast<double>(c),
                static_cast<unsigned long long>(all - state), static_cast<unsigned long long>(all));
  }
  auto s_or = session::ModelSession::create(model, cbe, n_ctx, uint64_t{1} << 34);
  if (!s_or.ok()) return die("session", s_or.status());
  auto& s = *s_or.value();
  const auto prompt = tokens(ctx, cfg.n_vocab, 99);
  if (Status st = s.prefill(prompt); !st.ok()) return die("prefill", st);
  s.checkpoint();
  const auto rows = tokens(session::kMaxBatchRows, cfg.n_vocab, 7);

  if (!ab.empty()) {
    const int code = run_ab(ab, ab_r, rounds, backend_name, bo, s, cbe, rows);
    if (model_path.rfind("/tmp/ds4_bench_verify_tiny_", 0) == 0) std::remove(model_path.c_str());
    return code;
  }

  if (only_r >= 0) {
    // Only these call kinds, each repeated (for an external profiler such as perf, or
    // --cuda_profile, whose report separates decode from verify(r) by the rows per forward).
    for (int r_only : only_list) {
      std::vector<double> tt;
      for (int i = 0; i < only_calls; ++i) tt.push_back(timed_call(s, cbe, r_only, rows));
      std::printf("only %s: best %.3f ms, median %.3f ms (%d calls)\n",
                  r_only == 0 ? "decode(1)" : ("verify(" + std::to_string(r_only) + ")").c_str(),
                  *std::min_element(tt.begin(), tt.end()) * 1e3, median_of(tt) * 1e3, only_calls);
    }
    if (model_path.rfind("/tmp/ds4_bench_verify_tiny_", 0) == 0) std::remove(model_path.c_str());
    return 0;
  }

  constexpr int kR = session::kMaxBatchRows;
  std::vector<std::vector<double>> t(kR + 1);
  for (int r = 0; r <= kR; ++r) timed_call(s, cbe, r, rows);  // warm-up
  // Interleaved rounds; the starting r rotates so every r follows every other equally often
  // (the previous call's cache footprint would otherwise favour some r).
  for (int round = 0; round < rounds; ++round)
    for (int j = 0; j <= kR; ++j) {
      const int r = (round + j) % (kR + 1);
      t[r].push_back(timed_call(s, cbe, r, rows));
    }

  std::printf("bench_verify: model %s (%s), backend %s, isa=%s, threads=%d (%s), ctx=%d, rounds=%d\n",
              model_path.c_str(), cfg.name.c_str(), cpu_be->description().c_str(), cpu::isa_name(cpu::active_isa()),
              threads, g_cpu_clock ? "thread CPU time" : "wall time", ctx, rounds);
  const double d_best = *std::min_element(t[0].begin(), t[0].end());
  const double d_med = median_of(t[0]);
  std::printf("decode(1): best %.3f ms (%.1f tok/s), median %.3f ms (%.1f tok/s)\n", d_best * 1e3, 1.0 / d_best,
              d_med * 1e3, 1.0 / d_med);
  std::printf("%4s %10s %10s %12s %12s\n", "r", "best_ms", "median_ms", "ratio_best", "ratio_median");
  std::string line = "csv: " + std::string(cpu::isa_name(cpu::active_isa())) + "," + std::to_string(threads) + "," +
                     std::to_string(d_best * 1e3);
  for (int r = 1; r <= kR; ++r) {
    const double b = *std::min_element(t[r].begin(), t[r].end());
    const double md = median_of(t[r]);
    std::printf("%4d %10.3f %10.3f %12.2f %12.2f\n", r, b * 1e3, md * 1e3, b / d_best, md / d_med);
    line += "," + std::to_string(b / d_best);
  }
  if (csv) std::printf("csv: isa,threads,decode1_ms,ratio_r1..r8\n%s\n", line.c_str());
  if (!csv_out.empty()) {
    // Bytes per call: one untimed, counted call of each kind.
    std::vector<double> bytes(kR + 1);
    cbe.on = true;
    for (int r = 0; r <= kR; ++r) {
      cbe.bytes = 0;
      timed_call(s, cbe, r, rows);
      bytes[r] = cbe.bytes;
    }
    cbe.on = false;
    FILE* f = std::fopen(csv_out.c_str(), "w");
    if (f == nullptr) return die("csv", resource_error("cannot write %s", csv_out.c_str()));
    std::fprintf(f, "r,call,best_ms,median_ms,bytes\n");
    for (int r = 0; r <= kR; ++r) {
      std::fprintf(f, "%d,%s,%.4f,%.4f,%.0f\n", r, r == 0 ? "decode" : "verify",
                   *std::min_element(t[r].begin(), t[r].end()) * 1e3, median_of(t[r]) * 1e3, bytes[r]);
    }
    std::fclose(f);
    std::printf("bytes per call: decode(1) %.1f MB, verify(%d) %.1f MB (%s)\n", bytes[0] / 1e6, kR, bytes[kR] / 1e6,
                csv_out.c_str());
  }

  // Per-op split of `reps` calls of f through the timing backend.
  auto print_profile = [&](const std::string& what, int reps, const std::function<double()>& f) {
    for (int i = 0; i < 3; ++i) f();
    tbe.reset();
    double total = 0.0;
    for (int i = 0; i < reps; ++i) total += f();
    std::vector<std::pair<std::string, std::pair<double, long>>> ops(tbe.acc().begin(), tbe.acc().end());
    std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
    double in_ops = 0.0;
    for (const auto& o : ops) in_ops += o.second.first;
    std::printf("\nprofile %s: %.3f ms per call (%d calls), %.1f%% inside backend ops\n", what.c_str(),
                total / reps * 1e3, reps, 100.0 * in_ops / total);
    std::printf("  %-36s %10s %8s %10s %10s %8s\n", "op", "ms/call", "share", "ops/call", "jobs/call", "us/op");
    uint64_t all_jobs = 0;
    for (const auto& o : ops) {
      const uint64_t jobs = tbe.jobs().at(o.first);
      all_jobs += jobs;
      std::printf("  %-36s %10.4f %7.1f%% %10.1f %10.1f %8.2f\n", o.first.c_str(), o.second.first / reps * 1e3,
                  100.0 * o.second.first / total, static_cast<double>(o.second.second) / reps,
                  static_cast<double>(jobs) / reps, o.second.first / static_cast<double>(o.second.second) * 1e6);
    }
    std::printf("  pool jobs per call: %.1f\n", static_cast<double>(all_jobs) / reps);
  };
  const int reps = std::max(rounds, 5);

  if (profile) {
    auto ps_or = session::ModelSession::create(model, tbe, n_ctx, uint64_t{1} << 34);
    if (!ps_or.ok()) return die("session", ps_or.status());
    auto& ps = *ps_or.value();
    if (Status st = ps.prefill(prompt); !st.ok()) return die("prefill", st);
    ps.checkpoint();
    for (int r : {0, profile_r}) {
      print_profile(r == 0 ? "decode(1)" : "verify(" + std::to_string(r) + ")", reps,
                    [&] { return timed_call(ps, tbe, r, rows); });
    }
  }

  if (!drafter_path.empty()) {
    // A drafter on `be` whose ring holds `window` rows ending at the frontier, and one full
    // proposal from it (no thresholds: the chain runs to block_size).
    auto make_drafter = [&](backend::Backend& be) -> Expected<std::unique_ptr<speculative::Drafter>> {
      auto d = speculative::load_drafter(model, be, drafter_path);
      if (!d.ok()) return d.status();
      speculative::Drafter& dr = *d.value();
      const int w = dr.config().window;
      std::vector<float> hidden(static_cast<size_t>(w) * dr.capture_width());
      uint64_t x = 0x243f6a8885a308d3ull;
      for (float& v : hidden) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v = static_cast<float>(static_cast<int64_t>(x % 2001) - 1000) * 1e-3f;
      }
      dr.commit_rows(ctx - w, w, hidden.data());
      return d;
    };
    auto propose = [&](speculative::Drafter& dr) {
      speculative::Proposal prop;
      const double t0 = now_s();
      dr.propose(rows[0], ctx, dr.config().block_size, {}, &prop);
      return now_s() - t0;
    };
    auto d_or = make_drafter(*cpu_be);
    if (!d_or.ok()) return die("drafter", d_or.status());
    std::vector<double> tp;
    for (int i = 0; i < 3; ++i) propose(*d_or.value());
    for (int i = 0; i < rounds; ++i) tp.push_back(propose(*d_or.value()));
    const double p_best = *std::min_element(tp.begin(), tp.end());
    std::printf("proposal(%d drafts): best %.3f ms (%.2f decode), median %.3f ms (%.2f decode)\n",
                d_or.value()->config().block_size, p_best * 1e3, p_best / d_best, median_of(tp) * 1e3,
                median_of(tp) / d_med);
    if (profile) {
      auto pd_or = make_drafter(tbe);
      if (!pd_or.ok()) return die("drafter", pd_or.status());
      print_profile("proposal", reps, [&] { return propose(*pd_or.value()); });
    }
  }
  if (model_path.rfind("/tmp/ds4_bench_verify_tiny_", 0) == 0) std::remove(model_path.c_str());
  return 0;
}
