// session/binding.h — a loaded model's weights bound to one backend, once per model.
//
// Role: BoundModel visits every tensor of the model once (model::for_each_tensor), hands the
// ranges to Backend::bind_weights (CPU: zero-copy views of the mmap; a device backend
// uploads), and keeps the backend views the forward graph runs on: per layer LayerMats and
// the embedding / output head. Every ModelSession of the model shares one BoundModel (the
// Engine owns it); nothing here is rebuilt per session.
// Invariants: every pointer in LayerMats / HeadMats is a backend address from the WeightSet;
// the BoundModel outlives its sessions and must not outlive the Model or the Backend.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "session/state.h"

namespace ds4::session {

// Backend views of one layer's weights.
struct LayerMats {
  backend::Matrix hc_attn_fn, attn_q_a, attn_q_b, attn_kv, attn_output_a, attn_output_b;
  backend::Matrix cmp_kv, cmp_gate, idx_q_b, idx_proj, idx_cmp_kv, idx_cmp_gate;
  backend::Matrix hc_ffn_fn, ffn_gate_inp, ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp;
  backend::ExpertMatrix gate_exps, up_exps, down_exps;
  const float* hc_attn_scale = nullptr;  // [3]
  const float* hc_attn_base = nullptr;   // [mix]
  const float* attn_norm = nullptr;      // [E]
  const float* q_a_norm = nullptr;       // [QL]
  const float* kv_a_norm = nullptr;      // [D]
  const float* sinks = nullptr;          // [n_head]
  const uint16_t* cmp_ape = nullptr;     // [R, W] f16
  const float* cmp_norm = nullptr;       // [D]
  const uint16_t* idx_cmp_ape = nullptr; // [4, IW] f16
  const float* idx_cmp_norm = nullptr;   // [idx_dim]
  const float* hc_ffn_scale = nullptr;
  const float* hc_ffn_base = nullptr;
  const float* ffn_norm = nullptr;       // [E]
  const float* exp_probs_b = nullptr;    // [X] or nullptr
  const int32_t* tid2eid = nullptr;      // [V, n_used] or nullptr
};

// Backend views of the global weights: embedding and output head (§4.1, §4.7).
struct HeadMats {
  const uint8_t* token_embd = nullptr;   // F16 [V, E]
  size_t token_embd_row_bytes = 0;
  backend::Matrix output_hc_fn;          // F16 [HC -> n_hc]
  float output_hc_scale = 1.0f;          // the [1] scale tensor's value (read from the mmap once)
  const float* output_hc_base = nullptr; // [n_hc]
  const float* output_norm = nullptr;    // [E]
  backend::Matrix output;                // [E -> V] LM head
};

class BoundModel {
 public:
  // chunk_rows: 1..kMaxChunkRows (programmer invariant; the engine checks its option first).
  static std::unique_ptr<BoundModel> bind(const model::Model& model, backend::Backend& backend,
                                          int chunk_rows = kDefaultChunkRows);

  const model::Model& model() const { return model_; }
  backend::Backend& backend() const { return be_; }
  const std::vector<LayerMats>& layers() const { return layers_; }
  const HeadMats& head() const { return head_; }
  const backend::WeightSet& weight_set() const { return *set_; }
  // Rows per prefill forward (1..kMaxChunkRows) of every session of this binding; the scratch
  // of each is sized for it.
  int chunk_rows() const { return chunk_rows_; }

 private:
  BoundModel(const model::Model& model, backend::Backend& backend, int chunk_rows)
      : model_(model), be_(backend), chunk_rows_(chunk_rows) {}
  const model::Model& model_;
  backend::Backend& be_;
  std::unique_ptr<backend::WeightSet> set_;
  std::vector<LayerMats> layers_;
  HeadMats head_;
  int chunk_rows_;
};

}  // namespace ds4::session
