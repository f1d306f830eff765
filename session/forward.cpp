// session/forward.cpp — the DS4 forward graph (ds4-architecture.md §4) over backend ops.
//
// forward_rows() runs n <= the scratch's rows (the prefill chunk) layer-major. Within a layer,
// everything that depends only on the row itself (HC pre, norms, projections, RoPE, FP8, the
// raw push, the indexer query, expert FFN, HC post) is one batched op over the n rows, and the
// state steps (compressor steps, prefix slots) run row by row in token order, exactly as a
// decode step (§5.1, §6.4).
// Each row's indexer selection and sink attention only read keys, so they are recorded as
// per-row queries and run as one batched call per group of rows (attention_layer). Every
// batched op is batch invariant, so a row's bits never depend on n.
// decode_many() runs the same graph with `owners`: row i is one token of session owners[i]; the
// row-local ops still run over all rows (this session's scratch), while the raw push, state
// steps, attention scratch and captured hidden of each row use its owner's.
// The block steps shared with the DSpark drafter (HC pre/post, projections, RoPE, sink
// attention of a row, output LoRA, FFN sublayer) live in session/block.h; this file keeps the
// target-only parts: embedding, compressors, indexer, raw window, prefix slots, output head.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/kv_sim.h"
#include "session/block.h"
#include "session/scratch.h"
#include "session/session.h"

