// session/block.h — the V4 block math shared by the target forward (session/forward.cpp) and
// the DSpark drafter stages (speculative/drafter.cpp): HC pre/post, attention projections, the
// row-local attention inputs (RoPE of q/kv), sink attention queries, the grouped output LoRA and the FFN sublayer
// (ds4-architecture.md §4.2-§4.6, dspark-drafter.md §3-§4).
//
// Role: ONE implementation of each block step as free functions over backend ops. Callers
// own the weights (views filled by attn_mats / ffn_mats from any struct with the V4 block
// field names: session::LayerMats, speculative::StageWeights) and the scratch (BlockScratch views
// into their own buffers, filled by block_scratch).
// Invariants:
//  * No allocation, no state: every function only issues backend ops on the given views, in
//    a fixed order, so the target and the drafter get the same bits for the same inputs.
//  * Batched functions act on rows [0, n) of the scratch; every op is batch invariant.
//  * Sublayers read the HC state from BlockScratch::x and write the next one to x_next; the
//    caller swaps its buffers afterwards.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "model/config.h"

namespace ds4::session {

// Two lanes of independent ops (backend::Backend::fork): the constructor forks (the ops
// issued next are the side lane's), main() moves to the main lane, join() (or the destructor)
// joins. The two lanes' ops must touch disjoint outputs and read nothing the other writes
// (tests/model/lane_order_test.cpp runs each main lane first to prove it on the CPU).
class LaneFork {
 public:
  explicit LaneFork(backend::Backend& be) : be_(be) { be_.fork(); }
  LaneFork(const LaneFork&) = delete;
  LaneFork& operator=(const LaneFork&) = delete;
  ~LaneFork() { join(); }
  void main() { be_.to_main(); }
  void join() {
    if (!open_) return;
    open_ = false;
    be_.join();
  }

