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

// Activation buffers; shapes use B = block size (n = B rows: commit_chunk has main_x / ckv).
struct Drafter::Scratch {
  std::vector<float> x, x2, flat;   // [n, HC]
  std::vector<float> mix;           // [n, MIX]
  std::vector<float> y, h;          // [n, E]
  std::vector<float> post, comb;    // [n, n_hc], [n, n_hc*n_hc]
  std::vector<float> qa, qr;        // [n, QL]
  std::vector<float> q, heads;      // [n, Q]
  std::vector<float> kv;            // [n, D]
  std::vector<float> low;           // [n, OL]
  std::vector<float> o;             // [n, E]
  std::vector<float> router;        // [n, X]
  std::vector<float> probs;         // [B, X]
  std::vector<int32_t> sel;         // [n, U]
  std::vector<float> wt;            // [n, U]
  std::vector<float> moe_out, sh_out;  // [n, E]
  std::vector<uint8_t> moe_scratch;
  std::vector<float> sg, su;        // [n, F]
  std::vector<float> scores;        // [B, n_head, W + B] per-row attention scratch
  std::vector<const float*> ptrs;   // [W + B]
  std::vector<backend::SinkAttentionParams> queries;  // [B]
  std::vector<float> head_mix;      // [n, n_hc]
  std::vector<float> yhead;         // [B, E] pre-norm HC-head output
  std::vector<float> logits;        // [B, V] base logits U_k, then Z_k in place
  std::vector<float> bias;          // [V]
  std::vector<float> e;             // [R]
  std::vector<float> conf_in;       // [E + R]
  std::vector<float> main_x;        // [kCommitRows, E]
  std::vector<float> ckv;           // [kCommitRows, D]
};

Drafter::Drafter(const model::Model& target, backend::Backend& be, std::unique_ptr<DrafterWeights> w)
    : target_(target), cfg_(target.config()), be_(be), w_(std::move(w)) {
  const model::ModelConfig& c = cfg_;
  B_ = w_->config.block_size;
  W_ = w_->config.window;
  const int64_t n = B_;
  const int64_t E = c.n_embd, HC = c.hc_dim(), D = c.head_dim;
  ring_.assign(static_cast<size_t>(w_->config.n_stages) * W_ * D, 0.0f);
  s_ = std::make_unique<Scratch>();
  Scratch& s = *s_;
  s.x.assign(n * HC, 0.0f);
  s.x2.assign(n * HC, 0.0f);
  s.flat.assign(n * HC, 0.0f);
  s.mix.assign(n * c.hc_mix_dim(), 0.0f);
  s.y.assign(n * E, 0.0f);
  s.h.assign(n * E, 0.0f);
  s.post.assign(n * c.n_hc, 0.0f);
  s.comb.assign(n * c.n_hc * c.n_hc, 0.0f);
  s.qa.assign(n * c.q_lora_rank, 0.0f);
  s.qr.assign(n * c.q_lora_rank, 0.0f);
  s.q.assign(n * c.q_dim(), 0.0f);
  s.heads.assign(n * c.q_dim(), 0.0f);
  s.kv.assign(n * D, 0.0f);
  s.low.assign(n * c.o_low_dim(), 0.0f);
  s.o.assign(n * E, 0.0f);
  s.router.assign(n * c.n_expert, 0.0f);
  s.probs.assign(n * c.n_expert, 0.0f);
  s.sel.assign(n * c.n_expert_used, 0);
  s.wt.assign(n * c.n_expert_used, 0.0f);
  s.moe_out.assign(n * E, 0.0f);
  s.sh_out.assign(n * E, 0.0f);
  s.moe_scratch.assign(backend::moe_scratch_bytes(E, c.n_ff_exp, static_cast<int>(c.n_expert_used), static_cast<int>(n)), 0);
  s.sg.assign(n * c.n_ff_exp, 0.0f);
  s.su.assign(n * c.n_ff_exp, 0.0f);
  s.scores.assign(static_cast<size_t>(B_) * c.n_head * (W_ + B_), 0.0f);
  s.ptrs.assign(W_ + B_, nullptr);
  s.queries.assign(B_, backend::SinkAttentionParams());
  s.head_mix.assign(n * c.n_hc, 0.0f);
  s.yhead.assign(B_ * E, 0.0f);
  s.logits.assign(static_cast<size_t>(B_) * c.n_vocab, 0.0f);
  s.bias.assign(c.n_vocab, 0.0f);
  s.e.assign(w_->config.markov_rank, 0.0f);
  s.conf_in.assign(E + w_->config.markov_rank, 0.0f);
  s.main_x.assign(kCommitRows * E, 0.0f);
  s.ckv.assign(kCommitRows * D, 0.0f);
}

Drafter::~Drafter() = default;

Expected<std::unique_ptr<Drafter>> Drafter::create(const model::Model& target, backend::Backend& be,
                                                   std::unique_ptr<DrafterWeights> weights) {
  const model::ModelConfig& c = target.config();
  if (c.n_expert_used > 64 || c.n_hc > 16) return unsupported("drafter: n_expert_used/n_hc above 64/16");
  const auto& g = target.weights().global;
  if (g.token_embd.type != gguf::GgmlType::kF16)
    return unsupported("drafter: target token_embd must be f16, got %s", gguf::type_name(g.token_embd.type));
  return std::unique_ptr<Drafter>(new Drafter(target, be, std::move(weights)));
}

