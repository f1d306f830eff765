// speculative/drafter.h — the DSpark drafter forward (dspark-drafter.md §2-§9, §11) over backend ops.
//
// Role: DrafterModel holds the drafter's weights, bound once per loaded target; a Drafter is one
// session's timeline over it: it keeps the per-stage context rings fed from the target's hidden
// captures and turns an anchor token into up to block_size greedy drafts with per-position
// confidences.
// Invariants:
//  * Ring rows exist only for COMMITTED target positions: callers pass committed rows only
//    (the runtime never commits rows of rejected drafts). Rows hold positions
//    [ring_start(), ring_next()) (at most `window` of them, slot = pos % window). A row at a
//    position past ring_next() (a gap) resets the ring; a row before it truncates first.
//  * A proposal at anchor position P needs ring_next() == P and sees context positions
//    max(ring_start(), P - window) .. P-1 plus the whole block, bidirectionally.
//  * Deterministic and allocation-free per proposal and per committed row (rings and scratch
//    are backend buffers sized at creation). Every batched op is batch invariant, so ring rows do not depend on how rows
//    were grouped into commit calls.
//  * Greedy Markov chain: d_k = argmax(U_k + W2·W1[prev]), ties -> smallest id; confidence
//    c_k = σ(w·[y_k ; W1[prev]]) with y_k the pre-norm HC-head output (§8).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "model/model.h"
#include "speculative/drafter_weights.h"

namespace ds4::session {
class BoundModel;
}

namespace ds4::speculative {

// One proposal. tokens[0..n) are the drafts d_0..d_{n-1} (d_k predicts position P+1+k).
struct Proposal {
  int n = 0;                          // 0 = no draft
  int32_t tokens[kMaxBlockSize] = {};
  float conf[kMaxBlockSize] = {};     // σ(confidence logit) of each produced draft
  float conf0 = 0.0f;                 // σ(conf_0), set whenever the block ran
  bool conf0_rejected = false;        // stopped by the position-0 precheck (no vocab head)
  bool no_context = false;            // ring does not end at the anchor position
};

// First index of the maximum of u[i] + bias[i] (bias may be null): ties -> smallest id; NaN
// never wins (all NaN / -inf: 0).
int32_t markov_argmax(const float* u, const float* bias, int64_t n);

// Threshold of draft position k: thr[min(k, size-1)], 0 when empty ("last value extends").
inline float threshold_at(std::span<const float> thr, int k) {
  if (thr.empty()) return 0.0f;
  return thr[static_cast<size_t>(k) < thr.size() ? k : thr.size() - 1];
}

// The drafter's weights as backend views (every pointer a backend address from the
// DrafterModel's WeightSet), plus the two target tensors it reads (the embedding table of the
// block input and the LM head).
struct DrafterMats {
  std::vector<StageWeights> stages;  // [S]
  backend::Matrix main_proj;         // [n_capture*E -> E]
  const float* main_norm = nullptr;  // [E]
  const float* norm = nullptr;       // [E]
  backend::Matrix hc_head_fn;        // [HC -> n_hc]
  float hc_head_scale = 1.0f;        // the [1] scale tensor's value (read from the host once)
  const float* hc_head_base = nullptr;  // [n_hc]
  backend::Matrix markov_w1;         // V rows of R
  backend::Matrix markov_w2;         // V rows of R
  backend::Matrix confidence;        // 1 row of E+R
  const uint8_t* token_embd = nullptr;  // target F16 [V, E]
  size_t token_embd_row_bytes = 0;
  backend::Matrix output;            // target LM head [E -> V]
};

// The immutable half: weights and shapes, bound once per loaded target (Backend::bind_weights)
// and shared by every session (it holds no per-session state; its methods are const).
class DrafterModel {
 public:
  // Binds the support file's tensors; the target's embedding and LM head come from `target`
  // (the Engine's BoundModel: nothing of the target is bound twice).
  static Expected<std::unique_ptr<DrafterModel>> create(const session::BoundModel& target,
                                                        std::unique_ptr<DrafterWeights> weights);
  // Without a BoundModel of the target: binds the two target tensors it reads itself.
  static Expected<std::unique_ptr<DrafterModel>> create(const model::Model& target, backend::Backend& be,
                                                        std::unique_ptr<DrafterWeights> weights);
  ~DrafterModel();

  const DSparkConfig& config() const { return w_->config; }
  // Host views of the support file (tools, tests); the forward runs on mats().
  const DrafterWeights& weights() const { return *w_; }
  const DrafterMats& mats() const { return mats_; }
  const model::Model& target() const { return target_; }
  backend::Backend& backend() const { return be_; }
  int64_t capture_width() const;  // n_capture * n_embd floats per captured row

