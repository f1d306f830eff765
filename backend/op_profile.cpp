// backend/op_profile.cpp — op costs, the profile tables and the profiling wrapper (op_profile.h).
#include "backend/op_profile.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "quant/kv_sim.h"

namespace ds4::backend {

const char* op_class_name(OpClass c) {
  switch (c) {
    case OpClass::kDenseQ8_0: return "dense q8_0";
    case OpClass::kDenseF16: return "dense f16";
    case OpClass::kDenseF32: return "dense f32";
    case OpClass::kDenseOther: return "dense other";
    case OpClass::kHead: return "head";
    case OpClass::kExperts: return "routed experts";
    case OpClass::kAttention: return "attention";
    case OpClass::kIndexer: return "indexer";
    case OpClass::kHc: return "hc";
    case OpClass::kNorm: return "rms_norm";
    case OpClass::kRouter: return "router";
    case OpClass::kElementwise: return "elementwise";
    case OpClass::kCopy: return "copy/fill";
    case OpClass::kHostWait: return "download";
    case OpClass::kCount: break;
  }
  return "?";
}

// ---- Costs ----------------------------------------------------------------------------------

namespace {
constexpr uint64_t kF32 = 4;
constexpr uint64_t kHalf = 2;  // an f16 KV store element
uint64_t u(int64_t v) { return v > 0 ? static_cast<uint64_t>(v) : 0; }
}  // namespace

uint64_t matrix_bytes(const Matrix& w) { return static_cast<uint64_t>(w.row_bytes) * u(w.n_out); }

OpCost op_cost(const MatmulParams& p) {
  OpClass c = OpClass::kDenseOther;
  if (p.w.n_out >= kHeadMinOutputs) {
    c = OpClass::kHead;
  } else if (p.w.type == GgmlType::kQ8_0) {
    c = OpClass::kDenseQ8_0;
  } else if (p.w.type == GgmlType::kF16) {
    c = OpClass::kDenseF16;
  } else if (p.w.type == GgmlType::kF32) {
    c = OpClass::kDenseF32;
  }
  return {c, matrix_bytes(p.w) + u(p.n_rows) * (u(p.w.n_in) + u(p.w.n_out)) * kF32};
}

OpCost op_cost(const MatmulParams* p, int n) {
  OpCost c = op_cost(p[0]);
  for (int i = 1; i < n; ++i) c.bytes += op_cost(p[i]).bytes;
  return c;
}

void format_matmul_grouped_key(char* buf, size_t size, const MatmulParams* p, int n) {
  if (size == 0) return;
  buf[0] = '\0';
  if (n <= 0) return;
  bool same = true;
  for (int i = 1; i < n; ++i) same = same && p[i].w.n_out == p[0].w.n_out && p[i].w.n_in == p[0].w.n_in;
  const char* type = gguf::type_name(p[0].w.type);
  if (same) {
    std::snprintf(buf, size, "matmul_grouped %s %dx(%lldx%lld)", type, n, static_cast<long long>(p[0].w.n_in),
                  static_cast<long long>(p[0].w.n_out));
    return;
  }
  int at = std::snprintf(buf, size, "matmul_grouped %s %lldx(", type, static_cast<long long>(p[0].w.n_in));
  for (int i = 0; i < n && at >= 0 && static_cast<size_t>(at) < size; ++i)
    at += std::snprintf(buf + at, size - at, "%s%lld", i == 0 ? "" : "+", static_cast<long long>(p[i].w.n_out));
  if (at >= 0 && static_cast<size_t>(at) < size) std::snprintf(buf + at, size - at, ")");
}

OpCost op_cost(const RmsNormParams& p) {
  return {OpClass::kNorm, 2 * u(p.n_rows) * u(p.n) * kF32 + (p.weight ? u(p.n) * kF32 : 0)};
}

OpCost op_cost(const HcPreParams& p) {
  const uint64_t wide = u(p.n_rows) * u(p.n_hc) * u(p.n_embd) * kF32;
  // x read, the flat copy written and read back, the F16 mix weights, y written; with the folded
  // norm, y read back, its weight and the normed row written.
  const uint64_t row = u(p.n_rows) * u(p.n_embd) * kF32;
  const uint64_t norm = p.normed ? 2 * row + (p.norm_weight ? u(p.n_embd) * kF32 : 0) : 0;
  return {OpClass::kHc, 3 * wide + matrix_bytes(p.fn) + row + norm};
}

OpCost op_cost(const HcPostParams& p) {
  const uint64_t wide = u(p.n_rows) * u(p.n_hc) * u(p.n_embd) * kF32;
  return {OpClass::kHc, 2 * wide + u(p.n_rows) * u(p.n_embd) * kF32};
}

OpCost op_cost(const HcCollapseParams& p) {
  const uint64_t wide = u(p.n_rows) * u(p.n_hc) * u(p.n_embd) * kF32;
  return {OpClass::kHc, 3 * wide + matrix_bytes(p.fn) + u(p.n_rows) * u(p.n_embd) * kF32};
}

OpCost op_cost(const AttentionInputsParams& p) {
  uint64_t row = u(p.head_dim) * (2 * kF32 + (p.raw ? kHalf : 0));  // kv in place (+ the f16 ring row)
  if (p.q) row += 2 * u(p.n_head) * u(p.head_dim) * kF32 * (p.q_head_norm ? 2 : 1);  // a norm: one more pass
  if (p.kv_norm) row += 2 * u(p.head_dim) * kF32;
  if (p.iq) row += 2 * u(p.n_idx_head) * (u(p.idx_dim) + 1) * kF32;
  return {OpClass::kAttention, u(p.n_rows) * row + (p.kv_norm ? u(p.head_dim) * kF32 : 0)};
}

OpCost op_cost(const CompressorStepParams& p) {
  const uint64_t coff = p.ratio == 4 ? 2 : 1;
  const uint64_t width = coff * u(p.head_dim);
  const uint64_t state = coff * u(p.ratio) * width * kF32;
  // Both states read and their current row written; the projections; the APE row (F16).
  const uint64_t row = u(p.indexer ? quant::fp4_row_bytes(p.head_dim) : quant::fp8_row_bytes(p.head_dim, p.n_rot));
  return {OpClass::kAttention, 2 * state + 4 * width * kF32 + u(p.ratio) * width * kHalf + row};
}

OpCost op_cost(const CompressorStepParams* p, int n) {
  OpCost c{OpClass::kAttention, 0};
  for (int i = 0; i < n; ++i) c.bytes += op_cost(p[i]).bytes;
  return c;
}

OpCost op_cost(const CompressorRowsParams& p) {
  return {OpClass::kAttention, op_cost(p.step).bytes * u(p.n)};
}

OpCost op_cost(const IndexerSelectParams* p, int n) {
  uint64_t b = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t rows = u(p[i].n_rows);
    // The FP4 rows, the scores written and read by the top-k, the order and the allowed mask.
    b += rows * u(quant::fp4_row_bytes(p[i].head_dim)) + rows * (2 * kF32 + 4 + 1) +
         u(p[i].n_head) * (u(p[i].head_dim) + 1) * kF32;
  }
  return {OpClass::kIndexer, b};
}