namespace ds4::session {

namespace {

// Bytes of one row's attention scratch (scores, indexer scratch and mask), and
// the budget for all the rows of a batched attention call.
constexpr int64_t kAttnScratchBudget = int64_t{64} << 20;
// attention_layer defers a group's attention past the group's raw pushes: a later row of a
// chunk writes at most (scratch rows) - 1 positions past an earlier row's, which the ring's
// slack beyond the window (raw_slack of the chunk, >= the scratch rows) keeps out of that
// row's window.
static_assert(raw_slack(1) >= kMaxBatchRows && raw_slack(kMaxChunkRows) >= kMaxChunkRows);

int64_t attn_row_bytes(const model::ModelConfig& c, int64_t max_comp, int64_t raw_cap) {
  return static_cast<int64_t>(c.n_head) * (raw_cap + max_comp) * 4 + max_comp * 9;
}

}  // namespace

int ModelSession::Scratch::attn_group_rows(const model::ModelConfig& c, int64_t n_ctx, int64_t raw_cap, int rows) {
  const int64_t per_row = attn_row_bytes(c, n_ctx / 4 + 2, raw_cap);
  return static_cast<int>(std::clamp<int64_t>(kAttnScratchBudget / per_row, 1, rows));
}

uint64_t ModelSession::Scratch::bytes(const model::ModelConfig& c, int64_t n_ctx, int64_t raw_cap, int rows) {
  const int64_t n = rows_for(rows);
  const int64_t E = c.n_embd, HC = c.hc_dim(), D = c.head_dim;
  const int64_t max_comp = n_ctx / 4 + 2;
  const int64_t G = attn_group_rows(c, n_ctx, raw_cap, static_cast<int>(n));
  uint64_t floats = 0;
  floats += 3 * n * HC + n * c.hc_mix_dim() + 2 * n * E + n * (c.n_hc + c.n_hc * c.n_hc);
  floats += 2 * n * c.q_lora_rank + 2 * n * c.q_dim() + n * D + 2 * n * 2 * D;
  floats += 2 * n * 2 * c.indexer_head_dim + n * c.indexer_q_dim() + n * c.n_indexer_head;
  floats += n * c.o_low_dim() + 2 * n * E + 2 * n * c.n_expert + 2 * n * c.n_expert_used;
  floats += 2 * n * c.n_ff_exp + n * E;
  floats += std::max<int64_t>(D, c.indexer_head_dim) + n * c.n_hc + kMaxBatchRows * c.n_vocab;
  floats += n + kMaxBatchRows;       // token ids and argmax (int32)
  floats += 2 * backend::kTopKMax;   // the read-out: ids (int32) + margins / candidate values
  const uint64_t attn = static_cast<uint64_t>(G * attn_row_bytes(c, max_comp, raw_cap)) +
                        G * (sizeof(backend::SinkAttentionParams) + sizeof(backend::IndexerSelectParams));
  return floats * 4 + attn + backend::moe_scratch_bytes(E, c.n_ff_exp, c.n_expert_used, n);
}

ModelSession::Scratch::Scratch(backend::Backend& be, const model::ModelConfig& c, int64_t n_ctx, int64_t raw_cap,
                               int chunk_rows)
    : rows(rows_for(chunk_rows)) {
  auto f32 = [&be](int64_t n) { return backend::Array<float>(be, static_cast<size_t>(n)); };
  auto i32 = [&be](int64_t n) { return backend::Array<int32_t>(be, static_cast<size_t>(n)); };
  auto u8 = [&be](int64_t n) { return backend::Array<uint8_t>(be, static_cast<size_t>(n)); };
  const int64_t n = rows;
  const int64_t E = c.n_embd, HC = c.hc_dim(), D = c.head_dim;
  const int64_t max_comp = n_ctx / 4 + 2;
  x = f32(n * HC);
  x2 = f32(n * HC);
  flat = f32(n * HC);
  mix = f32(n * c.hc_mix_dim());
  y = f32(n * E);
  post = f32(n * c.n_hc);
  comb = f32(n * c.n_hc * c.n_hc);
  h = f32(n * E);
  qa = f32(n * c.q_lora_rank);
  qr = f32(n * c.q_lora_rank);
  q = f32(n * c.q_dim());
  kv = f32(n * D);
  ckv = f32(n * 2 * D);
  csc = f32(n * 2 * D);
  ikv = f32(n * 2 * c.indexer_head_dim);
  isc = f32(n * 2 * c.indexer_head_dim);
  iq = f32(n * c.indexer_q_dim());
  iw = f32(n * c.n_indexer_head);
  heads = f32(n * c.q_dim());
  low = f32(n * c.o_low_dim());
  o = f32(n * E);
  router = f32(n * c.n_expert);
  probs = f32(n * c.n_expert);
  sel = i32(n * c.n_expert_used);
  wt = f32(n * c.n_expert_used);
  moe_scratch = u8(backend::moe_scratch_bytes(E, c.n_ff_exp, c.n_expert_used, n));
  sg = f32(n * c.n_ff_exp);
  su = f32(n * c.n_ff_exp);
  sh_out = f32(n * E);
  attn_rows = attn_group_rows(c, n_ctx, raw_cap, rows);
  this->max_comp = max_comp;
  const int64_t G = attn_rows;
  attn_scores = f32(G * c.n_head * (raw_cap + max_comp));
  idx_scores = f32(G * max_comp);
  idx_order = i32(G * max_comp);
  allowed = u8(G * max_comp);
  attn_queries.assign(G, backend::SinkAttentionParams());
  comp_steps.reserve(2 * kMaxBatchRows);  // groups of up to kMaxBatchRows rows use it (prefill groups: compressor_rows)
  idx_queries.assign(G, backend::IndexerSelectParams());
  pooled = f32(std::max<int64_t>(D, c.indexer_head_dim));
  head_mix = f32(n * c.n_hc);
  row_logits = f32(kMaxBatchRows * c.n_vocab);
  tokens = i32(n);
  argmax = i32(kMaxBatchRows);
  readout = i32(2 * backend::kTopKMax);
}

void ModelSession::forward_rows(const int32_t* tokens, int n, int logits_first, bool capture_slots,
                                ModelSession* const* owners) {
  DS4_CHECK(n >= 1 && n <= s_->rows);
  DS4_CHECK(state_.raw_cap() - std::min<int64_t>(cfg_.n_swa, state_.n_ctx()) >= n - 1);  // the ring's slack
  DS4_CHECK(n - logits_first <= kMaxBatchRows);
  DS4_CHECK(!capture_slots || n <= kMaxBatchRows);
  DS4_CHECK(owners == nullptr || (n <= kMaxBatchRows && !capture_slots));
  Scratch& s = *s_;
  const int64_t E = cfg_.n_embd;
  const int64_t pos0 = n_tokens();
  int64_t row_pos[kMaxBatchRows] = {};  // owners: each row's position in its own session
  if (owners != nullptr) {
    for (int i = 0; i < n; ++i) row_pos[i] = owners[i]->n_tokens();
  }
  // Embedding: every HC stream starts as the token's embedding row (§4.1).
  be_.upload(s.tokens.data(), tokens, sizeof(int32_t) * n);
  // The ops of this forward, from the embedding to the output head, in one bracket (a device
  // backend may replay them as one graph: Backend::begin_forward); the capture sinks below
  // and every read-back come after it.
  be_.begin_forward(n);
  backend::EmbedParams ep;
  ep.table = bound_->head().token_embd;
  ep.row_bytes = bound_->head().token_embd_row_bytes;
  ep.tokens = s.tokens.data();
  ep.n_rows = n;
  ep.n_hc = static_cast<int>(cfg_.n_hc);
  ep.n_embd = E;
  ep.out = s.x.data();
  be_.embed(ep);
  for (uint32_t il = 0; il < cfg_.n_layer; ++il) {
    attention_layer(static_cast<int>(il), n, pos0, capture_slots, owners);
    ffn_layer(static_cast<int>(il), n, s.tokens.data());
    capture_hidden(static_cast<int>(il), n, owners);
  }
  s.carry.flush(be_);  // the last layer's HC post
  for (int i = 0; i < n; ++i) (owners != nullptr ? owners[i] : this)->state_.tokens().push_back(tokens[i]);
  if (logits_first < n) output_head(logits_first, n);
  be_.end_forward();
  if (owners != nullptr) {
    for (int i = 0; i < n; ++i) {
      ModelSession& o = *owners[i];
      if (o.capture_sink_ && !o.capture_layers_.empty()) o.capture_sink_(row_pos[i], o.captured_backend_row(0));
    }
  } else if (capture_sink_ && !capture_layers_.empty()) {
    for (int i = 0; i < n; ++i) capture_sink_(pos0 + i, captured_backend_row(i));
  }
}

// Captured hidden of layer il: rows of this session into captured_ rows 0..n-1; with owners,
// row i into row 0 of its owner's captured_ (one row per owner).
void ModelSession::capture_hidden(int il, int n, ModelSession* const* owners) {
  const int64_t E = cfg_.n_embd;
  backend::HcMeanParams hp;
  hp.n_hc = static_cast<int>(cfg_.n_hc);
  hp.n_embd = E;
  if (owners == nullptr) {
    if (capture_index_.size() != cfg_.n_layer || capture_index_[il] < 0) return;
    s_->carry.flush(be_);  // the HC state it reads
    hp.x = s_->x.data();
    hp.n_rows = n;
    hp.out_stride = static_cast<int64_t>(capture_layers_.size()) * E;
    hp.out = captured_.data() + capture_index_[il] * E;
    be_.hc_mean(hp);
    return;
  }
  for (int i = 0; i < n; ++i) {
    ModelSession& o = *owners[i];
    if (o.capture_index_.size() != cfg_.n_layer || o.capture_index_[il] < 0) continue;
    s_->carry.flush(be_);  // the HC state it reads
    hp.x = s_->x.data() + i * cfg_.hc_dim();
    hp.n_rows = 1;
    hp.out_stride = static_cast<int64_t>(o.capture_layers_.size()) * E;
    hp.out = o.captured_.data() + o.capture_index_[il] * E;
    be_.hc_mean(hp);
  }
}

void ModelSession::attention_layer(int il, int n, int64_t pos0, bool capture_slots, ModelSession* const* owners) {
  Scratch& s = *s_;
  const LayerMats& m = bound_->layers()[il];
  const int64_t E = cfg_.n_embd, D = cfg_.head_dim;
  const int64_t QL = cfg_.q_lora_rank, Q = cfg_.q_dim();
  const int n_rot = static_cast<int>(cfg_.n_rot);
  const int ratio = state_.layers()[il].ratio;  // a per-layer constant of the model
  const int64_t W = ratio == 4 ? 2 * D : D;
  const int64_t IDX = cfg_.indexer_head_dim, IW = 2 * IDX, IQ = cfg_.indexer_q_dim();
  const int n_ih = static_cast<int>(cfg_.n_indexer_head);
  const int64_t top_k = cfg_.indexer_top_k;
  const float eps = cfg_.rms_eps;
  const RopeParams rp = cfg_.rope_params(static_cast<uint32_t>(il));
  // Row i: its session (state, attention scratch), its position, and its slot in that
  // session's attention scratch (this session: the row's index in its group; an owner: 0).
  auto owner = [&](int i) -> ModelSession& { return owners != nullptr ? *owners[i] : *this; };
  auto row_pos = [&](int i) -> int64_t { return owners != nullptr ? owners[i]->n_tokens() : pos0 + i; };
  // Rows whose indexer has more rows than top_k need an indexer query.
  auto needs_idx = [&](int i) { return (row_pos(i) + 1) / 4 > top_k; };

  const AttnMats am = attn_mats(m);
  const BlockScratch bs = block_scratch(s);
  int first_idx_row = n;  // this session: rows from here on need an indexer query
  if (ratio == 4) {
    for (int i = 0; i < n; ++i) {
      if (needs_idx(i)) {
        first_idx_row = i;
        break;
      }
    }
  }
  // The group's compressor steps go to the backend before anything reads their rows or states
  // (the prefix-slot save of a row, the group's indexer selections and attentions): a prefill
  // group's as one compressor_rows call per chain, other groups' as ONE compressor_steps call
  // in the order they were made (each step sees what the steps before it left, as one call per
  // step would).
  auto flush_steps = [&] {
    be_.compressor_steps(s.comp_steps.data(), static_cast<int>(s.comp_steps.size()));
    s.comp_steps.clear();
  };
  // One compressor step (§4.4) of a chain at pos: a row emitted there (known from pos and
  // ratio) goes to the next row of its cache (attention rows [n_comp, D] FP8 or indexer rows
  // [n_index, IDX] FP4), built in `pooled`.
  auto step_params = [&](float* st_kv, float* st_sc, const float* kv_cur, const float* sc_cur, const uint16_t* ape,
                         const float* norm, int r, int64_t dim, uint8_t* fp8_rows, uint8_t* fp4_rows, int64_t n_rows,
                         int64_t pos, float* pooled) {
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
    cp.indexer = fp4_rows != nullptr;
    cp.pooled = pooled;
    if (fp8_rows != nullptr) cp.out_fp8 = fp8_rows + n_rows * quant::fp8_row_bytes(static_cast<int>(dim), n_rot);
    if (fp4_rows != nullptr) cp.out_fp4 = fp4_rows + n_rows * quant::fp4_row_bytes(static_cast<int>(dim));
    return cp;
  };
  // The projections of h beside q_b (attention_projections' side lane): the compressors' (F16,
  // rows of one length: one grouped call, each result the bits it gets alone; a device backend
  // runs them as one launch) and the indexer's head weights; for a plain decode row also its
  // compressor steps (they read those projections and the compressor states alone).
  struct Beside {
    backend::Backend* be = nullptr;
    backend::MatmulParams comp_proj[4];
    int n_comp_proj = 0;
    backend::MatmulParams idx_proj;
    bool has_idx_proj = false;
    const backend::CompressorStepParams* steps = nullptr;
    int n_steps = 0;
  } beside;
  beside.be = &be_;
  if (ratio != 0) {
    beside.comp_proj[beside.n_comp_proj++] = matmul_params(m.cmp_kv, s.h.data(), E, s.ckv.data(), W, n);
    beside.comp_proj[beside.n_comp_proj++] = matmul_params(m.cmp_gate, s.h.data(), E, s.csc.data(), W, n);
  }
  if (ratio == 4) {
    beside.comp_proj[beside.n_comp_proj++] = matmul_params(m.idx_cmp_kv, s.h.data(), E, s.ikv.data(), IW, n);
    beside.comp_proj[beside.n_comp_proj++] = matmul_params(m.idx_cmp_gate, s.h.data(), E, s.isc.data(), IW, n);
  }
  // With owners the rows needing a query need not be a suffix: the queries of the rows from
  // the first such one on are computed (a row's bits do not depend on its neighbours).
  const int idx_cnt = n - first_idx_row;
  if (idx_cnt > 0) {
    beside.idx_proj = matmul_params(m.idx_proj, s.h.data() + first_idx_row * E, E, s.iw.data() + first_idx_row * n_ih,
                                    n_ih, idx_cnt);
    beside.has_idx_proj = true;
  }
  // A plain decode row (this session's one row, no prefix slot): its steps (attention, then
  // indexer), made here with the counters the row loop below sees, which then only counts.
  const bool steps_beside = owners == nullptr && !capture_slots && n == 1 && ratio != 0;
  if (steps_beside) {
    LayerState& L = state_.layers()[il];
    s.comp_steps.push_back(step_params(L.cmp_kv.data(), L.cmp_score.data(), s.ckv.data(), s.csc.data(), m.cmp_ape,
                                       m.cmp_norm, ratio, D, L.comp.data(), nullptr, L.n_comp, pos0,
                                       s.pooled.data()));
    if (ratio == 4) {
      s.comp_steps.push_back(step_params(L.idx_kv.data(), L.idx_score.data(), s.ikv.data(), s.isc.data(),
                                         m.idx_cmp_ape, m.idx_cmp_norm, 4, IDX, nullptr, L.index.data(), L.n_index,
                                         pos0, s.pooled.data()));
    }
    beside.steps = s.comp_steps.data();
    beside.n_steps = static_cast<int>(s.comp_steps.size());
  }
  backend::Task beside_task;
  if (beside.n_comp_proj > 0 || beside.has_idx_proj) {
    beside_task.ctx = &beside;
    beside_task.fn = [](void* ctx) {
      const Beside& b = *static_cast<const Beside*>(ctx);
      if (b.n_comp_proj > 0) b.be->matmul_grouped(b.comp_proj, b.n_comp_proj);
      if (b.has_idx_proj) b.be->matmul(b.idx_proj);
      if (b.n_steps > 0) b.be->compressor_steps(b.steps, b.n_steps);
    };
  }
  attention_projections(be_, cfg_, am, bs, n, beside_task, &s.carry);
  if (idx_cnt > 0)  // the indexer's queries from the normed q_a rows (qr)
    matmul(be_, m.idx_q_b, s.qr.data() + first_idx_row * QL, QL, s.iq.data() + first_idx_row * IQ, IQ, idx_cnt);

  const int64_t swa = cfg_.n_swa;
  // Everything row-local first (no state read, so the rows may run in parallel): q/kv RoPE,
  // kv's FP8 round trip and its f16 raw push, the indexer queries. The raw pushes of positions
  // pos0 .. pos0 + n - 1 all precede every row's attention; those slots stay clear of each
  // row's window (raw_cap = window + raw_slack(chunk) >= window + rows - 1), so each
  // row sees the raw rows it saw when the rows ran one by one. With owners, one call per row
  // (each row pushes into its own session's ring).
  auto inputs = [&](int i0, int cnt, int64_t p0, ModelSession& o, int idx_first) {
    backend::AttentionInputsParams ai =
        attention_inputs(cfg_, s.q.data() + i0 * Q, s.kv.data() + i0 * D, am.kv_a_norm, cnt, p0, rp);
    ai.raw = o.state_.layers()[il].raw.data();
    ai.raw_cap = o.state_.raw_cap();
    if (ratio == 4 && idx_first < cnt) {
      ai.iq = s.iq.data() + i0 * IQ;
      ai.iw = s.iw.data() + i0 * n_ih;
      ai.n_idx_head = n_ih;
      ai.idx_dim = static_cast<int>(IDX);
      ai.idx_first = idx_first;
      ai.iw_scale = 1.0f / sqrtf(static_cast<float>(IDX * n_ih));
    }
    be_.attention_inputs(ai);
  };
  if (owners == nullptr) {
    inputs(0, n, pos0, *this, first_idx_row);
  } else {
    for (int i = 0; i < n; ++i) inputs(i, 1, row_pos(i), owner(i), needs_idx(i) ? 0 : 1);
  }

  // Rows in groups of s.attn_rows: first each row's state steps in token order (compressor
  // steps, the prefix slot), recording its attention (and indexer) query over the keys visible
  // to it; then the group's indexer selections and attentions as two batched calls. Attention
  // outputs feed nothing of the state and later rows of the group append compressed / indexer
  // rows past the counters a query recorded, so each query sees exactly what it saw when the
  // rows ran one by one.
  // A prefill group (two or more of this session's rows, no prefix slots) issues each chain's
  // steps as ONE compressor_rows call over the group's rows, which a device backend may pool in
  // parallel (every emitted row depends only on the projections and the state before the
  // call); the rows then only advance the host's row counters. Otherwise (a decode, verify
  // rows, rows of several sessions) each row's steps are collected in order and flushed as one
  // compressor_steps call.
  for (int g0 = 0; g0 < n; g0 += s.attn_rows) {
    const int g = std::min(s.attn_rows, n - g0);
    const bool chain_rows = owners == nullptr && !capture_slots && g > 1;
    if (chain_rows && ratio != 0) {
      LayerState& L = state_.layers()[il];
      const int64_t p0 = pos0 + g0;
      auto chain = [&](float* st_kv, float* st_sc, const float* kv, const float* sc, const uint16_t* ape,
                       const float* norm, int r, int64_t dim, uint8_t* fp8_rows, uint8_t* fp4_rows, int64_t n_rows) {
        const int64_t emitted = (p0 + g) / r - p0 / r;  // positions p in [p0, p0 + g) with (p + 1) % r == 0
        DS4_CHECK(n_rows + emitted <= state_.comp_cap(il));
        backend::CompressorRowsParams cr;
        cr.step = step_params(st_kv, st_sc, kv, sc, ape, norm, r, dim, fp8_rows, fp4_rows, n_rows, p0, s.pooled.data());
        cr.n = g;
        be_.compressor_rows(cr);
      };
      chain(L.cmp_kv.data(), L.cmp_score.data(), s.ckv.data() + g0 * W, s.csc.data() + g0 * W, m.cmp_ape, m.cmp_norm,
            ratio, D, L.comp.data(), nullptr, L.n_comp);
      if (ratio == 4)
        chain(L.idx_kv.data(), L.idx_score.data(), s.ikv.data() + g0 * IW, s.isc.data() + g0 * IW, m.idx_cmp_ape,
              m.idx_cmp_norm, 4, IDX, nullptr, L.index.data(), L.n_index);
    }
    int n_sel = 0;
    for (int j = 0; j < g; ++j) {
      const int i = g0 + j;
      const int64_t pos = row_pos(i);
      ModelSession& o = owner(i);
      Scratch& os = *o.s_;
      const int slot = owners != nullptr ? 0 : j;
      LayerState& L = o.state_.layers()[il];
      const int64_t raw_cap = o.state_.raw_cap();
      const int64_t max_comp = os.max_comp;
      const int64_t row_scores = static_cast<int64_t>(cfg_.n_head) * (raw_cap + max_comp);

      // The row's step of a chain (issued above in a prefill group, else collected here); the
      // row counter advances when it emits.
      auto compress = [&](float* st_kv, float* st_sc, const float* kv_cur, const float* sc_cur,
                          const uint16_t* ape, const float* norm, int r, int64_t dim,
                          uint8_t* fp8_rows, uint8_t* fp4_rows, int64_t& n_rows) {
        const bool emits = backend::compressor_emits(pos, r);
        if (emits) DS4_CHECK(n_rows < o.state_.comp_cap(il));
        if (!chain_rows && !steps_beside)  // issued with the group's other steps (one backend call)
          s.comp_steps.push_back(step_params(st_kv, st_sc, kv_cur, sc_cur, ape, norm, r, dim, fp8_rows, fp4_rows,
                                             n_rows, pos, os.pooled.data()));
        if (emits) ++n_rows;
      };
      if (ratio != 0) {
        compress(L.cmp_kv.data(), L.cmp_score.data(), s.ckv.data() + i * W, s.csc.data() + i * W,
                 m.cmp_ape, m.cmp_norm, ratio, D, L.comp.data(), nullptr, L.n_comp);
      }
      const uint8_t* allowed = nullptr;
      if (ratio == 4) {
        compress(L.idx_kv.data(), L.idx_score.data(), s.ikv.data() + i * IW,
                 s.isc.data() + i * IW, m.idx_cmp_ape, m.idx_cmp_norm, 4, IDX, nullptr,
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
          ip.scores = os.idx_scores.data() + slot * max_comp;
          ip.order = os.idx_order.data() + slot * max_comp;
          ip.allowed = os.allowed.data() + slot * max_comp;
          allowed = ip.allowed;
        }
      }

      // Raw window: positions [max(0, pos - swa + 1), pos], oldest first, in the raw ring.
      const int64_t first = std::max<int64_t>(0, pos - swa + 1);
      const RawRing ring{nullptr, raw_cap, first, static_cast<int>(pos - first + 1), L.raw.data()};
      const CompRows comp{nullptr, ratio != 0 ? L.comp.data() : nullptr, ratio != 0 ? L.n_comp : 0};
      s.attn_queries[j] = attention_query(cfg_, s.q.data() + i * Q, ring, comp, allowed, m.sinks,
                                          os.attn_scores.data() + slot * row_scores, s.heads.data() + i * Q, pos, rp);
      // Slot i is the state after row i for commit_prefix(i + 1) < n; the last row's state is
      // the live one, so its slot is never restored and not saved.
      if (capture_slots && i + 1 < n) {
        flush_steps();
        state_.save_layer_frontier(il, slots_[i]);
      }
    }
    if (steps_beside) {
      s.comp_steps.clear();  // issued beside q_b
    } else if (!s.comp_steps.empty()) {
      flush_steps();
    }
    if (n_sel > 0) be_.indexer_select(s.idx_queries.data(), n_sel);
    be_.sink_attention(s.attn_queries.data(), g);
  }

  attention_output(be_, cfg_, am, bs, n, &s.carry);
  std::swap(s.x, s.x2);
}

void ModelSession::ffn_layer(int il, int n, const int32_t* tokens) {
  Scratch& s = *s_;
  ffn_sublayer(be_, cfg_, ffn_mats(bound_->layers()[il]), block_scratch(s), n, tokens, cfg_.swiglu_clamp[il],
               &s.carry);
  std::swap(s.x, s.x2);
}

void ModelSession::output_head(int first, int n) {
  Scratch& s = *s_;
  const int64_t E = cfg_.n_embd, HC = cfg_.hc_dim();
  const int nhc = static_cast<int>(cfg_.n_hc);
  const int rows = n - first;
  const HeadMats& g = bound_->head();
  // HC collapse (§4.7), final RMSNorm, Q8_0 LM head.
  backend::HcCollapseParams cp;
  cp.x = s.x.data() + first * HC;
  cp.fn = g.output_hc_fn;
  cp.scale = g.output_hc_scale;
  cp.base = g.output_hc_base;
  cp.n_hc = nhc;
  cp.n_embd = E;
  cp.norm_eps = cfg_.rms_eps;
  cp.hc_eps = cfg_.hc_eps;
  cp.n_rows = rows;
  cp.flat = s.flat.data() + first * HC;
  cp.mix = s.head_mix.data() + first * nhc;
  cp.y = s.y.data() + first * E;
  be_.hc_collapse(cp);
  rms_norm(be_, s.y.data() + first * E, g.output_norm, s.h.data() + first * E, E, rows, cfg_.rms_eps);
  // Row i's logits land in row_logits row (i - first).
  matmul(be_, g.output, s.h.data() + first * E, E, s.row_logits.data(), cfg_.n_vocab, rows);
}

}  // namespace ds4::session
