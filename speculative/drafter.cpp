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
#include "session/binding.h"
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
  Arr<float> sh_out;                // [n, E]
  Arr<uint8_t> moe_scratch;         // moe_scratch_bytes(E, F, U, n)
  Arr<float> sg, su;                // [n, F]
  // Each sublayer's HC post, carried into the next HC pre (one op: session::HcCarry); the
  // output head flushes the last one.
  session::HcCarry carry;
  Arr<float> scores;                // [B, n_head, W + B] per-row attention scratch
  std::vector<backend::SinkAttentionParams> queries;  // [B]
  Arr<float> head_mix;              // [n, n_hc]
  Arr<float> yhead;                 // [B, E] pre-norm HC-head output
  Arr<float> logits;                // [B, V] base logits U_k, then Z_k in place
  Arr<float> bias;                  // [V]
  Arr<float> conf_in;               // [E + R] [y_k ; e], e = W1[prev] (also the W2 input)
  Arr<int32_t> block_tokens;        // [B] anchor, then the MASK token
  // The chain's words, one read-back per step: word 0 the anchor, then per position k the
  // confidence logit (f32 bits) at 1 + 2k and the draft d_k at 2 + 2k. So the previous draft
  // (the W1 row id of position k) and position k's logit are the adjacent words 2k, 2k + 1.
  Arr<int32_t> chain;               // [1 + 2B]
  Arr<float> main_x;                // [kCommitRows, E]
  Arr<float> ckv;                   // [kCommitRows, D]
};

DrafterModel::DrafterModel(const model::Model& target, backend::Backend& be, std::unique_ptr<DrafterWeights> w)
    : target_(target), be_(be), w_(std::move(w)) {}

DrafterModel::~DrafterModel() = default;

Status DrafterModel::check(const model::Model& target, const DrafterWeights& w) {
  const model::ModelConfig& c = target.config();
  if (c.n_expert_used > 64 || c.n_hc > 16) return unsupported("drafter: n_expert_used/n_hc above 64/16");
  const auto& g = target.weights().global;
  if (g.token_embd.type != gguf::GgmlType::kF16)
    return unsupported("drafter: target token_embd must be f16, got %s", gguf::type_name(g.token_embd.type));
  if (w.hc_head_scale == nullptr) return invalid_argument("drafter: hc_head_scale is not bound");
  return Status();
}