OpCost op_cost(const SinkAttentionParams* p, int n) {
  uint64_t b = 0;
  for (int i = 0; i < n; ++i) {
    const uint64_t keys = u(p[i].n_raw) + u(p[i].n_comp);
    // Raw keys f16 or f32; compressed keys FP8 stores or f32.
    const bool stored = p[i].stored_keys();
    const uint64_t comp_row = stored ? u(quant::fp8_row_bytes(p[i].head_dim, p[i].n_rot)) : u(p[i].head_dim) * kF32;
    b += u(p[i].n_raw) * u(p[i].head_dim) * (stored ? kHalf : kF32) + u(p[i].n_comp) * comp_row +
         (p[i].comp_allowed ? u(p[i].n_comp) : 0) +
         2 * u(p[i].n_head) * u(p[i].head_dim) * kF32 + u(p[i].n_head) * keys * kF32 * 2;
  }
  return {OpClass::kAttention, b};
}

OpCost op_cost(const SwigluParams& p) { return {OpClass::kElementwise, 3 * u(p.n) * kF32}; }

OpCost op_cost(const RouteParams& p) {
  return {OpClass::kRouter, u(p.n_rows) * (2 * u(p.n_expert) * kF32 + 2 * u(p.n_used) * 4)};
}

OpCost op_cost(const MoeParams& p, int distinct_experts) {
  uint64_t experts = distinct_experts >= 0 ? u(distinct_experts)
                                           : std::min(u(p.n_rows) * u(p.n_used), u(p.gate.n_expert));
  const uint64_t per_expert = p.gate.expert_bytes() + p.up.expert_bytes() + p.down.expert_bytes();
  return {OpClass::kExperts, experts * per_expert + 2 * u(p.n_rows) * u(p.gate.n_in) * kF32 +
                                 u(p.n_rows) * u(p.n_used) * 8};
}

