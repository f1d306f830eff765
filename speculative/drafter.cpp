// speculative/drafter.cpp — DSpark drafter forward (see drafter.h; dspark-drafter.md §2-§11).
//
// A stage is the target's V4 block with the attention swapped for the DSpark one (§3-§4); its
// block steps are the target's own (session/block.h: projections, RoPE, sink attention of a
// row, output LoRA, FFN sublayer), so a stage with the target's weights would reproduce a
// dense (ratio-0, non-hash) target layer on the same keys. Only the key set is drafter code.
#include "speculative/drafter.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/math.h"
#include "core/reduce.h"
#include "quant/quant.h"
#include "session/block.h"

namespace ds4::speculative {

namespace {

// Rows per commit chunk (batched main_proj / attn_kv). A proposal after a pause catches the
// ring up on up to `window` rows at once; on 16 threads each op of a chunk costs a few
// microseconds of hand-off whatever its rows, so one chunk of 32 rows instead of four of 8
// cuts that catch-up's ops by 4x. Batch invariant: rows never depend on the chunking.
constexpr int kCommitRows = 32;

using session::matmul;
using session::rms_norm;

}  // namespace

int32_t markov_argmax(const float* u, const float* bias, int64_t n) {
  int64_t best = 0;
  float bv = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    const float v = bias ? u[i] + bias[i] : u[i];
    if (v > bv) {
      bv = v;
      best = i;
    }
  }
  return static_cast<int32_t>(best);
}

// A typed backend buffer with the data() the block helpers (session/block.h) read: a backend
// address. host() is the checked host view, valid on a host-addressable backend only.
template <typename T>
struct Arr {
  backend::Buffer buf;
  void alloc(backend::Backend& be, size_t n) { buf = be.alloc_array<T>(n); }
  T* data() const { return buf.as<T>(); }
  std::span<T> host() const { return buf.host<T>(); }
};

// Activation buffers (backend memory); shapes use B = block size (n = B rows: commit_chunk has
// main_x / ckv). queries are op descriptors, host side.
struct Drafter::Scratch {
  Arr<float> x, x2, flat;           // [n, HC]
  Arr<float> mix;                   // [n, MIX]
  Arr<float> y, h;                  // [n, E]
  Arr<float> post, comb;            // [n, n_hc], [n, n_hc*n_hc]
  Arr<float> qa, qr;                // [n, QL]
  Arr<float> q, heads;              // [n, Q]
  Arr<float> kv;                    // [n, D]
  Arr<float> low;                   // [n, OL]
  Arr<float> o;                     // [n, E]
  Arr<float> router;                // [n, X]
  Arr<float> probs;                 // [B, X]
  Arr<int32_t> sel;                 // [n, U]
  Arr<float> wt;                    // [n, U]
  Arr<float> moe_out, sh_out;       // [n, E]
  Arr<uint8_t> moe_scratch;         // moe_scratch_bytes(E, F, U, n)
  Arr<float> sg, su;                // [n, F]
  Arr<float> scores;                // [B, n_head, W + B] per-row attention scratch
  std::vector<backend::SinkAttentionParams> queries;  // [B]
  Arr<float> head_mix;              // [n, n_hc]
  Arr<float> yhead;                 // [B, E] pre-norm HC-head output
  Arr<float> logits;                // [B, V] base logits U_k, then Z_k in place
  Arr<float> bias;                  // [V]
  Arr<float> e;                     // [R] W1 row of the previous draft
  Arr<float> conf_in;               // [E + R] [y_k ; e]
  Arr<float> conf_logit;            // [1]
  Arr<float> main_x;                // [kCommitRows, E]
  Arr<float> ckv;                   // [kCommitRows, D]
  Arr<float> hidden;                // [kCommitRows, capture_width] (device backends only)
  std::vector<float> e_host;        // [R] dequantized W1 row (host staging)
};