// One bind_weights call over every support tensor (the mmapped file's and the F32 copies of
// converted ones), and with_target_head: the target's embedding and LM head too.
void DrafterModel::bind(bool with_target_head) {
  const DrafterWeights& w = *w_;
  std::vector<backend::WeightRange> ranges;
  for (const gguf::TensorInfo& t : w.file->tensors()) {
    if (t.nbytes > 0) ranges.push_back(backend::WeightRange{t.data, static_cast<size_t>(t.nbytes)});
  }
  for (const std::vector<float>& v : w.owned) ranges.push_back(backend::WeightRange{v.data(), v.size() * sizeof(float)});
  const model::GlobalWeights& g = target_.weights().global;
  if (with_target_head) {
    ranges.push_back(backend::WeightRange{g.token_embd.data, static_cast<size_t>(g.token_embd.nbytes)});
    ranges.push_back(backend::WeightRange{g.output.data, static_cast<size_t>(g.output.nbytes)});
  }
  set_ = be_.bind_weights(ranges);
  const backend::WeightSet& ws = *set_;
  auto mat = [&](backend::Matrix m) {
    m.data = ws.map(m.data);
    return m;
  };
  auto emat = [&](backend::ExpertMatrix m) {
    m.data = ws.map(m.data);
    return m;
  };
  DrafterMats& d = mats_;
  for (const StageWeights& h : w.stages) {
    StageWeights st = h;
    st.hc_attn_fn = mat(h.hc_attn_fn);
    st.attn_q_a = mat(h.attn_q_a);
    st.attn_q_b = mat(h.attn_q_b);
    st.attn_kv = mat(h.attn_kv);
    st.attn_output_a = mat(h.attn_output_a);
    st.attn_output_b = mat(h.attn_output_b);
    st.hc_ffn_fn = mat(h.hc_ffn_fn);
    st.ffn_gate_inp = mat(h.ffn_gate_inp);
    st.ffn_gate_shexp = mat(h.ffn_gate_shexp);
    st.ffn_up_shexp = mat(h.ffn_up_shexp);
    st.ffn_down_shexp = mat(h.ffn_down_shexp);
    st.gate_exps = emat(h.gate_exps);
    st.up_exps = emat(h.up_exps);
    st.down_exps = emat(h.down_exps);
    st.hc_attn_scale = ws.map(h.hc_attn_scale);
    st.hc_attn_base = ws.map(h.hc_attn_base);
    st.attn_norm = ws.map(h.attn_norm);
    st.q_a_norm = ws.map(h.q_a_norm);
    st.kv_a_norm = ws.map(h.kv_a_norm);
    st.sinks = ws.map(h.sinks);
    st.hc_ffn_scale = ws.map(h.hc_ffn_scale);
    st.hc_ffn_base = ws.map(h.hc_ffn_base);
    st.ffn_norm = ws.map(h.ffn_norm);
    st.exp_probs_b = ws.map(h.exp_probs_b);
    d.stages.push_back(st);
  }
  d.main_proj = mat(w.main_proj);
  d.main_norm = ws.map(w.main_norm);
  d.norm = ws.map(w.norm);
  d.hc_head_fn = mat(w.hc_head_fn);
  d.hc_head_scale = w.hc_head_scale[0];
  d.hc_head_base = ws.map(w.hc_head_base);
  d.markov_w1 = mat(w.markov_w1);
  d.markov_w2 = mat(w.markov_w2);
  d.confidence = mat(w.confidence);
  if (with_target_head) {
    d.token_embd = ws.map(g.token_embd.data);
    d.token_embd_row_bytes = static_cast<size_t>(g.token_embd.row_bytes);
    d.output = backend::Matrix{ws.map(g.output.data), g.output.type, g.output.ne[0], g.output.ne[1],
                               static_cast<size_t>(g.output.row_bytes)};
  }
}

Expected<std::unique_ptr<DrafterModel>> DrafterModel::create(const session::BoundModel& target,
                                                             std::unique_ptr<DrafterWeights> weights) {
  DS4_RETURN_IF_ERROR(check(target.model(), *weights));
  std::unique_ptr<DrafterModel> m(new DrafterModel(target.model(), target.backend(), std::move(weights)));
  m->bind(false);
  const session::HeadMats& h = target.head();
  m->mats_.token_embd = h.token_embd;
  m->mats_.token_embd_row_bytes = h.token_embd_row_bytes;
  m->mats_.output = h.output;
  return m;
}

Expected<std::unique_ptr<DrafterModel>> DrafterModel::create(const model::Model& target, backend::Backend& be,
                                                             std::unique_ptr<DrafterWeights> weights) {
  DS4_RETURN_IF_ERROR(check(target, *weights));
  std::unique_ptr<DrafterModel> m(new DrafterModel(target, be, std::move(weights)));
  m->bind(true);
  return m;
}

int64_t DrafterModel::capture_width() const {
  return static_cast<int64_t>(w_->config.target_layers.size()) * target_.config().n_embd;
}