OpCost op_cost(const EmbedParams& p) {
  return {OpClass::kElementwise, u(p.n_rows) * (p.row_bytes + u(p.n_hc) * u(p.n_embd) * kF32 + 4)};
}

OpCost op_cost(const AddParams& p) { return {OpClass::kElementwise, 3 * u(p.n) * kF32}; }

OpCost op_cost(const HcMeanParams& p) {
  return {OpClass::kElementwise, u(p.n_rows) * (u(p.n_hc) + 1) * u(p.n_embd) * kF32};
}

OpCost op_cost(const ArgmaxParams& p) {
  return {OpClass::kElementwise, u(p.n_rows) * (u(p.n) * kF32 + 4 + (p.margin != nullptr ? 4 : 0))};
}

OpCost op_cost(const TopKParams& p) {
  return {OpClass::kElementwise, u(p.n_rows) * (u(p.n) * kF32 + u(p.k) * 8)};
}

OpCost op_cost(const GetRowsParams& p) {
  return {OpClass::kElementwise, u(p.n_rows) * (p.w.row_bytes + u(p.w.n_in) * kF32 + 4)};
}

// ---- ProfileStats ---------------------------------------------------------------------------

namespace {

int phase_rows(int rows) { return std::clamp(rows, 0, kProfileMaxPhaseRows + 1); }

void appendf(std::string* s, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void appendf(std::string* s, const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  *s += buf;
}

double gbps(double bytes, double us) { return us > 0 ? bytes / us / 1e3 : 0.0; }

}  // namespace

ProfileStats::Phase& ProfileStats::phase(int rows) {
  const int r = phase_rows(rows);
  for (Phase& p : phases_) {
    if (p.rows == r) return p;
  }
  phases_.push_back(Phase{});
  phases_.back().rows = r;
  return phases_.back();
}

void ProfileStats::begin_forward(int rows) {
  Phase& p = phase(rows);
  p.forwards += 1;
  p.tokens += rows;
}

void ProfileStats::add_op(int rows, std::string_view key, OpCost cost, double dur_us, double gap_us, GapKind gap) {
  Phase& p = phase(rows);
  ++n_ops_;
  ++p.ops;
  if (cost.cls == OpClass::kHostWait) {
    p.host_wait_us += dur_us;
  } else {
    p.busy_us += dur_us;
  }
  switch (gap) {
    case GapKind::kNone: break;
    case GapKind::kBetweenOps: p.gap_us += gap_us, ++p.n_gap; break;
    case GapKind::kHostRound: p.round_us += gap_us, ++p.n_round; break;
    case GapKind::kExcluded: ++p.n_excluded; break;
  }
  auto it = std::find_if(p.stats.begin(), p.stats.end(), [&](const OpStat& s) { return s.key == key; });
  if (it == p.stats.end()) {
    p.stats.push_back(OpStat{std::string(key), cost.cls});
    it = p.stats.end() - 1;
  }
  it->calls += 1;
  it->us += dur_us;
  it->bytes += static_cast<double>(cost.bytes);
}

std::string ProfileStats::report(std::string_view title) const {
  std::string s;
  std::vector<const Phase*> order;
  for (const Phase& p : phases_) order.push_back(&p);
  std::sort(order.begin(), order.end(), [](const Phase* a, const Phase* b) { return a->rows < b->rows; });
  for (const Phase* pp : order) {
    const Phase& p = *pp;
    if (p.ops == 0) continue;
    const double fw = static_cast<double>(std::max<int64_t>(p.forwards, 1));
    // Excluded gaps (the profiler's read-back) are replaced by the mean of the included ones.
    const double n_incl = static_cast<double>(p.n_gap + p.n_round);
    const double excl_scale = n_incl > 0 ? (n_incl + p.n_excluded) / n_incl : 1.0;
    const double gaps = p.gap_us * excl_scale, round = p.round_us * excl_scale + p.host_wait_us;
    const double total = p.busy_us + gaps + round;
    char what[96];
    if (p.rows == 0) {
      std::snprintf(what, sizeof what, "before the first forward (set-up copies)");
    } else if (p.rows == 1) {
      std::snprintf(what, sizeof what, "decode (1 row per forward)");
    } else if (p.rows <= kProfileMaxPhaseRows) {
      std::snprintf(what, sizeof what, "verify / batch (%d rows per forward)", p.rows);
    } else {
      std::snprintf(what, sizeof what, "prefill (more than %d rows per forward)", kProfileMaxPhaseRows);
    }
    appendf(&s, "\n== op profile, %.*s: %s\n", static_cast<int>(title.size()), title.data(), what);
    appendf(&s,
            "   %" PRId64 " forwards, %" PRId64 " tokens; %.1f ops per forward, %.1f per token "
            "(Backend ops; an op is one or more kernels)\n",
            p.forwards, p.tokens, static_cast<double>(p.ops) / fw,
            static_cast<double>(p.ops) / static_cast<double>(std::max<int64_t>(p.tokens, 1)));
    appendf(&s,
            "   per forward: %.3f ms on the device timeline = ops %.3f ms (%.1f%%) + gaps between ops %.3f ms "
            "(%.1f%%) + host round trip %.3f ms (%.1f%%)\n",
            total / fw / 1e3, p.busy_us / fw / 1e3, 100.0 * p.busy_us / total, gaps / fw / 1e3,
            100.0 * gaps / total, round / fw / 1e3, 100.0 * round / total);
    appendf(&s,
            "   gap share %.1f%%; %" PRId64 " gaps between ops (mean %.2f us), %" PRId64
            " host round trips (mean %.2f us + download), %" PRId64 " excluded (mark read-back)\n",
            100.0 * (gaps + round) / total, p.n_gap, p.n_gap ? p.gap_us / p.n_gap : 0.0, p.n_round,
            p.n_round ? p.round_us / p.n_round : 0.0, p.n_excluded);
    // By class.
    struct ClassRow {
      double us = 0, bytes = 0;
      bool bound = false;
    };
    ClassRow cls[static_cast<int>(OpClass::kCount)];
    for (const OpStat& o : p.stats) {
      ClassRow& c = cls[static_cast<int>(o.cls)];
      c.us += o.us;
      c.bytes += o.bytes;
      c.bound |= o.cls == OpClass::kExperts && p.rows > 1;
    }
    std::vector<int> ci;
    for (int c = 0; c < static_cast<int>(OpClass::kCount); ++c) {
      if (cls[c].us > 0 || cls[c].bytes > 0) ci.push_back(c);
    }
    std::sort(ci.begin(), ci.end(), [&](int a, int b) { return cls[a].us > cls[b].us; });
    appendf(&s, "   %-18s %12s %9s %11s %7s\n", "class", "MB/forward", "GB/s", "ms/forward", "share");
    for (int c : ci) {
      appendf(&s, "   %-18s %2s%10.2f %9.1f %11.4f %6.1f%%\n", op_class_name(static_cast<OpClass>(c)),
              cls[c].bound ? "<=" : "", cls[c].bytes / fw / 1e6, gbps(cls[c].bytes, cls[c].us),
              cls[c].us / fw / 1e3, 100.0 * cls[c].us / total);
    }
    appendf(&s, "   %-18s %12s %9s %11.4f %6.1f%%\n", "(gaps between ops)", "", "", gaps / fw / 1e3,
            100.0 * gaps / total);
    appendf(&s, "   %-18s %12s %9s %11.4f %6.1f%%\n", "(host round trip)", "", "", (round - p.host_wait_us) / fw / 1e3,
            100.0 * (round - p.host_wait_us) / total);
    // By op.
    std::vector<const OpStat*> ops;
    for (const OpStat& o : p.stats) ops.push_back(&o);
    std::sort(ops.begin(), ops.end(), [](const OpStat* a, const OpStat* b) { return a->us > b->us; });
    appendf(&s, "   %-44s %-14s %9s %10s %10s %9s %7s\n", "op", "class", "calls/fwd", "us/call", "MB/call",
            "GB/s", "share");
    for (const OpStat* o : ops) {
      const bool bound = o->cls == OpClass::kExperts && p.rows > 1;
      appendf(&s, "   %-44s %-14s %9.1f %10.2f %2s%8.3f %9.1f %6.1f%%\n", o->key.c_str(), op_class_name(o->cls),
              static_cast<double>(o->calls) / fw, o->us / static_cast<double>(o->calls), bound ? "<=" : "",
              o->bytes / static_cast<double>(o->calls) / 1e6, gbps(o->bytes, o->us), 100.0 * o->us / total);
    }
  }
  return s;
}

// ---- Clocks ---------------------------------------------------------------------------------

namespace {

class SteadyClock final : public OpClock {
 public:
  explicit SteadyClock(int capacity) : t_(static_cast<size_t>(capacity)) {}
  int capacity() const override { return static_cast<int>(t_.size()); }
  void record(int mark) override { t_[static_cast<size_t>(mark)] = std::chrono::steady_clock::now(); }
  void wait(int) override {}
  double elapsed_us(int from, int to) override {
    return std::chrono::duration<double, std::micro>(t_[static_cast<size_t>(to)] - t_[static_cast<size_t>(from)])
        .count();
  }

