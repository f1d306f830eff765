// session/forward.cpp — the DS4 forward graph (ds4-architecture.md §4) over backend ops.
//
// forward_rows() runs n <= kMaxChunkRows rows layer-major. Within a layer, everything that
// depends only on the row itself (HC pre, norms, projections, RoPE, FP8, the raw push, the
// indexer query, expert FFN, HC post) is one batched op over the n rows, and the state steps
// (compressor steps, prefix slots) run row by row in token order, exactly as a decode step
// (§5.1, §6.4).
// Each row's indexer selection and sink attention only read keys, so they are recorded as
// per-row queries and run as one batched call per group of rows (attention_layer). Every
// batched op is batch invariant, so a row's bits never depend on n.
// The block steps shared with the DSpark drafter (HC pre/post, projections, RoPE, sink
// attention of a row, output LoRA, FFN sublayer) live in session/block.h; this file keeps the
// target-only parts: embedding, compressors, indexer, raw window, prefix slots, output head.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/quant.h"
#include "session/block.h"
#include "session/scratch.h"
#include "session/session.h"

namespace ds4::session {

namespace {

// Bytes of one row's attention scratch (scores, key pointers, indexer scratch and mask), and
// the budget for all the rows of a batched attention call.
constexpr int64_t kAttnScratchBudget = int64_t{64} << 20;
// attention_layer defers a group's attention past the group's raw pushes: a later row of a
// chunk writes at most kMaxChunkRows - 1 positions past an earlier row's, which the ring's
// slack beyond the window keeps out of that row's window.
static_assert(kRollbackSlack >= kMaxChunkRows - 1);

int64_t attn_row_bytes(const model::ModelConfig& c, int64_t max_comp, int64_t raw_cap) {
  return static_cast<int64_t>(c.n_head) * (raw_cap + max_comp) * 4 + raw_cap * 8 + max_comp * 9;
}

}  // namespace

int ModelSession::Scratch::attn_group_rows(const model::ModelConfig& c, int64_t n_ctx, int64_t raw_cap) {
  const int64_t per_row = attn_row_bytes(c, n_ctx / 4 + 2, raw_cap);
  return static_cast<int>(std::clamp<int64_t>(kAttnScratchBudget / per_row, 1, kMaxBatchRows));
}

uint64_t ModelSession::Scratch::bytes(const model::ModelConfig& c, int64_t n_ctx, int64_t raw_cap) {
  const int64_t n = kMaxChunkRows;
  const int64_t E = c.n_embd, HC = c.hc_dim(), D = c.head_dim;
  const int64_t max_comp = n_ctx / 4 + 2;
  const int64_t G = attn_group_rows(c, n_ctx, raw_cap);
  uint64_t floats = 0;
  floats += 3 * n * HC + n * c.hc_mix_dim() + 2 * n * E + n * (c.n_hc + c.n_hc * c.n_hc);
  floats += 2 * n * c.q_lora_rank + 2 * n * c.q_dim() + n * D + 2 * n * 2 * D;
  floats += 2 * n * 2 * c.indexer_head_dim + n * c.indexer_q_dim() + n * c.n_indexer_head;
  floats += n * c.o_low_dim() + 3 * n * E + 2 * n * c.n_expert + 2 * n * c.n_expert_used;
  floats += 2 * n * c.n_ff_exp + n * E;
  floats += 2 * std::max<int64_t>(D, c.indexer_head_dim) + n * c.n_hc + kMaxBatchRows * c.n_vocab;
  const uint64_t attn = static_cast<uint64_t>(G * attn_row_bytes(c, max_comp, raw_cap)) +
                        G * (sizeof(backend::SinkAttentionParams) + sizeof(backend::IndexerSelectParams));
  return floats * 4 + attn + backend::moe_scratch_bytes(E, c.n_ff_exp, c.n_expert_used, n);
}

ModelSession::Scratch::Scratch(const model::ModelConfig& c, int64_t n_ctx, int64_t raw_cap) {
  const int64_t n = kMaxChunkRows;
  const int64_t E = c.n_embd, HC = c.hc_dim(), D = c.head_dim;
  const int64_t max_comp = n_ctx / 4 + 2;
  x.assign(n * HC, 0.0f);
  x2.assign(n * HC, 0.0f);
  flat.assign(n * HC, 0.0f);
  mix.assign(n * c.hc_mix_dim(), 0.0f);
  y.assign(n * E, 0.0f);
  post.assign(n * c.n_hc, 0.0f);
  comb.assign(n * c.n_hc * c.n_hc, 0.0f);
  h.assign(n * E, 0.0f);
  qa.assign(n * c.q_lora_rank, 0.0f);
  qr.assign(n * c.q_lora_rank, 0.0f);
  q.assign(n * c.q_dim(), 0.0f);
  kv.assign(n * D, 0.0f);
  ckv.assign(n * 2 * D, 0.0f);
  csc.assign(n * 2 * D, 0.0f);
  ikv.assign(n * 2 * c.indexer_head_dim, 0.0f);
  isc.assign(n * 2 * c.indexer_head_dim, 0.0f);
  iq.assign(n * c.indexer_q_dim(), 0.0f);
  iw.assign(n * c.n_indexer_head, 0.0f);
  heads.assign(n * c.q_dim(), 0.0f);
  low.assign(n * c.o_low_dim(), 0.0f);
  o.assign(n * E, 0.0f);
  router.assign(n * c.n_expert, 0.0f);
  probs.assign(n * c.n_expert, 0.0f);
  sel.assign(n * c.n_expert_used, 0);
  wt.assign(n * c.n_expert_used, 0.0f);
  moe_out.assign(n * E, 0.0f);
  moe_scratch.assign(backend::moe_scratch_bytes(E, c.n_ff_exp, c.n_expert_used, n), 0);
  sg.assign(n * c.n_ff_exp, 0.0f);
  su.assign(n * c.n_ff_exp, 0.0f);
  sh_out.assign(n * E, 0.0f);
  attn_rows = attn_group_rows(c, n_ctx, raw_cap);
  this->max_comp = max_comp;
  const int64_t G = attn_rows;
  attn_scores.assign(G * c.n_head * (raw_cap + max_comp), 0.0f);
  raw_ptrs.assign(G * raw_cap, nullptr);
  idx_scores.assign(G * max_comp, 0.0f);
  idx_order.assign(G * max_comp, 0);
  allowed.assign(G * max_comp, 0);
  attn_queries.assign(G, backend::SinkAttentionParams());
  idx_queries.assign(G, backend::IndexerSelectParams());
  pooled.assign(std::max<int64_t>(D, c.indexer_head_dim), 0.0f);
  crow.assign(std::max<int64_t>(D, c.indexer_head_dim), 0.0f);
  head_mix.assign(n * c.n_hc, 0.0f);
  row_logits.assign(kMaxBatchRows * c.n_vocab, 0.0f);
}

void ModelSession::forward_rows(const int32_t* tokens, int n, int logits_first, bool capture_slots) {
  DS4_CHECK(n >= 1 && n <= kMaxChunkRows);
  DS4_CHECK(n - logits_first <= kMaxBatchRows);
  DS4_CHECK(!capture_slots || n <= kMaxBatchRows);
  Scratch& s = *s_;
  const int64_t E = cfg_.n_embd, HC = cfg_.hc_dim();
  const int64_t pos0 = n_tokens();
  // Embedding: every HC stream starts as the token's embedding row (§4.1).
  const model::TensorView& emb = model_.weights().global.token_embd;
  for (int i = 0; i < n; ++i) {
    const auto* row = reinterpret_cast<const uint16_t*>(emb.row(tokens[i]));
    float* x = s.x.data() + i * HC;
    for (int64_t d = 0; d < E; ++d) x[d] = quant::f16_to_f32(row[d]);
    for (uint32_t hh = 1; hh < cfg_.n_hc; ++hh) std::memcpy(x + hh * E, x, sizeof(float) * E);
  }
  for (uint32_t il = 0; il < cfg_.n_layer; ++il) {
    attention_layer(static_cast<int>(il), n, pos0, capture_slots);
    ffn_layer(static_cast<int>(il), n, tokens);
    if (capture_index_.size() == cfg_.n_layer && capture_index_[il] >= 0) capture_hidden(static_cast<int>(il), n);
  }
  for (int i = 0; i < n; ++i) state_.tokens().push_back(tokens[i]);
  if (logits_first < n) output_head(logits_first, n);
  if (capture_sink_ && !capture_layers_.empty()) {
    const int64_t per_row = static_cast<int64_t>(capture_layers_.size()) * E;
    for (int i = 0; i < n; ++i) {
      capture_sink_(pos0 + i, std::span<const float>(captured_.data() + i * per_row, per_row));
    }
  }
}

void ModelSession::capture_hidden(int il, int n) {
  const int64_t E = cfg_.n_embd, HC = cfg_.hc_dim();
  const int k = capture_index_[il];
  const int64_t per_row = static_cast<int64_t>(capture_layers_.size()) * E;
  const float inv = 1.0f / static_cast<float>(cfg_.n_hc);
  for (int i = 0; i < n; ++i) {
    const float* x = s_->x.data() + i * HC;
    float* out = captured_.data() + i * per_row + k * E;
    for (int64_t d = 0; d < E; ++d) {
      float acc = x[d];
      for (uint32_t hh = 1; hh < cfg_.n_hc; ++hh) acc += x[hh * E + d];
      out[d] = acc * inv;
    }
  }
}

void ModelSession::attention_layer(int il, int n, int64_t pos0, bool capture_slots) {
  Scratch& s = *s_;
  const LayerMats& m = mats_[il];
  LayerState& L = state_.layers()[il];
  const int64_t E = cfg_.n_embd, D = cfg_.head_dim;
  const int64_t QL = cfg_.q_lora_rank, Q = cfg_.q_dim();
  const int n_rot = static_cast<int>(cfg_.n_rot);
  const int ratio = L.ratio;
  const int64_t W = ratio == 4 ? 2 * D : D;
  const int64_t IDX = cfg_.indexer_head_dim, IW = 2 * IDX, IQ = cfg_.indexer_q_dim();
  const int n_ih = static_cast<int>(cfg_.n_indexer_head);
  const int64_t top_k = cfg_.indexer_top_k;
  const float eps = cfg_.rms_eps;
  const model::RopeParams rp = cfg_.rope_params(static_cast<uint32_t>(il));

  const AttnMats am = attn_mats(m);
  const BlockScratch bs = block_scratch(s);
  attention_projections(be_, cfg_, am, bs, n);
  if (ratio != 0) {
    matmul(be_, m.cmp_kv, s.h.data(), E, s.ckv.data(), W, n);
    matmul(be_, m.cmp_gate, s.h.data(), E, s.csc.data(), W, n);
  }
  int first_idx_row = n;  // rows from here on have more indexer rows than top_k
  if (ratio == 4) {
    matmul(be_, m.idx_cmp_kv, s.h.data(), E, s.ikv.data(), IW, n);
    matmul(be_, m.idx_cmp_gate, s.h.data(), E, s.isc.data(), IW, n);
    for (int i = 0; i < n; ++i) {
      if ((pos0 + i + 1) / 4 > top_k) {
        first_idx_row = i;
        break;
      }
    }
    if (first_idx_row < n) {
      const int cnt = n - first_idx_row;
      matmul(be_, m.idx_q_b, s.qr.data() + first_idx_row * QL, QL, s.iq.data() + first_idx_row * IQ, IQ, cnt);
      matmul(be_, m.idx_proj, s.h.data() + first_idx_row * E, E, s.iw.data() + first_idx_row * n_ih, n_ih, cnt);
    }
  }

  const int64_t raw_cap = state_.raw_cap();
  const int64_t swa = cfg_.n_swa;
  const int64_t max_comp = s.max_comp;
  const int64_t row_scores = static_cast<int64_t>(cfg_.n_head) * (raw_cap + max_comp);
  // Everything row-local first, all rows in one op (no state read, so the rows may run in
  // parallel): q/kv RoPE, kv's FP8 round trip and its f16 raw push, the indexer queries. The
  // raw pushes of positions pos0 .. pos0 + n - 1 all precede every row's attention; those
  // slots stay clear of each row's window (raw_cap = window + kRollbackSlack >= window +
  // kMaxChunkRows - 1), so each row sees the raw rows it saw when the rows ran one by one.
  backend::AttentionInputsParams ai = attention_inputs(cfg_, s.q.data(), s.kv.data(), n, pos0, rp);
  ai.raw = L.raw.data();
  ai.raw_cap = raw_cap;
  if (first_idx_row < n) {
    ai.iq = s.iq.data();
    ai.iw = s.iw.data();
    ai.n_idx_head = n_ih;
    ai.idx_dim = static_cast<int>(IDX);
    ai.idx_first = first_idx_row;
    ai.iw_scale = 1.0f / sqrtf(static_cast<float>(IDX * n_ih));
  }
  be_.attention_inputs(ai);

  // Rows in groups of s.attn_rows: first each row's state steps in token order (compressor
  // steps, the prefix slot), recording its attention (and indexer) query over the keys visible
  // to it; then the group's indexer selections and attentions as two batched calls. Attention
  // outputs feed nothing of the state and later rows of the group append compressed / indexer
  // rows past the counters a query recorded, so each query sees exactly what it saw when the
  // rows ran one by one.
  for (int g0 = 0; g0 < n; g0 += s.attn_rows) {
    const int g = std::min(s.attn_rows, n - g0);
    int n_sel = 0;
    for (int j = 0; j < g; ++j) {
      const int i = g0 + j;
      const int64_t pos = pos0 + i;

      // One compressor step (§4.4); a row emitted at this position is f16-rounded and
      // appended to its cache (attention rows [n_comp, D] or indexer rows [n_index, IDX]).
      auto compress = [&](float* st_kv, float* st_sc, const float* kv_cur, const float* sc_cur,
                          const uint16_t* ape, const float* norm, int r, int64_t dim,
                          bool indexer, float* rows, int64_t& n_rows) {
        backend::CompressorStepParams cp;
        cp.state_kv = st_kv;
        cp.state_score = st_sc;
        cp.kv_cur = kv_cur;
        cp.sc_cur = sc_cur;
        cp.ape = ape;
        cp.norm = norm;
        cp.ratio = r;
        cp.head_dim = static_cast<int>(dim);
        cp.n_rot = n_rot;
        cp.pos = pos;
        cp.eps = eps;
        cp.rope = rp;
        cp.indexer = indexer;
        cp.pooled = s.pooled.data();
        cp.out_row = s.crow.data();
        if (!be_.compressor_step(cp)) return;
        DS4_CHECK(n_rows < state_.comp_cap(il));
        quant::f16_round_row(s.crow.data(), rows + n_rows * dim, dim);
        ++n_rows;
      };
      if (ratio != 0) {
        compress(L.cmp_kv.data(), L.cmp_score.data(), s.ckv.data() + i * W, s.csc.data() + i * W,
                 m.cmp_ape, m.cmp_norm, ratio, D, false, L.comp.data(), L.n_comp);
      }
      const uint8_t* allowed = nullptr;
      if (ratio == 4) {
        compress(L.idx_kv.data(), L.idx_score.data(), s.ikv.data() + i * IW,
                 s.isc.data() + i * IW, m.idx_cmp_ape, m.idx_cmp_norm, 4, IDX, true,
                 L.index.data(), L.n_index);
        if (L.n_index > top_k) {
          DS4_CHECK(i >= first_idx_row);  // its query was prepared by attention_inputs
          backend::IndexerSelectParams& ip = s.idx_queries[n_sel++];
          ip.q = s.iq.data() + i * IQ;
          ip.w = s.iw.data() + i * n_ih;
          ip.rows = L.index.data();
          ip.n_rows = L.n_index;
          ip.n_head = n_ih;
          ip.head_dim = static_cast<int>(IDX);
          ip.top_k = static_cast<int>(top_k);
          ip.scores = s.idx_scores.data() + j * max_comp;
          ip.order = s.idx_order.data() + j * max_comp;
          ip.allowed = s.allowed.data() + j * max_comp;
          allowed = ip.allowed;
        }
      }

      // Raw window: positions [max(0, pos - swa + 1), pos], oldest first.
      const int64_t first = std::max<int64_t>(0, pos - swa + 1);
      const float** raw_ptrs = s.raw_ptrs.data() + j * raw_cap;
      int n_raw = 0;
      for (int64_t p = first; p <= pos; ++p) raw_ptrs[n_raw++] = L.raw.data() + (p % raw_cap) * D;
      s.attn_queries[j] = attention_query(cfg_, s.q.data() + i * Q, raw_ptrs, n_raw,
                                          ratio != 0 ? L.comp.data() : nullptr, ratio != 0 ? L.n_comp : 0,
                                          allowed, m.sinks, s.attn_scores.data() + j * row_scores,
                                          s.heads.data() + i * Q, pos, rp);
      // Slot i is the state after row i for commit_prefix(i + 1) < n; the last row's state is
      // the live one, so its slot is never restored and not saved.
      if (capture_slots && i + 1 < n) state_.save_layer_frontier(il, slots_[i]);
    }
    if (n_sel > 0) be_.indexer_select(s.idx_queries.data(), n_sel);
    be_.sink_attention(s.attn_queries.data(), g);
  }

  attention_output(be_, cfg_, am, bs, n);
  std::swap(s.x, s.x2);
}

void ModelSession::ffn_layer(int il, int n, const int32_t* tokens) {
  Scratch& s = *s_;
  ffn_sublayer(be_, cfg_, ffn_mats(mats_[il]), block_scratch(s), n, tokens, cfg_.swiglu_clamp[il]);
  std::swap(s.x, s.x2);
}

void ModelSession::output_head(int first, int n) {
  Scratch& s = *s_;
  const int64_t E = cfg_.n_embd, HC = cfg_.hc_dim();
  const int nhc = static_cast<int>(cfg_.n_hc);
  const int rows = n - first;
  const model::GlobalWeights& g = model_.weights().global;
  // HC collapse (§4.7), final RMSNorm, Q8_0 LM head.
  backend::HcCollapseParams cp;
  cp.x = s.x.data() + first * HC;
  cp.fn = backend::Matrix{g.output_hc_fn.data, g.output_hc_fn.type, g.output_hc_fn.ne[0], g.output_hc_fn.ne[1],
                          g.output_hc_fn.row_bytes};
  cp.scale = g.output_hc_scale.as<float>()[0];
  cp.base = g.output_hc_base.as<float>();
  cp.n_hc = nhc;
  cp.n_embd = E;
  cp.norm_eps = cfg_.rms_eps;
  cp.hc_eps = cfg_.hc_eps;
  cp.n_rows = rows;
  cp.flat = s.flat.data() + first * HC;
  cp.mix = s.head_mix.data() + first * nhc;
  cp.y = s.y.data() + first * E;
  be_.hc_collapse(cp);
  rms_norm(be_, s.y.data() + first * E, g.output_norm.as<float>(), s.h.data() + first * E, E, rows, cfg_.rms_eps);
  backend::Matrix head{g.output.data, g.output.type, g.output.ne[0], g.output.ne[1], g.output.row_bytes};
  // Row i's logits land in row_logits row (i - first).
  matmul(be_, head, s.h.data() + first * E, E, s.row_logits.data(), cfg_.n_vocab, rows);
}

}  // namespace ds4::session