Drafter::Drafter(const DrafterModel& model)
    : m_(model), cfg_(model.target().config()), be_(model.backend()), w_(&model.weights()), mw_(&model.mats()),
      eager_chain_(!model.backend().host_addressable()) {
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
  s.conf_in.alloc(be, E + w_->config.markov_rank);
  s.block_tokens.alloc(be, B_);
  std::vector<int32_t> mask(static_cast<size_t>(B_), w_->config.noise_token_id);
  be.upload(s.block_tokens.data(), mask.data(), sizeof(int32_t) * mask.size());
  s.chain.alloc(be, 1 + 2 * static_cast<size_t>(B_));
  s.main_x.alloc(be, kCommitRows * E);
  s.ckv.alloc(be, kCommitRows * D);
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
  matmul(be_, mw_->main_proj, hidden, capture_width(), s.main_x.data(), E, n);
  rms_norm(be_, s.main_x.data(), mw_->main_norm, s.main_x.data(), E, n, cfg_.rms_eps);
  for (int st = 0; st < w_->config.n_stages; ++st) {
    const StageWeights& sw = mw_->stages[st];
    session::kv_projection(be_, cfg_, sw.attn_kv, sw.kv_a_norm, s.main_x.data(), E, s.ckv.data(), n);
    be_.attention_inputs(session::attention_inputs(cfg_, nullptr, s.ckv.data(), nullptr, n, pos0, rp));
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
  const session::AttnMats am = session::attn_mats(mw_->stages[st]);
  const session::BlockScratch bs = session::block_scratch(s);
  session::attention_projections(be_, cfg_, am, bs, n, {}, &s.carry);
  be_.attention_inputs(session::attention_inputs(cfg_, s.q.data(), s.kv.data(), am.kv_a_norm, n, pos, rp));
  // Key set (identical for every slot): ring rows of positions max(start, P-W)..P-1, then the
  // block rows, bidirectionally (§3.3): the ring as the raw keys, the block rows as the
  // (all allowed) compressed keys, so the attention order is the same.
  const int64_t first = std::max<int64_t>(ring_start_, pos - W_);
  const session::RawRing ring{ring_.as<float>() + static_cast<int64_t>(st) * W_ * D, W_, first,
                              static_cast<int>(pos - first)};
  const session::CompRows block{s.kv.data(), nullptr, n};  // f32 keys (FP8 round-tripped only)
  const int64_t row_scores = static_cast<int64_t>(cfg_.n_head) * (ring.n + n);
  for (int i = 0; i < n; ++i) {
    s.queries[i] = session::attention_query(cfg_, s.q.data() + i * Q, ring, block, nullptr, am.sinks,
                                            s.scores.data() + i * row_scores, s.heads.data() + i * Q, pos + i, rp);
  }
  be_.sink_attention(s.queries.data(), n);
  session::attention_output(be_, cfg_, am, bs, n, &s.carry);
  std::swap(s.x, s.x2);
}

// Learned routing (§4): top-U by score + exp_probs_b (no hash table), shared expert, HC post.
void Drafter::stage_ffn(int st) {
  Scratch& s = *s_;
  session::ffn_sublayer(be_, cfg_, session::ffn_mats(mw_->stages[st]), session::block_scratch(s), B_, nullptr,
                        cfg_.swiglu_clamp.back(), &s.carry);
  std::swap(s.x, s.x2);
}

// The backend's output-head collapse (§4.7, the target's op) with the drafter's hc_head:
// rms_norm(x) -> mix = fn · flat -> w_h = σ(mix_h·scale + base_h) + hc_eps -> y = Σ_h w_h·x_h.
void Drafter::output_head() {
  Scratch& s = *s_;
  backend::HcCollapseParams cp;
  cp.x = s.x.data();
  cp.fn = mw_->hc_head_fn;
  cp.scale = mw_->hc_head_scale;
  cp.base = mw_->hc_head_base;
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
  const int64_t E = cfg_.n_embd, V = cfg_.n_vocab;
  const int R = w_->config.markov_rank;
  int32_t* const chain = s.chain.data();

  // Block input: [anchor, MASK, ...] target embeddings copied into every HC stream (§5). The
  // anchor is the one upload of a proposal; it is also the chain's word 0 (the W1 row of k = 0).
  be_.upload(s.block_tokens.data(), &anchor, sizeof(int32_t));
  be_.copy(chain, s.block_tokens.data(), sizeof(int32_t));
  backend::EmbedParams ep;
  ep.table = mw_->token_embd;
  ep.row_bytes = mw_->token_embd_row_bytes;
  ep.tokens = s.block_tokens.data();
  ep.n_rows = B_;
  ep.n_hc = static_cast<int>(cfg_.n_hc);
  ep.n_embd = E;
  ep.out = s.x.data();
  be_.embed(ep);
  for (int st = 0; st < w_->config.n_stages; ++st) stage_forward(st, pos);
  s.carry.flush(be_);  // the last stage's HC post: the head reads its HC state

  // HC head (§6): sigmoid-weighted collapse of every block row -> yhead (pre-norm).
  output_head();

  // Confidence logit of position k (§8, no bias): conf_in = [y_k ; W1[chain word 2k]] (the
  // previous draft, or the anchor), logit -> chain word 1 + 2k. All on the backend.
  auto confidence_logit = [&](int k) {
    be_.copy(s.conf_in.data(), s.yhead.data() + k * E, sizeof(float) * E);
    backend::GetRowsParams gp;
    gp.w = mw_->markov_w1;
    gp.ids = chain + 2 * k;
    gp.n_rows = 1;
    gp.out = s.conf_in.data() + E;
    gp.out_stride = R;
    be_.get_rows(gp);
    matmul(be_, mw_->confidence, s.conf_in.data(), E + R, reinterpret_cast<float*>(chain + 1 + 2 * k), 1, 1);
  };
  // The one read-back of chain step k: words 2k (the previous draft) and 2k + 1 (the logit).
  auto read_step = [&](int k, int32_t* prev) {
    int32_t words[2];
    be_.download(words, chain + 2 * k, sizeof(words));
    float logit;
    std::memcpy(&logit, &words[1], sizeof(float));
    *prev = words[0];
    conf_logit_[k] = logit;
    return sigmoid_stable(logit);
  };

  // conf0 precheck before the vocab head.
  int32_t prev = anchor;
  confidence_logit(0);
  out->conf0 = read_step(0, &prev);
  if (out->conf0 < threshold_at(thr, 0)) {
    out->conf0_rejected = true;
    return;
  }
  // Base logits U_k = output · RMSNorm_norm(y_k) for the rows the chain may reach.
  rms_norm(be_, s.yhead.data(), mw_->norm, s.h.data(), E, n_max, cfg_.rms_eps);
  matmul(be_, mw_->output, s.h.data(), E, s.logits.data(), V, n_max);

  // Markov chain step k (§7): Z_k = U_k + W2·W1[prev]; d_k = argmax (ties -> smallest id, NaN
  // never wins: markov_argmax's rule) into chain word 2 + 2k. conf_in's tail holds W1[prev] of
  // position k when step k runs.
  auto chain_step = [&](int k) {
    float* z = s.logits.data() + static_cast<int64_t>(k) * V;
    matmul(be_, mw_->markov_w2, s.conf_in.data() + E, R, s.bias.data(), V, 1);
    be_.add(backend::AddParams{z, s.bias.data(), z, V});
    be_.argmax(backend::ArgmaxParams{z, V, V, 1, chain + 2 + 2 * k});
  };
  if (eager_chain_) {
    // Every step on the backend, then the whole chain (words 0 .. 2·n_max) in one read; the
    // host replays the lazy loop's stop rule on it.
    for (int k = 0; k < n_max; ++k) {
      chain_step(k);
      if (k + 1 < n_max) confidence_logit(k + 1);
    }
    int32_t words[2 * kMaxBlockSize + 1];
    be_.download(words, chain, sizeof(int32_t) * (2 * n_max + 1));
    for (int k = 0; k < n_max; ++k) {
      float c = out->conf0;
      if (k > 0) {
        float logit;
        std::memcpy(&logit, &words[1 + 2 * k], sizeof(float));
        conf_logit_[k] = logit;
        c = sigmoid_stable(logit);
        out->tokens[k - 1] = words[2 * k];
        if (c < threshold_at(thr, k)) break;
      }
      out->conf[k] = c;
      out->n = k + 1;
    }
    if (out->n == n_max) out->tokens[n_max - 1] = words[2 * n_max];
    return;
  }
  // Lazy chain: one 8-byte read per step, stopping at the first position below threshold.
  for (int k = 0; k < n_max; ++k) {
    float c = out->conf0;
    if (k > 0) {
      c = read_step(k, &prev);  // prev = d_{k-1}
      out->tokens[k - 1] = prev;
      if (c < threshold_at(thr, k)) break;
    }
    chain_step(k);
    out->conf[k] = c;
    out->n = k + 1;
    if (k + 1 < n_max) confidence_logit(k + 1);
  }
  // The last draft when the chain ran to n_max (a break already read d_{n-1} with its step).
  if (out->n == n_max) be_.download(&out->tokens[n_max - 1], chain + 2 * n_max, sizeof(int32_t));
}

Expected<std::unique_ptr<DrafterModel>> load_drafter_model(const session::BoundModel& target,
                                                           const std::string& path) {
  auto w = open_drafter_weights(path, target.model().config());
  if (!w.ok()) return w.status();
  return DrafterModel::create(target, std::move(w).value());
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