 private:
  std::vector<std::chrono::steady_clock::time_point> t_;
};

// ---- The wrapper ----------------------------------------------------------------------------

// Op i (sequence number) uses marks 2·(i mod N) (start) and 2·(i mod N) + 1 (end), N = the
// clock's capacity / 2. Records [harvested_, next_) are pending; record next_ − 1's marks stay
// intact until the next harvest, so the gap before the first pending record can be read.
class ProfilingBackend final : public ForwardingBackend {
 public:
  ProfilingBackend(std::unique_ptr<Backend> inner, std::unique_ptr<OpClock> clock, std::string title,
                   ReportSink sink)
      : ForwardingBackend(*inner),
        owned_(std::move(inner)),
        clock_(std::move(clock)),
        title_(std::move(title)),
        sink_(std::move(sink)),
        slots_(static_cast<size_t>(clock_->capacity() / 2)) {}
  ~ProfilingBackend() override {
    harvest();
    const std::string r = stats_.report(title_);
    if (r.empty()) return;
    if (sink_) {
      sink_(r);
    } else {
      std::fflush(stdout);
      std::fprintf(stderr, "%s", r.c_str());
      std::fflush(stderr);
    }
  }

  void upload(void* dst, const void* src, size_t bytes) override {
    const int s = begin("upload", {OpClass::kCopy, bytes});
    inner_.upload(dst, src, bytes);
    end(s);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    const int s = begin("download", {OpClass::kHostWait, bytes});
    inner_.download(dst, src, bytes);
    end(s);
    host_waited();
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    const int s = begin("copy", {OpClass::kCopy, 2 * bytes});
    inner_.copy(dst, src, bytes);
    end(s);
  }
  void copy_many(const CopyRegion* regions, int n) override {
    size_t bytes = 0;
    for (int i = 0; i < n; ++i) bytes += regions[i].bytes;
    const int s = begin("copy_many", {OpClass::kCopy, 2 * bytes});
    inner_.copy_many(regions, n);
    end(s);
  }
  void fill_f32(float* dst, size_t n, float value) override {
    const int s = begin("fill", {OpClass::kCopy, n * 4});
    inner_.fill_f32(dst, n, value);
    end(s);
  }
  void fill_bytes(void* dst, size_t bytes, uint8_t value) override {
    const int s = begin("fill", {OpClass::kCopy, bytes});
    inner_.fill_bytes(dst, bytes, value);
    end(s);
  }
  void sync() override {
    inner_.sync();
    host_waited();
  }