DrafterModel::DrafterModel(const model::Model& target, backend::Backend& be, std::unique_ptr<DrafterWeights> w)
    : target_(target), be_(be), w_(std::move(w)) {}

DrafterModel::~DrafterModel() = default;

Expected<std::unique_ptr<DrafterModel>> DrafterModel::create(const model::Model& target, backend::Backend& be,
                                                             std::unique_ptr<DrafterWeights> weights) {
  const model::ModelConfig& c = target.config();
  if (c.n_expert_used > 64 || c.n_hc > 16) return unsupported("drafter: n_expert_used/n_hc above 64/16");
  const auto& g = target.weights().global;
  if (g.token_embd.type != gguf::GgmlType::kF16)
    return unsupported("drafter: target token_embd must be f16, got %s", gguf::type_name(g.token_embd.type));
  return std::unique_ptr<DrafterModel>(new DrafterModel(target, be, std::move(weights)));
}

int64_t DrafterModel::capture_width() const {
  return static_cast<int64_t>(w_->config.target_layers.size()) * target_.config().n_embd;
}

Drafter::Drafter(const DrafterModel& model)
    : m_(model), cfg_(model.target().config()), be_(model.backend()), w_(&model.weights()) {
  const model::ModelConfig& c = cfg_;
  B_ = w_->config.block_size;
  W_ = w_->config.window;
  const int64_t n = B_;
  const int64_t E = c.n_embd, HC = c.hc_dim(), D = c.head_dim;
  backend::Backend& be = be_;
  ring_ = be.alloc_array<float>(static_cast<size_t>(w_->config.n_stages) * W_ * D);
  s_ = std::make_unique<Scratch>();
  Scratch& s = *s_;
  s.x.alloc(be, n * HC);
  s.x2.alloc(be, n * HC);
  s.flat.alloc(be, n * HC);
  s.mix.alloc(be, n * c.hc_mix_dim());
  s.y.alloc(be, n * E);
  s.h.alloc(be, n * E);
  s.post.alloc(be, n * c.n_hc);
  s.comb.alloc(be, n * c.n_hc * c.n_hc);
  s.qa.alloc(be, n * c.q_lora_rank);
  s.qr.alloc(be, n * c.q_lora_rank);
  s.q.alloc(be, n * c.q_dim());
  s.heads.alloc(be, n * c.q_dim());
  s.kv.alloc(be, n * D);
  s.low.alloc(be, n * c.o_low_dim());
  s.o.alloc(be, n * E);
  s.router.alloc(be, n * c.n_expert);
  s.probs.alloc(be, n * c.n_expert);
  s.sel.alloc(be, n * c.n_expert_used);
  s.wt.alloc(be, n * c.n_expert_used);
  s.moe_out.alloc(be, n * E);
  s.sh_out.alloc(be, n * E);
  s.moe_scratch.alloc(be, backend::moe_scratch_bytes(E, c.n_ff_exp, static_cast<int>(c.n_expert_used), static_cast<int>(n)));
  s.sg.alloc(be, n * c.n_ff_exp);
  s.su.alloc(be, n * c.n_ff_exp);
  s.scores.alloc(be, static_cast<size_t>(B_) * c.n_head * (W_ + B_));
  s.queries.assign(B_, backend::SinkAttentionParams());
  s.head_mix.alloc(be, n * c.n_hc);
  s.yhead.alloc(be, B_ * E);
  s.logits.alloc(be, static_cast<size_t>(B_) * c.n_vocab);
  s.bias.alloc(be, c.n_vocab);
  s.e.alloc(be, w_->config.markov_rank);
  s.conf_in.alloc(be, E + w_->config.markov_rank);
  s.main_x.alloc(be, kCommitRows * E);
  s.ckv.alloc(be, kCommitRows * D);
  s.conf_logit.alloc(be, 1);
  if (!be.host_addressable()) s.hidden.alloc(be, static_cast<size_t>(kCommitRows) * m_.capture_width());
  s.e_host.assign(w_->config.markov_rank, 0.0f);
}