 private:
  DrafterModel(const model::Model& target, backend::Backend& be, std::unique_ptr<DrafterWeights> w);
  static Status check(const model::Model& target, const DrafterWeights& w);
  void bind(bool with_target_head);
  const model::Model& target_;
  backend::Backend& be_;
  std::unique_ptr<DrafterWeights> w_;
  std::unique_ptr<backend::WeightSet> set_;
  DrafterMats mats_;
};

// One timeline of the drafter: its context rings, scratch and last proposal, over a
// DrafterModel that must outlive it. One per speculative session; any number per model.
class Drafter {
 public:
  explicit Drafter(const DrafterModel& model);
  ~Drafter();
  Drafter(const Drafter&) = delete;
  Drafter& operator=(const Drafter&) = delete;

  const DrafterModel& model() const { return m_; }
  const DSparkConfig& config() const { return m_.config(); }
  const DrafterWeights& weights() const { return m_.weights(); }
  const DrafterMats& mats() const { return m_.mats(); }
  int64_t capture_width() const { return m_.capture_width(); }

  // ---- context rings ----
  void ring_reset();
  // Commits rows at positions pos0 .. pos0+n-1; hidden: [n, capture_width()] f32 (HC means of
  // the capture layers, in target_layer_ids order), a backend address (inside a Buffer). Any
  // n >= 1 (processed in chunks).
  void commit_rows(int64_t pos0, int n, const float* hidden);
  int64_t ring_next() const { return ring_next_; }
  int64_t ring_start() const { return ring_start_; }
  // Ring row of `stage` at position pos ([head_dim] f32, a backend address: host memory on a
  // host-addressable backend), nullptr when not held.
  const float* ring_row(int stage, int64_t pos) const;
  // Rows of [ring_start, ring_next) past `pos` are dropped (pos <= ring_start empties it).
  void ring_truncate(int64_t pos);

  // ---- proposals ----
  // Anchor token at position pos; at most n_max (<= block_size) drafts; per-position σ
  // thresholds (last value extends; empty = 0). Lazy: conf_0 is checked before the vocab
  // head, and the chain stops at the first position below its threshold.
  void propose(int32_t anchor, int64_t pos, int n_max, std::span<const float> thresholds, Proposal* out);
  // After propose(): biased logits Z_k ([n_vocab], host view: a host-addressable backend only;
  // tests and tools) and the raw confidence logit of the positions the chain reached (k < out->n, or k == 0
  // when conf0 was computed).
  std::span<const float> last_z(int k) const;
  float last_conf_logit(int k) const { return conf_logit_[k]; }
  // How the Markov chain meets its thresholds. Lazy (host-addressable backends): one 8-byte
  // read per step, the chain stops at the first position below threshold. Eager (device
  // backends, where each read is a synchronization): the chain runs to n_max on the backend and
  // its words come back in one read; the host then replays the same stop rule. Both give the
  // same proposal bit for bit (the chain's ops do not depend on the stop); eager spends the
  // steps past the stop to save the per-step round trips.
  void set_eager_chain(bool eager) { eager_chain_ = eager; }
  bool eager_chain() const { return eager_chain_; }

 private:
  friend Expected<std::unique_ptr<Drafter>> load_drafter(const model::Model&, backend::Backend&,
                                                         const std::string&);
  void commit_chunk(int64_t pos0, int n, const float* hidden);
  void stage_forward(int s, int64_t pos);
  void stage_attention(int s, int64_t pos);
  void stage_ffn(int s);
  void output_head();

  std::unique_ptr<DrafterModel> owned_;  // set by load_drafter only (a standalone drafter)
  const DrafterModel& m_;
  const model::ModelConfig& cfg_;
  backend::Backend& be_;
  const DrafterWeights* w_;
  const DrafterMats* mw_;
  int B_ = 0;                  // block size
  int W_ = 0;                  // ring rows
  int64_t ring_start_ = 0;
  int64_t ring_next_ = 0;
  backend::Buffer ring_;       // [S, W, D] f32, backend memory
  float conf_logit_[kMaxBlockSize] = {};
  bool eager_chain_ = false;  // see set_eager_chain; default: !backend.host_addressable()

  struct Scratch;
  std::unique_ptr<Scratch> s_;
};

// Opens a support GGUF for `target` and binds its weights (one per loaded target).
Expected<std::unique_ptr<DrafterModel>> load_drafter_model(const session::BoundModel& target,
                                                           const std::string& path);
Expected<std::unique_ptr<DrafterModel>> load_drafter_model(const model::Model& target, backend::Backend& be,
                                                           const std::string& path);
// A standalone drafter that owns its DrafterModel (tests, tools: one timeline per file).
Expected<std::unique_ptr<Drafter>> load_drafter(const model::Model& target, backend::Backend& be,
                                                const std::string& path);

}  // namespace ds4::speculative