  void matmul(const MatmulParams& p) override {
    const int s = begin(key("matmul %s %lldx%lld", gguf::type_name(p.w.type), ll(p.w.n_in), ll(p.w.n_out)),
                        op_cost(p));
    inner_.matmul(p);
    end(s);
  }
  void matmul_grouped(const MatmulParams* p, int n) override {
    format_matmul_grouped_key(key_buf_, sizeof key_buf_, p, n);
    const int s = begin(key_buf_, op_cost(p, n));
    inner_.matmul_grouped(p, n);
    end(s);
  }
  void rms_norm(const RmsNormParams& p) override {
    timed(key("rms_norm %lld", ll(p.n)), op_cost(p), [&] { inner_.rms_norm(p); });
  }
  // A folded HC post (post_first) is timed as the hc_post op it is, then the HC pre alone.
  void hc_pre(const HcPreParams& p) override {
    if (p.post_first.out != nullptr) hc_post(p.post_first);
    HcPreParams q = p;
    q.post_first = HcPostParams{};
    timed("hc_pre", op_cost(q), [&] { inner_.hc_pre(q); });
  }
  void hc_post(const HcPostParams& p) override { timed("hc_post", op_cost(p), [&] { inner_.hc_post(p); }); }
  void attention_inputs(const AttentionInputsParams& p) override {
    timed(p.q ? "attention_inputs (q, kv)" : "attention_inputs (kv)", op_cost(p), [&] { inner_.attention_inputs(p); });
  }
  void compressor_step(const CompressorStepParams& p) override {
    timed(key("compressor_step ratio %d%s", p.ratio, p.indexer ? " (indexer)" : ""), op_cost(p),
          [&] { inner_.compressor_step(p); });
  }
  void compressor_steps(const CompressorStepParams* p, int n) override {
    timed("compressor_steps", op_cost(p, n), [&] { inner_.compressor_steps(p, n); });
  }
  void compressor_rows(const CompressorRowsParams& p) override {
    timed(key("compressor_rows ratio %d%s", p.step.ratio, p.step.indexer ? " (indexer)" : ""), op_cost(p),
          [&] { inner_.compressor_rows(p); });
  }
  void indexer_select(const IndexerSelectParams* p, int n) override {
    timed("indexer_select", op_cost(p, n), [&] { inner_.indexer_select(p, n); });
  }
  void sink_attention(const SinkAttentionParams* p, int n) override {
    timed(p[0].n_comp > 0 ? "sink_attention (raw + compressed)" : "sink_attention (raw)", op_cost(p, n),
          [&] { inner_.sink_attention(p, n); });
  }
  void swiglu(const SwigluParams& p) override { timed("swiglu", op_cost(p), [&] { inner_.swiglu(p); }); }
  void route(const RouteParams& p) override {
    timed(p.tid2eid ? "route (hash)" : "route", op_cost(p), [&] { inner_.route(p); });
  }
  void moe(const MoeParams& p) override {
    timed(key("moe %s/%s", gguf::type_name(p.gate.type), gguf::type_name(p.down.type)), op_cost(p),
          [&] { inner_.moe(p); });
  }
  void hc_collapse(const HcCollapseParams& p) override {
    timed("hc_collapse", op_cost(p), [&] { inner_.hc_collapse(p); });
  }
  void embed(const EmbedParams& p) override {
    forward_rows_ = p.n_rows;
    stats_.begin_forward(p.n_rows);
    timed("embed", op_cost(p), [&] { inner_.embed(p); });
  }
  void add(const AddParams& p) override { timed("add", op_cost(p), [&] { inner_.add(p); }); }
  void hc_mean(const HcMeanParams& p) override { timed("hc_mean", op_cost(p), [&] { inner_.hc_mean(p); }); }
  void argmax(const ArgmaxParams& p) override { timed("argmax", op_cost(p), [&] { inner_.argmax(p); }); }
  void top_k(const TopKParams& p) override { timed("top_k", op_cost(p), [&] { inner_.top_k(p); }); }
  void get_rows(const GetRowsParams& p) override { timed("get_rows", op_cost(p), [&] { inner_.get_rows(p); }); }