Drafter::~Drafter() = default;

void Drafter::ring_reset() {
  ring_start_ = 0;
  ring_next_ = 0;
}

void Drafter::ring_truncate(int64_t pos) {
  if (pos >= ring_next_) return;
  if (pos <= ring_start_) {
    ring_start_ = ring_next_ = pos < 0 ? 0 : pos;
    return;
  }
  ring_next_ = pos;
}

const float* Drafter::ring_row(int stage, int64_t pos) const {
  if (pos < ring_start_ || pos >= ring_next_ || pos < ring_next_ - W_) return nullptr;
  const int64_t D = cfg_.head_dim;
  return ring_.as<float>() + (static_cast<int64_t>(stage) * W_ + pos % W_) * D;
}

void Drafter::commit_rows(int64_t pos0, int n, const float* hidden) {
  if (n <= 0) return;
  if (pos0 < ring_next_) ring_truncate(pos0);
  if (pos0 != ring_next_) {  // gap: the ring restarts at pos0
    ring_start_ = ring_next_ = pos0;
  }
  const int64_t cw = capture_width();
  // Rows older than the last W of this batch are never visible: skip them.
  const int skip = std::max(0, n - W_);
  if (skip > 0) ring_start_ = ring_next_ = pos0 + skip;
  for (int done = skip; done < n;) {
    const int k = std::min(kCommitRows, n - done);
    commit_chunk(pos0 + done, k, hidden + static_cast<int64_t>(done) * cw);
    done += k;
  }
}

// main_x = RMSNorm_main(main_proj · hidden); per stage: kv = RMSNorm_kv(attn_kv · main_x),
// RoPE tail at the row's position, FP8 round trip of the non-RoPE dims (§2, §3.1).
void Drafter::commit_chunk(int64_t pos0, int n, const float* hidden) {
  Scratch& s = *s_;
  const int64_t E = cfg_.n_embd, D = cfg_.head_dim;
  const model::RopeParams rp = cfg_.rope_params(0);
  // The captures are host rows: read in place on a host-addressable backend, uploaded otherwise.
  if (!be_.host_addressable()) {
    be_.upload(s.hidden.data(), hidden, sizeof(float) * static_cast<size_t>(n * capture_width()));
    hidden = s.hidden.data();
  }
  matmul(be_, w_->main_proj, hidden, capture_width(), s.main_x.data(), E, n);
  rms_norm(be_, s.main_x.data(), w_->main_norm, s.main_x.data(), E, n, cfg_.rms_eps);
  for (int st = 0; st < w_->config.n_stages; ++st) {
    const StageWeights& sw = w_->stages[st];
    session::kv_projection(be_, cfg_, sw.attn_kv, sw.kv_a_norm, s.main_x.data(), E, s.ckv.data(), n);
    be_.attention_inputs(session::attention_inputs(cfg_, nullptr, s.ckv.data(), n, pos0, rp));
    for (int i = 0; i < n; ++i) {
      be_.copy(ring_.as<float>() + (static_cast<int64_t>(st) * W_ + (pos0 + i) % W_) * D, s.ckv.data() + i * D,
               sizeof(float) * D);
    }
  }
  ring_next_ = pos0 + n;
  ring_start_ = std::max(ring_start_, ring_next_ - W_);
}