 private:
  backend::Backend& be_;
  bool open_ = true;
};

// HC pre weights of one sublayer (§4.2).
struct HcMats {
  backend::Matrix fn;             // [HC -> MIX]
  const float* scale = nullptr;   // [3]
  const float* base = nullptr;    // [MIX]
};

// Attention weights shared by target layers and drafter stages.
struct AttnMats {
  HcMats hc;
  backend::Matrix q_a, q_b, kv;   // [E -> QL], [QL -> Q], [E -> D]
  backend::Matrix output_a;       // [G -> OL] (n_out_group blocks of o_lora rows)
  backend::Matrix output_b;       // [OL -> E]
  const float* norm = nullptr;       // [E] attn_norm
  const float* q_a_norm = nullptr;   // [QL]
  const float* kv_a_norm = nullptr;  // [D]
  const float* sinks = nullptr;      // [n_head]
};

// FFN weights (§4.6).
struct FfnMats {
  HcMats hc;
  const float* norm = nullptr;                        // [E] ffn_norm
  backend::Matrix gate_inp;                           // [E -> X] router
  backend::Matrix gate_shexp, up_shexp, down_shexp;   // [E -> F], [E -> F], [F -> E]
  backend::ExpertMatrix gate_exps, up_exps, down_exps;
  const float* exp_probs_b = nullptr;  // [X] or nullptr
  const int32_t* tid2eid = nullptr;    // [V, U] hash table or nullptr
};

// Views of any weight struct with the V4 block field names (hc_attn_fn, attn_q_a, ...).
template <typename M>
AttnMats attn_mats(const M& m) {
  AttnMats a;
  a.hc = HcMats{m.hc_attn_fn, m.hc_attn_scale, m.hc_attn_base};
  a.q_a = m.attn_q_a;
  a.q_b = m.attn_q_b;
  a.kv = m.attn_kv;
  a.output_a = m.attn_output_a;
  a.output_b = m.attn_output_b;
  a.norm = m.attn_norm;
  a.q_a_norm = m.q_a_norm;
  a.kv_a_norm = m.kv_a_norm;
  a.sinks = m.sinks;
  return a;
}

template <typename M>
FfnMats ffn_mats(const M& m) {
  FfnMats f;
  f.hc = HcMats{m.hc_ffn_fn, m.hc_ffn_scale, m.hc_ffn_base};
  f.norm = m.ffn_norm;
  f.gate_inp = m.ffn_gate_inp;
  f.gate_shexp = m.ffn_gate_shexp;
  f.up_shexp = m.ffn_up_shexp;
  f.down_shexp = m.ffn_down_shexp;
  f.gate_exps = m.gate_exps;
  f.up_exps = m.up_exps;
  f.down_exps = m.down_exps;
  f.exp_probs_b = m.exp_probs_b;
  if constexpr (requires { m.tid2eid; }) f.tid2eid = m.tid2eid;
  return f;
}

// Caller-owned activation buffers of n rows (shapes in ModelConfig symbols).
struct BlockScratch {
  float* x = nullptr;        // [n, HC] HC state in
  float* x_next = nullptr;   // [n, HC] HC state out (written by the sublayer's HC post)
  float* flat = nullptr;     // [n, HC]
  float* mix = nullptr;      // [n, MIX]
  float* y = nullptr;        // [n, E] HC-pre output
  float* post = nullptr;     // [n, n_hc]
  float* comb = nullptr;     // [n, n_hc*n_hc]
  float* h = nullptr;        // [n, E] normed sublayer input
  float* qa = nullptr;       // [n, QL]
  float* qr = nullptr;       // [n, QL]
  float* q = nullptr;        // [n, Q]
  float* kv = nullptr;       // [n, D]
  float* heads = nullptr;    // [n, Q] attention outputs
  float* low = nullptr;      // [n, OL]
  float* o = nullptr;        // [n, E] sublayer output
  float* router = nullptr;   // [n, X]
  float* probs = nullptr;    // [n, X]
  int32_t* sel = nullptr;    // [n, U]
  float* wt = nullptr;       // [n, U]
  void* moe_scratch = nullptr;  // backend::moe_scratch_bytes(E, F, U, n)
  float* sg = nullptr;       // [n, F]
  float* su = nullptr;       // [n, F]
  float* sh_out = nullptr;   // [n, E]
};

// Views of any scratch struct with these vector members (x, x2, flat, mix, ...).
template <typename S>
BlockScratch block_scratch(S& s) {
  BlockScratch b;
  b.x = s.x.data();
  b.x_next = s.x2.data();
  b.flat = s.flat.data();
  b.mix = s.mix.data();
  b.y = s.y.data();
  b.post = s.post.data();
  b.comb = s.comb.data();
  b.h = s.h.data();
  b.qa = s.qa.data();
  b.qr = s.qr.data();
  b.q = s.q.data();
  b.kv = s.kv.data();
  b.heads = s.heads.data();
  b.low = s.low.data();
  b.o = s.o.data();
  b.router = s.router.data();
  b.probs = s.probs.data();
  b.sel = s.sel.data();
  b.wt = s.wt.data();
  b.moe_scratch = s.moe_scratch.data();
  b.sg = s.sg.data();
  b.su = s.su.data();
  b.sh_out = s.sh_out.data();
  return b;
}

// ---- single backend ops with the block's parameter shapes ----
// y[i] = w · x[i] for n rows (row strides xs, ys in floats): its parameters, and the op.
backend::MatmulParams matmul_params(const backend::Matrix& w, const float* x, int64_t xs, float* y, int64_t ys,
                                    int n);
void matmul(backend::Backend& be, const backend::Matrix& w, const float* x, int64_t xs, float* y, int64_t ys,
            int n);
// RMSNorm of n_rows rows of dim floats; w may be null (unweighted).
void rms_norm(backend::Backend& be, const float* x, const float* w, float* out, int64_t dim, int n_rows, float eps);

// A sublayer's HC post carried into the next sublayer's HC pre (HcPreParams::post_first: on
// CUDA one launch for both). hc_post_rows leaves it pending, hc_pre_rows takes it; flush()
// issues a pending one on its own (before anything else reads the HC state: a captured
// layer's hidden, the output head).
struct HcCarry {
  backend::HcPostParams post;
  bool pending = false;
  void flush(backend::Backend& be) {
    if (!pending) return;
    pending = false;
    be.hc_post(post);
  }
};

// ---- block steps ----
// HC pre of rows [0, n) (§4.2): flat/mix/y/post/comb from x, and the sublayer's input
// h = RMSNorm(y) · norm (the op's folded norm: one kernel with the HC pre on CUDA). A pending
// post in carry runs first, in the same op.
void hc_pre_rows(backend::Backend& be, const model::ModelConfig& c, const HcMats& w, const BlockScratch& s, int n,
                 const float* norm, HcCarry* carry = nullptr);
// HC post of rows [0, n): x_next = post · o + comb · x; left pending in carry when given.
void hc_post_rows(backend::Backend& be, const model::ModelConfig& c, const BlockScratch& s, int n,
                  HcCarry* carry = nullptr);
// kv = RMSNorm_kv(attn_kv · h) for n rows of h (row stride h_stride floats) into kv [n, D].
void kv_projection(backend::Backend& be, const model::ModelConfig& c, const backend::Matrix& attn_kv,
                   const float* kv_a_norm, const float* h, int64_t h_stride, float* kv, int n);
// Attention input (§4.3): HC pre, h = RMSNorm_attn(y), q = q_b · RMSNorm(q_a · h), kv = attn_kv · h.
// Leaves h, qr, q, kv (and post/comb for the HC post) in s; q's per-head norm and kv's norm
// (kv_a_norm) are the attention_inputs op's (attention_inputs below sets them).
// beside (optional): the caller's ops that read only h and write nothing the projections
// read or write (the target's compressor and indexer projections), issued on the side lane
// of a fork (LaneFork) beside q_b. carry: see hc_pre_rows.
void attention_projections(backend::Backend& be, const model::ModelConfig& c, const AttnMats& m,
                           const BlockScratch& s, int n, backend::Task beside = {}, HcCarry* carry = nullptr);
// The row-local attention inputs of rows [0, n) at positions pos0 .. pos0 + n - 1
// (backend::AttentionInputsParams): q [n, Q] (or null) as attention_projections left it, each
// head RMS-normed, and kv [n, D], normed by kv_norm (nullptr: kv is normed already, as
// kv_projection leaves it); both roped at each row's position, kv's non-RoPE dims FP8
// round-tripped. The target adds its raw ring and indexer query to the params before issuing
// them (be.attention_inputs).
backend::AttentionInputsParams attention_inputs(const model::ModelConfig& c, float* q, float* kv,
                                                const float* kv_norm, int n, int64_t pos0, const RopeParams& rp);
// A query's raw keys: positions first .. first + n - 1 of a ring of cap rows of head_dim
// values, position p at base + (p % cap) * head_dim (backend::SinkAttentionParams::raw_row):
// f32 rows at base (the drafter) or f16 rows at base_f16 (the target's State::raw).
struct RawRing {
  const float* base = nullptr;
  int64_t cap = 0;
  int64_t first = 0;
  int n = 0;
  const uint16_t* base_f16 = nullptr;
};
// A query's compressed keys: rows [0, n) of f32 values (f32: the drafter) or FP8 stores (fp8:
// the target's State::comp, quant::fp8_row_bytes(head_dim, n_rot) bytes each), one pointer set.
struct CompRows {
  const float* f32 = nullptr;
  const uint8_t* fp8 = nullptr;
  int64_t n = 0;
};

// The sink-attention query of the row at pos over the raw ring's keys then comp rows
// [0, comp.n) (those with allowed[k] != 0, all when allowed is null), its output heads
// de-rotated at pos (§4.5). scores: [n_head, ring.n + comp.n] scratch of this query alone;
// out: [n_head, D]. Queries of several rows go to the backend as one batched sink_attention call.
backend::SinkAttentionParams attention_query(const model::ModelConfig& c, const float* q, const RawRing& ring,
                                             const CompRows& comp, const uint8_t* allowed,
                                             const float* sinks, float* scores, float* out, int64_t pos,
                                             const RopeParams& rp);
// Grouped output LoRA of heads (§4.5) into o, then the HC post into x_next (pending in carry
// when given).
void attention_output(backend::Backend& be, const model::ModelConfig& c, const AttnMats& m, const BlockScratch& s,
                      int n, HcCarry* carry = nullptr);
// FFN sublayer (§4.6): HC pre, norm, router (hash rows take tid2eid[tokens[i]]), routed MoE,
// shared expert with SwiGLU clamp `clamp`, o = moe + shared, HC post into x_next. carry: the
// HC pre takes a pending post from it, the HC post is left pending in it.
void ffn_sublayer(backend::Backend& be, const model::ModelConfig& c, const FfnMats& m, const BlockScratch& s,
                  int n, const int32_t* tokens, float clamp, HcCarry* carry = nullptr);

}  // namespace ds4::session
