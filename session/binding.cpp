// session/binding.cpp — BoundModel::bind: one visit of the model's tensors, one backend
// binding, the backend views of every layer and of the head.
#include "session/binding.h"

namespace ds4::session {

namespace {

struct Mapper {
  const backend::WeightSet& set;
  backend::Matrix mat(const model::TensorView& t) const {
    if (!t.present()) return {};
    return backend::Matrix{set.map(t.data), t.type, t.ne[0], t.ne[1], static_cast<size_t>(t.row_bytes)};
  }
  backend::ExpertMatrix experts(const model::TensorView& t) const {
    return backend::ExpertMatrix{set.map(t.data), t.type, t.ne[0], t.ne[1], t.ne[2], static_cast<size_t>(t.row_bytes)};
  }
  template <typename T>
  const T* ptr(const model::TensorView& t) const {
    return t.present() ? set.map(t.as<T>()) : nullptr;
  }
};

LayerMats bind_layer(const Mapper& b, const model::LayerWeights& w) {
  LayerMats m;
  m.hc_attn_fn = b.mat(w.hc_attn_fn);
  m.attn_q_a = b.mat(w.attn_q_a);
  m.attn_q_b = b.mat(w.attn_q_b);
  m.attn_kv = b.mat(w.attn_kv);
  m.attn_output_a = b.mat(w.attn_output_a);
  m.attn_output_b = b.mat(w.attn_output_b);
  m.cmp_kv = b.mat(w.attn_compressor_kv);
  m.cmp_gate = b.mat(w.attn_compressor_gate);
  m.idx_q_b = b.mat(w.indexer_attn_q_b);
  m.idx_proj = b.mat(w.indexer_proj);
  m.idx_cmp_kv = b.mat(w.indexer_compressor_kv);
  m.idx_cmp_gate = b.mat(w.indexer_compressor_gate);
  m.hc_ffn_fn = b.mat(w.hc_ffn_fn);
  m.ffn_gate_inp = b.mat(w.ffn_gate_inp);
  m.ffn_gate_shexp = b.mat(w.ffn_gate_shexp);
  m.ffn_up_shexp = b.mat(w.ffn_up_shexp);
  m.ffn_down_shexp = b.mat(w.ffn_down_shexp);
  m.gate_exps = b.experts(w.ffn_gate_exps);
  m.up_exps = b.experts(w.ffn_up_exps);
  m.down_exps = b.experts(w.ffn_down_exps);
  m.hc_attn_scale = b.ptr<float>(w.hc_attn_scale);
  m.hc_attn_base = b.ptr<float>(w.hc_attn_base);
  m.attn_norm = b.ptr<float>(w.attn_norm);
  m.q_a_norm = b.ptr<float>(w.attn_q_a_norm);
  m.kv_a_norm = b.ptr<float>(w.attn_kv_a_norm);
  m.sinks = b.ptr<float>(w.attn_sinks);
  m.cmp_ape = b.ptr<uint16_t>(w.attn_compressor_ape);
  m.cmp_norm = b.ptr<float>(w.attn_compressor_norm);
  m.idx_cmp_ape = b.ptr<uint16_t>(w.indexer_compressor_ape);
  m.idx_cmp_norm = b.ptr<float>(w.indexer_compressor_norm);
  m.hc_ffn_scale = b.ptr<float>(w.hc_ffn_scale);
  m.hc_ffn_base = b.ptr<float>(w.hc_ffn_base);
  m.ffn_norm = b.ptr<float>(w.ffn_norm);
  m.exp_probs_b = b.ptr<float>(w.exp_probs_b);
  m.tid2eid = b.ptr<int32_t>(w.ffn_gate_tid2eid);
  return m;
}

}  // namespace

std::unique_ptr<BoundModel> BoundModel::bind(const model::Model& model, backend::Backend& backend,
                                             int chunk_rows) {
  DS4_CHECK(chunk_rows >= 1 && chunk_rows <= kMaxChunkRows);
  std::unique_ptr<BoundModel> b(new BoundModel(model, backend, chunk_rows));
  std::vector<backend::WeightRange> ranges;
  model::for_each_tensor(model.config(), model.weights(), [&](const model::TensorSpec&, const model::TensorView& t) {
    if (t.present()) ranges.push_back(backend::WeightRange{t.data, static_cast<size_t>(t.nbytes)});
  });
  b->set_ = backend.bind_weights(ranges);
  const Mapper m{*b->set_};
  for (const model::LayerWeights& w : model.weights().layers) b->layers_.push_back(bind_layer(m, w));
  const model::GlobalWeights& g = model.weights().global;
  HeadMats& h = b->head_;
  h.token_embd = m.ptr<uint8_t>(g.token_embd);
  h.token_embd_row_bytes = static_cast<size_t>(g.token_embd.row_bytes);
  h.output_hc_fn = m.mat(g.output_hc_fn);
  h.output_hc_scale = g.output_hc_scale.as<float>()[0];
  h.output_hc_base = m.ptr<float>(g.output_hc_base);
  h.output_norm = m.ptr<float>(g.output_norm);
  h.output = m.mat(g.output);
  return b;
}

}  // namespace ds4::session