void Drafter::stage_attention(int st, int64_t pos) {
  Scratch& s = *s_;
  const int n = B_;
  const int64_t D = cfg_.head_dim, Q = cfg_.q_dim();
  const model::RopeParams rp = cfg_.rope_params(0);  // ratio 0: base theta, no YaRN (§3.3)
  const session::AttnMats am = session::attn_mats(w_->stages[st]);
  const session::BlockScratch bs = session::block_scratch(s);
  session::attention_projections(be_, cfg_, am, bs, n);
  be_.attention_inputs(session::attention_inputs(cfg_, s.q.data(), s.kv.data(), n, pos, rp));
  // Key set (identical for every slot): ring rows of positions max(start, P-W)..P-1, then the
  // block rows, bidirectionally (§3.3): the ring as the raw keys, the block rows as the
  // (all allowed) compressed keys, so the attention order is the same.
  const int64_t first = std::max<int64_t>(ring_start_, pos - W_);
  const session::RawRing ring{ring_.as<float>() + static_cast<int64_t>(st) * W_ * D, W_, first,
                              static_cast<int>(pos - first)};
  const int64_t row_scores = static_cast<int64_t>(cfg_.n_head) * (ring.n + n);
  for (int i = 0; i < n; ++i) {
    s.queries[i] = session::attention_query(cfg_, s.q.data() + i * Q, ring, s.kv.data(), n, nullptr, am.sinks,
                                            s.scores.data() + i * row_scores, s.heads.data() + i * Q, pos + i, rp);
  }
  be_.sink_attention(s.queries.data(), n);
  session::attention_output(be_, cfg_, am, bs, n);
  std::swap(s.x, s.x2);
}

// Learned routing (§4): top-U by score + exp_probs_b (no hash table), shared expert, HC post.
void Drafter::stage_ffn(int st) {
  Scratch& s = *s_;
  session::ffn_sublayer(be_, cfg_, session::ffn_mats(w_->stages[st]), session::block_scratch(s), B_, nullptr,
                        cfg_.swiglu_clamp.back());
  std::swap(s.x, s.x2);
}

// The backend's output-head collapse (§4.7, the target's op) with the drafter's hc_head:
// rms_norm(x) -> mix = fn · flat -> w_h = σ(mix_h·scale + base_h) + hc_eps -> y = Σ_h w_h·x_h.
void Drafter::output_head() {
  Scratch& s = *s_;
  backend::HcCollapseParams cp;
  cp.x = s.x.data();
  cp.fn = w_->hc_head_fn;
  cp.scale = w_->hc_head_scale[0];
  cp.base = w_->hc_head_base;
  cp.n_hc = static_cast<int>(cfg_.n_hc);
  cp.n_embd = cfg_.n_embd;
  cp.norm_eps = cfg_.rms_eps;
  cp.hc_eps = cfg_.hc_eps;
  cp.n_rows = B_;
  cp.flat = s.flat.data();
  cp.mix = s.head_mix.data();
  cp.y = s.yhead.data();
  be_.hc_collapse(cp);
}

void Drafter::stage_forward(int st, int64_t pos) {
  stage_attention(st, pos);
  stage_ffn(st);
}

std::span<const float> Drafter::last_z(int k) const {
  return s_->logits.host().subspan(static_cast<size_t>(k) * cfg_.n_vocab, static_cast<size_t>(cfg_.n_vocab));
}