int64_t Drafter::capture_width() const {
  return static_cast<int64_t>(w_->config.target_layers.size()) * cfg_.n_embd;
}

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
  return ring_.data() + (static_cast<int64_t>(stage) * W_ + pos % W_) * D;
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
  matmul(be_, w_->main_proj, hidden, capture_width(), s.main_x.data(), E, n);
  rms_norm(be_, s.main_x.data(), w_->main_norm, s.main_x.data(), E, n, cfg_.rms_eps);
  for (int st = 0; st < w_->config.n_stages; ++st) {
    const StageWeights& sw = w_->stages[st];
    session::kv_projection(be_, cfg_, sw.attn_kv, sw.kv_a_norm, s.main_x.data(), E, s.ckv.data(), n);
    be_.attention_inputs(session::attention_inputs(cfg_, nullptr, s.ckv.data(), n, pos0, rp));
    for (int i = 0; i < n; ++i) {
      std::memcpy(ring_.data() + (static_cast<int64_t>(st) * W_ + (pos0 + i) % W_) * D, s.ckv.data() + i * D,
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
  const session::RawRing ring{ring_.data() + static_cast<int64_t>(st) * W_ * D, W_, first,
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

void Drafter::stage_forward(int st, int64_t pos) {
  stage_attention(st, pos);
  stage_ffn(st);
}

std::span<const float> Drafter::last_z(int k) const {
  return std::span<const float>(s_->logits.data() + static_cast<int64_t>(k) * cfg_.n_vocab, cfg_.n_vocab);
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
  const model::GlobalWeights& g = target_.weights().global;

  // Block input: [anchor, MASK, ...] target embeddings copied into every HC stream (§5).
  for (int i = 0; i < B_; ++i) {
    const int32_t tok = i == 0 ? anchor : w_->config.noise_token_id;
    const auto* row = reinterpret_cast<const uint16_t*>(g.token_embd.row(tok));
    float* x = s.x.data() + i * HC;
    for (int64_t d = 0; d < E; ++d) x[d] = quant::f16_to_f32(row[d]);
    for (int hh = 1; hh < nhc; ++hh) std::memcpy(x + hh * E, x, sizeof(float) * E);
  }
  for (int st = 0; st < w_->config.n_stages; ++st) stage_forward(st, pos);

  // HC head (§6): sigmoid-weighted collapse of every block row -> yhead (pre-norm).
  rms_norm(be_, s.x.data(), nullptr, s.flat.data(), HC, B_, cfg_.rms_eps);
  matmul(be_, w_->hc_head_fn, s.flat.data(), HC, s.head_mix.data(), nhc, B_);
  const float scale = w_->hc_head_scale[0];
  for (int i = 0; i < B_; ++i) {
    float wgt[16];
    for (int hh = 0; hh < nhc; ++hh) {
      wgt[hh] = sigmoid_stable(s.head_mix[i * nhc + hh] * scale + w_->hc_head_base[hh]) + cfg_.hc_eps;
    }
    const float* x = s.x.data() + i * HC;
    float* y = s.yhead.data() + i * E;
    for (int64_t d = 0; d < E; ++d) {
      float acc = 0.0f;
      for (int hh = 0; hh < nhc; ++hh) acc += x[hh * E + d] * wgt[hh];
      y[d] = acc;
    }
  }

  // Confidence of position k: σ(w · [y_k ; W1[prev]]) (§8), no bias.
  auto confidence = [&](int k, int32_t prev) {
    quant::dequantize_row(w_->markov_w1.type, w_->markov_w1.data + static_cast<size_t>(prev) * w_->markov_w1.row_bytes,
                          s.e.data(), R);
    std::memcpy(s.conf_in.data(), s.yhead.data() + k * E, sizeof(float) * E);
    std::memcpy(s.conf_in.data() + E, s.e.data(), sizeof(float) * R);
    float logit = 0.0f;
    matmul(be_, w_->confidence, s.conf_in.data(), E + R, &logit, 1, 1);
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
      quant::dequantize_row(w_->markov_w1.type, w_->markov_w1.data + static_cast<size_t>(prev) * w_->markov_w1.row_bytes,
                            s.e.data(), R);
    }
    matmul(be_, w_->markov_w2, s.e.data(), R, s.bias.data(), V, 1);
    float* z = s.logits.data() + static_cast<int64_t>(k) * V;
    for (int64_t v = 0; v < V; ++v) z[v] += s.bias[v];
    // markov_argmax(z, nullptr, V) for any row with a finite maximum, vectorized (core/reduce.h).
    const int32_t d = top_two(std::span<const float>(z, static_cast<size_t>(V))).id;
    out->tokens[k] = d;
    out->conf[k] = c;
    out->n = k + 1;
    prev = d;
  }
}

Expected<std::unique_ptr<Drafter>> load_drafter(const model::Model& target, backend::Backend& be, const std::string& path) {
  auto w = open_drafter_weights(path, target.config());
  if (!w.ok()) return w.status();
  return Drafter::create(target, be, std::move(w).value());
}

}  // namespace ds4::speculative