 private:
  struct Slot {
    int key = 0;  // index into keys_
    OpCost cost;
    GapKind gap = GapKind::kNone;
    int rows = 1;  // the forward's rows when issued
  };
  static long long ll(int64_t v) { return static_cast<long long>(v); }

  // The op key formatted into a fixed buffer (no allocation per op).
  const char* key(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(key_buf_, sizeof key_buf_, fmt, ap);
    va_end(ap);
    return key_buf_;
  }
  // Interned key id: a linear scan over the few dozen distinct keys; a new key is stored once.
  int intern(const char* k) {
    for (size_t i = 0; i < keys_.size(); ++i) {
      if (keys_[i] == k) return static_cast<int>(i);
    }
    keys_.emplace_back(k);
    return static_cast<int>(keys_.size() - 1);
  }

  template <typename F>
  void timed(const char* k, OpCost cost, F&& f) {
    const int s = begin(k, cost);
    f();
    end(s);
  }

  int begin(const char* k, OpCost cost) {
    const int64_t n = static_cast<int64_t>(slots_.size());
    if (next_ - harvested_ >= n - 1) {
      harvest();  // the ring is full: wait for the device, read the marks back
    }
    const int s = static_cast<int>(next_ % n);
    Slot& slot = slots_[static_cast<size_t>(s)];
    slot.key = intern(k);
    slot.cost = cost;
    slot.rows = forward_rows_;
    slot.gap = next_ == 0 ? GapKind::kNone : excluded_next_ ? GapKind::kExcluded
                                          : waited_         ? GapKind::kHostRound
                                                            : GapKind::kBetweenOps;
    excluded_next_ = waited_ = false;
    clock_->record(2 * s);
    return s;
  }
  void end(int s) {
    clock_->record(2 * s + 1);
    ++next_;
  }
  void host_waited() {
    waited_ = true;
    // Everything issued is done: reading the marks back now costs no device wait.
    if (next_ - harvested_ >= static_cast<int64_t>(slots_.size()) / 2) harvest();
  }
  // Reads back every pending record's time and gap into stats_.
  void harvest() {
    if (next_ == harvested_) return;
    const int64_t n = static_cast<int64_t>(slots_.size());
    clock_->wait(static_cast<int>(2 * ((next_ - 1) % n) + 1));
    for (int64_t i = harvested_; i < next_; ++i) {
      const int s = static_cast<int>(i % n);
      const Slot& slot = slots_[static_cast<size_t>(s)];
      const double dur = clock_->elapsed_us(2 * s, 2 * s + 1);
      double gap = 0.0;
      if (slot.gap == GapKind::kBetweenOps || slot.gap == GapKind::kHostRound) {
        gap = clock_->elapsed_us(static_cast<int>(2 * ((i - 1) % n) + 1), 2 * s);
      }
      stats_.add_op(slot.rows, keys_[static_cast<size_t>(slot.key)], slot.cost, dur, gap, slot.gap);
    }
    harvested_ = next_;
    excluded_next_ = true;
  }

  std::unique_ptr<Backend> owned_;
  std::unique_ptr<OpClock> clock_;
  std::string title_;
  ReportSink sink_;
  std::vector<Slot> slots_;
  std::vector<std::string> keys_;
  char key_buf_[160] = {};
  int64_t next_ = 0, harvested_ = 0;
  bool waited_ = false, excluded_next_ = false;
  int forward_rows_ = 0;  // rows of the last embed (0: none yet): the phase of the ops issued now
  ProfileStats stats_;
};

}  // namespace

std::unique_ptr<OpClock> make_steady_clock(int capacity) { return std::make_unique<SteadyClock>(capacity); }

std::unique_ptr<Backend> make_profiling_backend(std::unique_ptr<Backend> inner, std::unique_ptr<OpClock> clock,
                                                std::string title, ReportSink sink) {
  return std::make_unique<ProfilingBackend>(std::move(inner), std::move(clock), std::move(title), std::move(sink));
}

}  // namespace ds4::backend