void Drafter::propose(int32_t anchor, int64_t pos, int n_max, std::span<const float> thr, Proposal* out) {
  *out = Proposal();
  n_max = std::min(n_max, B_);
  if (n_max <= 0) return;
  if (ring_next_ != pos || ring_next_ <= ring_start_) {
    out->no_context = true;
    return;
  }
  Scratch& s = *s_;
  const int64_t E = cfg_.n_embd, HC = cfg_.hc_dim(), V = cfg_.n_vocab;
  const int R = w_->config.markov_rank;
  const int nhc = static_cast<int>(cfg_.n_hc);
  const model::GlobalWeights& g = m_.target().weights().global;

  // Block input: [anchor, MASK, ...] target embeddings copied into every HC stream (§5).
  // Host steps (here, the Markov bias and its argmax below) write and read the scratch through
  // its host view: a host-addressable backend.
  float* const xh = s.x.host().data();
  for (int i = 0; i < B_; ++i) {
    const int32_t tok = i == 0 ? anchor : w_->config.noise_token_id;
    const auto* row = reinterpret_cast<const uint16_t*>(g.token_embd.row(tok));
    float* x = xh + i * HC;
    for (int64_t d = 0; d < E; ++d) x[d] = quant::f16_to_f32(row[d]);
    for (int hh = 1; hh < nhc; ++hh) std::memcpy(x + hh * E, x, sizeof(float) * E);
  }
  for (int st = 0; st < w_->config.n_stages; ++st) stage_forward(st, pos);

  // HC head (§6): sigmoid-weighted collapse of every block row -> yhead (pre-norm).
  output_head();

  // Confidence of position k: σ(w · [y_k ; W1[prev]]) (§8), no bias.
  // e = W1[prev] (dequantized on the host, uploaded).
  auto load_e = [&](int32_t prev) {
    quant::dequantize_row(w_->markov_w1.type, w_->markov_w1.data + static_cast<size_t>(prev) * w_->markov_w1.row_bytes,
                          s.e_host.data(), R);
    be_.upload(s.e.data(), s.e_host.data(), sizeof(float) * R);
  };
  auto confidence = [&](int k, int32_t prev) {
    load_e(prev);
    be_.copy(s.conf_in.data(), s.yhead.data() + k * E, sizeof(float) * E);
    be_.copy(s.conf_in.data() + E, s.e.data(), sizeof(float) * R);
    matmul(be_, w_->confidence, s.conf_in.data(), E + R, s.conf_logit.data(), 1, 1);
    float logit = 0.0f;
    be_.download(&logit, s.conf_logit.data(), sizeof(float));
    conf_logit_[k] = logit;
    return sigmoid_stable(logit);
  };

  // conf0 precheck before the vocab head.
  out->conf0 = confidence(0, anchor);
  if (out->conf0 < threshold_at(thr, 0)) {
    out->conf0_rejected = true;
    return;
  }
  // Base logits U_k = output · RMSNorm_norm(y_k) for the rows the chain may reach.
  rms_norm(be_, s.yhead.data(), w_->norm, s.h.data(), E, n_max, cfg_.rms_eps);
  const backend::Matrix head{g.output.data, g.output.type, g.output.ne[0], g.output.ne[1],
                             static_cast<size_t>(g.output.row_bytes)};
  matmul(be_, head, s.h.data(), E, s.logits.data(), V, n_max);

  // Lazy Markov chain (§7): Z_k = U_k + W2·W1[prev]; d_k = argmax (ties -> smallest id).
  int32_t prev = anchor;
  for (int k = 0; k < n_max; ++k) {
    float c = out->conf0;
    if (k > 0) {
      c = confidence(k, prev);
      if (c < threshold_at(thr, k)) break;
    } else {
      load_e(prev);
    }
    matmul(be_, w_->markov_w2, s.e.data(), R, s.bias.data(), V, 1);
    float* z = s.logits.host().data() + static_cast<int64_t>(k) * V;
    const float* bias = s.bias.host().data();
    for (int64_t v = 0; v < V; ++v) z[v] += bias[v];
    // markov_argmax(z, nullptr, V) for any row with a finite maximum, vectorized (core/reduce.h).
    const int32_t d = top_two(std::span<const float>(z, static_cast<size_t>(V))).id;
    out->tokens[k] = d;
    out->conf[k] = c;
    out->n = k + 1;
    prev = d;
  }
}

Expected<std::unique_ptr<DrafterModel>> load_drafter_model(const model::Model& target, backend::Backend& be,
                                                           const std::string& path) {
  auto w = open_drafter_weights(path, target.config());
  if (!w.ok()) return w.status();
  return DrafterModel::create(target, be, std::move(w).value());
}

Expected<std::unique_ptr<Drafter>> load_drafter(const model::Model& target, backend::Backend& be,
                                                const std::string& path) {
  auto m = load_drafter_model(target, be, path);
  if (!m.ok()) return m.status();
  auto d = std::make_unique<Drafter>(**m);
  d->owned_ = std::move(m).value();
  return d;
}

}  // namespace ds4::speculative
