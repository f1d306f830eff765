// session/block.cpp — the shared V4 block steps (see block.h). Each function issues the
// backend ops of one block step in the order the target forward has always used; the drafter
// stages call the same functions, so both paths produce identical bits on identical inputs.
#include "session/block.h"

namespace ds4::session {

backend::MatmulParams matmul_params(const backend::Matrix& w, const float* x, int64_t xs, float* y, int64_t ys,
                                    int n) {
  backend::MatmulParams p;
  p.w = w;
  p.x = x;
  p.x_stride = xs;
  p.y = y;
  p.y_stride = ys;
  p.n_rows = n;
  return p;
}

void matmul(backend::Backend& be, const backend::Matrix& w, const float* x, int64_t xs, float* y, int64_t ys,
            int n) {
  be.matmul(matmul_params(w, x, xs, y, ys, n));
}

void rms_norm(backend::Backend& be, const float* x, const float* w, float* out, int64_t dim, int n_rows, float eps) {
  backend::RmsNormParams p;
  p.x = x;
  p.weight = w;
  p.out = out;
  p.n = dim;
  p.n_rows = n_rows;
  p.eps = eps;
  be.rms_norm(p);
}

void hc_pre_rows(backend::Backend& be, const model::ModelConfig& c, const HcMats& w, const BlockScratch& s, int n,
                 const float* norm, HcCarry* carry) {
  backend::HcPreParams hp;
  hp.x = s.x;
  hp.fn = w.fn;
  hp.scale = w.scale;
  hp.base = w.base;
  hp.n_hc = static_cast<int>(c.n_hc);
  hp.n_embd = c.n_embd;
  hp.sinkhorn_iters = static_cast<int>(c.n_hc_sinkhorn_iter);
  hp.norm_eps = c.rms_eps;
  hp.hc_eps = c.hc_eps;
  hp.n_rows = n;
  hp.flat = s.flat;
  hp.mix = s.mix;
  hp.y = s.y;
  hp.post = s.post;
  hp.comb = s.comb;
  hp.norm_weight = norm;
  hp.normed = s.h;
  hp.norm_out_eps = c.rms_eps;
  if (carry != nullptr && carry->pending) {
    DS4_CHECK(carry->post.out == s.x && carry->post.n_rows == n);  // the post makes this op's input
    hp.post_first = carry->post;
    carry->pending = false;
  }
  be.hc_pre(hp);
}

void hc_post_rows(backend::Backend& be, const model::ModelConfig& c, const BlockScratch& s, int n,
                  HcCarry* carry) {
  backend::HcPostParams pp;
  pp.f = s.o;
  pp.x = s.x;
  pp.post = s.post;
  pp.comb = s.comb;
  pp.out = s.x_next;
  pp.n_hc = static_cast<int>(c.n_hc);
  pp.n_embd = c.n_embd;
  pp.n_rows = n;
  if (carry == nullptr) {
    be.hc_post(pp);
    return;
  }
  DS4_CHECK(!carry->pending);
  carry->post = pp;
  carry->pending = true;
}

void kv_projection(backend::Backend& be, const model::ModelConfig& c, const backend::Matrix& attn_kv,
                   const float* kv_a_norm, const float* h, int64_t h_stride, float* kv, int n) {
  const int64_t D = c.head_dim;
  matmul(be, attn_kv, h, h_stride, kv, D, n);
  rms_norm(be, kv, kv_a_norm, kv, D, n, c.rms_eps);
}

void attention_projections(backend::Backend& be, const model::ModelConfig& c, const AttnMats& m,
                           const BlockScratch& s, int n, backend::Task beside, HcCarry* carry) {
  const int64_t E = c.n_embd, D = c.head_dim, QL = c.q_lora_rank, Q = c.q_dim();
  const float eps = c.rms_eps;
  hc_pre_rows(be, c, m.hc, s, n, m.norm, carry);  // h = RMSNorm_attn(y), in the HC pre op
  // q_a and kv read the same h: one grouped call, each result the bits it gets alone (on CUDA
  // one launch for a decode row).
  const backend::MatmulParams qa_kv[2] = {matmul_params(m.q_a, s.h, E, s.qa, QL, n),
                                          matmul_params(m.kv, s.h, E, s.kv, D, n)};
  be.matmul_grouped(qa_kv, 2);
  // q = q_b · rms_norm(q_a): the norm folded into the matmul (on CUDA under
  // --cuda-fold-input-norm one launch for a decode row); qr keeps the normed rows (the
  // indexer's q_b reads them).
  backend::MatmulParams qb = matmul_params(m.q_b, s.qa, QL, s.q, Q, n);
  qb.normed = s.qr;
  qb.norm_weight = m.q_a_norm;
  qb.norm_eps = eps;
  if (beside.fn == nullptr) {
    be.matmul(qb);
  } else {
    LaneFork lanes(be);
    beside();
    lanes.main();
    be.matmul(qb);
  }
  // q's per-head norm and kv's norm run in attention_inputs (one kernel with the RoPE on CUDA).
}

backend::AttentionInputsParams attention_inputs(const model::ModelConfig& c, float* q, float* kv,
                                                const float* kv_norm, int n, int64_t pos0, const RopeParams& rp) {
  backend::AttentionInputsParams p;
  p.q_head_norm = q != nullptr;
  p.kv_norm = kv_norm;
  p.norm_eps = c.rms_eps;
  p.n_rows = n;
  p.pos0 = pos0;
  p.rope = rp;
  p.n_rot = static_cast<int>(c.n_rot);
  p.head_dim = static_cast<int>(c.head_dim);
  p.q = q;
  p.q_stride = c.q_dim();
  p.n_head = static_cast<int>(c.n_head);
  p.kv = kv;
  return p;
}

backend::SinkAttentionParams attention_query(const model::ModelConfig& c, const float* q, const RawRing& ring,
                                             const CompRows& comp, const uint8_t* allowed,
                                             const float* sinks, float* scores, float* out, int64_t pos,
                                             const RopeParams& rp) {
  backend::SinkAttentionParams ap;
  ap.q = q;
  ap.raw = ring.base;
  ap.raw_f16 = ring.base_f16;
  ap.raw_cap = ring.cap;
  ap.raw_first = ring.first;
  ap.n_raw = ring.n;
  ap.comp = comp.f32;
  ap.comp_fp8 = comp.fp8;
  ap.n_comp = comp.n;
  ap.comp_allowed = allowed;
  ap.sinks = sinks;
  ap.n_head = static_cast<int>(c.n_head);
  ap.head_dim = static_cast<int>(c.head_dim);
  ap.scores = scores;
  ap.out = out;
  ap.n_rot = static_cast<int>(c.n_rot);
  ap.pos = pos;
  ap.rope = rp;
  return ap;
}

void attention_output(backend::Backend& be, const model::ModelConfig& c, const AttnMats& m, const BlockScratch& s,
                      int n, HcCarry* carry) {
  // Grouped output LoRA: group g reads heads [g*hpg, (g+1)*hpg) and rows [g*OLr, (g+1)*OLr).
  const int64_t E = c.n_embd, Q = c.q_dim(), G = c.group_dim(), OLr = c.o_lora_rank, OL = c.o_low_dim();
  backend::MatmulParams groups[model::kMaxOutGroups];
  DS4_CHECK(c.n_out_group >= 1 && c.n_out_group <= model::kMaxOutGroups);  // validated at load
  for (uint32_t g = 0; g < c.n_out_group; ++g) {
    backend::MatmulParams& p = groups[g];
    p.w = m.output_a.rows(g * OLr, OLr);
    p.x = s.heads + g * G;
    p.x_stride = Q;
    p.y = s.low + g * OLr;
    p.y_stride = OL;
    p.n_rows = n;
  }
  be.matmul_grouped(groups, static_cast<int>(c.n_out_group));
  matmul(be, m.output_b, s.low, OL, s.o, E, n);
  hc_post_rows(be, c, s, n, carry);
}

void ffn_sublayer(backend::Backend& be, const model::ModelConfig& c, const FfnMats& m, const BlockScratch& s,
                  int n, const int32_t* tokens, float clamp, HcCarry* carry) {
  const int64_t E = c.n_embd, F = c.n_ff_exp;
  const int X = static_cast<int>(c.n_expert);
  const int U = static_cast<int>(c.n_expert_used);
  hc_pre_rows(be, c, m.hc, s, n, m.norm, carry);  // h = RMSNorm_ffn(y), in the HC pre op

  // The shared expert (side lane) and the router (main lane) both read only h: on a device
  // they run side by side, the router's latency-bound launches beside the shared expert's
  // matvecs; the routed experts after the join add the shared expert's output.
  LaneFork lanes(be);
  // Shared expert (Q8_0): silu(min(g, c)) * clamp(u, -c, c), then down. It goes first so that
  // the routed experts' final sum can add it (MoeParams::add: o = moe + shared, the bits of
  // an add op after the moe, without its pass over the rows).
  // gate and up read the same rows: one grouped call (on CUDA one launch for both when their
  // shapes match), each result the bits it gets alone.
  backend::MatmulParams gu[2];
  for (int k = 0; k < 2; ++k) {
    gu[k].w = k == 0 ? m.gate_shexp : m.up_shexp;
    gu[k].x = s.h;
    gu[k].x_stride = E;
    gu[k].y = k == 0 ? s.sg : s.su;
    gu[k].y_stride = F;
    gu[k].n_rows = n;
  }
  be.matmul_grouped(gu, 2);
  backend::SwigluParams sw;
  sw.gate = s.sg;
  sw.up = s.su;
  sw.out = s.sg;
  sw.n = n * F;
  sw.clamp = clamp;
  be.swiglu(sw);
  matmul(be, m.down_shexp, s.sg, F, s.sh_out, E, n);

  // Router (§4.6): sqrt-softplus scores; hash layers take the table row of the row's token,
  // the others the top-U by score + exp_probs_b.
  lanes.main();
  matmul(be, m.gate_inp, s.h, E, s.router, X, n);
  backend::RouteParams rt;
  rt.logits = s.router;
  rt.bias = m.exp_probs_b;
  rt.tid2eid = m.tid2eid;
  rt.tokens = tokens;
  rt.n_rows = n;
  rt.n_expert = X;
  rt.n_used = U;
  rt.renorm = c.expert_weights_norm;
  rt.scale = c.expert_weights_scale;
  rt.probs = s.probs;
  rt.sel = s.sel;
  rt.wt = s.wt;
  be.route(rt);
  lanes.join();

  backend::MoeParams mp;  // o = routed experts + shared
  mp.x = s.h;
  mp.sel = s.sel;
  mp.wt = s.wt;
  mp.n_used = U;
  mp.n_rows = n;
  mp.gate = m.gate_exps;
  mp.up = m.up_exps;
  mp.down = m.down_exps;
  mp.clamp = clamp;
  mp.add = s.sh_out;
  mp.out = s.o;
  mp.scratch = s.moe_scratch;
  be.moe(mp);

  hc_post_rows(be, c, s, n, carry);
}

}  // namespace ds4::session
