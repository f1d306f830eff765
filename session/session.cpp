// session/session.cpp — ModelSession: creation, weight views, and the timeline operations
// (prefill / decode / verify / checkpoint / rollback / commit_prefix / snapshots).
#include "session/session.h"

#include <algorithm>
#include <cstring>

#include "core/reduce.h"
#include "session/scratch.h"

namespace ds4::session {

namespace {

backend::Matrix mat(const model::TensorView& t) {
  if (!t.present()) return {};
  return backend::Matrix{t.data, t.type, t.ne[0], t.ne[1], static_cast<size_t>(t.row_bytes)};
}

backend::ExpertMatrix experts(const model::TensorView& t) {
  return backend::ExpertMatrix{t.data, t.type, t.ne[0], t.ne[1], t.ne[2], static_cast<size_t>(t.row_bytes)};
}

template <typename T>
const T* ptr(const model::TensorView& t) {
  return t.present() ? t.as<T>() : nullptr;
}

LayerMats bind_layer(const model::LayerWeights& w) {
  LayerMats m;
  m.hc_attn_fn = mat(w.hc_attn_fn);
  m.attn_q_a = mat(w.attn_q_a);
  m.attn_q_b = mat(w.attn_q_b);
  m.attn_kv = mat(w.attn_kv);
  m.attn_output_a = mat(w.attn_output_a);
  m.attn_output_b = mat(w.attn_output_b);
  m.cmp_kv = mat(w.attn_compressor_kv);
  m.cmp_gate = mat(w.attn_compressor_gate);
  m.idx_q_b = mat(w.indexer_attn_q_b);
  m.idx_proj = mat(w.indexer_proj);
  m.idx_cmp_kv = mat(w.indexer_compressor_kv);
  m.idx_cmp_gate = mat(w.indexer_compressor_gate);
  m.hc_ffn_fn = mat(w.hc_ffn_fn);
  m.ffn_gate_inp = mat(w.ffn_gate_inp);
  m.ffn_gate_shexp = mat(w.ffn_gate_shexp);
  m.ffn_up_shexp = mat(w.ffn_up_shexp);
  m.ffn_down_shexp = mat(w.ffn_down_shexp);
  m.gate_exps = experts(w.ffn_gate_exps);
  m.up_exps = experts(w.ffn_up_exps);
  m.down_exps = experts(w.ffn_down_exps);
  m.hc_attn_scale = ptr<float>(w.hc_attn_scale);
  m.hc_attn_base = ptr<float>(w.hc_attn_base);
  m.attn_norm = ptr<float>(w.attn_norm);
  m.q_a_norm = ptr<float>(w.attn_q_a_norm);
  m.kv_a_norm = ptr<float>(w.attn_kv_a_norm);
  m.sinks = ptr<float>(w.attn_sinks);
  m.cmp_ape = ptr<uint16_t>(w.attn_compressor_ape);
  m.cmp_norm = ptr<float>(w.attn_compressor_norm);
  m.idx_cmp_ape = ptr<uint16_t>(w.indexer_compressor_ape);
  m.idx_cmp_norm = ptr<float>(w.indexer_compressor_norm);
  m.hc_ffn_scale = ptr<float>(w.hc_ffn_scale);
  m.hc_ffn_base = ptr<float>(w.hc_ffn_base);
  m.ffn_norm = ptr<float>(w.ffn_norm);
  m.exp_probs_b = ptr<float>(w.exp_probs_b);
  m.tid2eid = ptr<int32_t>(w.ffn_gate_tid2eid);
  return m;
}

}  // namespace

uint64_t ModelSession::estimate_bytes(const model::ModelConfig& cfg, int64_t n_ctx) {
  const uint64_t state = State::estimate_bytes(cfg, n_ctx);
  // Frontier = compressor states only; kMaxBatchRows prefix slots + 1 checkpoint.
  uint64_t frontier = 0;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    const uint32_t r = cfg.compress_ratio(il);
    if (r == 0) continue;
    const uint64_t coff = r == 4 ? 2 : 1;
    frontier += 2 * coff * r * coff * cfg.head_dim * 4;
    if (r == 4) frontier += 2 * 8 * 2 * static_cast<uint64_t>(cfg.indexer_head_dim) * 4;
  }
  const int64_t raw_cap = std::min<int64_t>(cfg.n_swa, n_ctx) + kRollbackSlack;
  return state + (kMaxBatchRows + 1) * frontier + Scratch::bytes(cfg, n_ctx, raw_cap) +
         static_cast<uint64_t>(cfg.n_vocab) * 4;
}

Expected<std::unique_ptr<ModelSession>> ModelSession::create(const model::Model& model,
                                                             backend::Backend& backend,
                                                             int64_t n_ctx, uint64_t max_bytes) {
  const model::ModelConfig& cfg = model.config();
  if (n_ctx < 1) return invalid_argument("context size must be >= 1 token, got %lld", static_cast<long long>(n_ctx));
  if (n_ctx > (int64_t{1} << 31) - 1) {
    return out_of_range("context size %lld exceeds the limit of %lld tokens", static_cast<long long>(n_ctx),
                        static_cast<long long>((int64_t{1} << 31) - 1));
  }
  const uint64_t need = estimate_bytes(cfg, n_ctx);
  if (need > max_bytes) {
    return resource_error("a session of %lld tokens needs %.1f MiB of state, more than the %.1f MiB available",
                          static_cast<long long>(n_ctx), need / 1048576.0, max_bytes / 1048576.0);
  }
  if (cfg.n_expert_used > 64 || cfg.n_hc > 16) {
    return unsupported("n_expert_used %u / n_hc %u above the supported 64 / 16", cfg.n_expert_used, cfg.n_hc);
  }
  return std::unique_ptr<ModelSession>(new ModelSession(model, backend, n_ctx));
}

ModelSession::ModelSession(const model::Model& model, backend::Backend& backend, int64_t n_ctx)
    : model_(model), cfg_(model.config()), be_(backend), state_(model.config(), n_ctx) {
  for (const model::LayerWeights& w : model.weights().layers) mats_.push_back(bind_layer(w));
  checkpoint_ = state_.make_frontier();
  checkpoint_logits_.assign(cfg_.n_vocab, 0.0f);
  for (int i = 0; i < kMaxBatchRows; ++i) slots_.push_back(state_.make_frontier());
  row_results_.resize(kMaxBatchRows);
  capture_index_.assign(cfg_.n_layer, -1);
  s_ = std::make_unique<Scratch>(cfg_, n_ctx, state_.raw_cap());
  state_.save_frontier(checkpoint_);
}

ModelSession::~ModelSession() = default;

Status ModelSession::validate_tokens(std::span<const int32_t> tokens) const {
  const int64_t have = n_tokens();
  if (have + static_cast<int64_t>(tokens.size()) > n_ctx()) {
    return out_of_range("%zu more tokens do not fit: %lld already in a context of %lld tokens",
                        tokens.size(), static_cast<long long>(have), static_cast<long long>(n_ctx()));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || static_cast<uint32_t>(tokens[i]) >= cfg_.n_vocab) {
      return invalid_argument("token %zu has id %d, outside the vocabulary [0, %u)", i, tokens[i], cfg_.n_vocab);
    }
  }
  return Status();
}

Status ModelSession::prefill(std::span<const int32_t> tokens, const std::function<void(int, int)>& progress) {
  ++logits_epoch_;
  DS4_RETURN_IF_ERROR(validate_tokens(tokens));
  verify_base_ = -1;
  const int total = static_cast<int>(tokens.size());
  for (int done = 0; done < total;) {
    const int n = std::min(kMaxChunkRows, total - done);
    const bool last = done + n == total;
    forward_rows(tokens.data() + done, n, last ? n - 1 : n, false);
    done += n;
    if (progress) progress(done, total);
  }
  if (total > 0) {
    // The last chunk computed logits for its last row only: row_logits row 0.
    std::memcpy(state_.logits().data(), s_->row_logits.data(), sizeof(float) * cfg_.n_vocab);
    state_.set_has_logits(true);
  }
  return Status();
}

Status ModelSession::decode(int32_t token) {
  ++logits_epoch_;
  const int32_t t[1] = {token};
  DS4_RETURN_IF_ERROR(validate_tokens(t));
  verify_base_ = -1;
  forward_rows(t, 1, 0, false);
  std::memcpy(state_.logits().data(), s_->row_logits.data(), sizeof(float) * cfg_.n_vocab);
  state_.set_has_logits(true);
  return Status();
}

std::span<const float> ModelSession::logits() const {
  if (!state_.has_logits()) return {};
  return std::span<const float>(state_.logits());
}

Expected<std::span<const RowResult>> ModelSession::verify(std::span<const int32_t> rows) {
  ++logits_epoch_;
  if (rows.empty() || rows.size() > static_cast<size_t>(kMaxBatchRows)) {
    return invalid_argument("verify takes 1..%d rows, got %zu", kMaxBatchRows, rows.size());
  }
  DS4_RETURN_IF_ERROR(validate_tokens(rows));
  const int n = static_cast<int>(rows.size());
  verify_base_ = n_tokens();
  verify_rows_ = n;
  forward_rows(rows.data(), n, 0, true);
  const int64_t V = cfg_.n_vocab;
  for (int i = 0; i < n; ++i) {
    const float* l = s_->row_logits.data() + i * V;
    row_results_[i].argmax = top_two(std::span<const float>(l, V)).id;
    row_results_[i].logits = std::span<const float>(l, V);
    slots_[i].n_tokens = verify_base_ + i + 1;
  }
  std::memcpy(state_.logits().data(), s_->row_logits.data() + (n - 1) * V, sizeof(float) * V);
  state_.set_has_logits(true);
  return std::span<const RowResult>(row_results_.data(), n);
}

void ModelSession::checkpoint() {
  state_.save_frontier(checkpoint_);
  checkpoint_logits_ = state_.logits();
  checkpoint_has_logits_ = state_.has_logits();
}

void ModelSession::rollback() {
  ++logits_epoch_;
  DS4_CHECK_MSG(n_tokens() >= checkpoint_.n_tokens && n_tokens() - checkpoint_.n_tokens <= kRollbackSlack,
                "rollback: more tokens appended since the checkpoint than the raw ring slack");
  state_.restore_frontier(checkpoint_);
  state_.logits() = checkpoint_logits_;
  state_.set_has_logits(checkpoint_has_logits_);
  verify_base_ = -1;
}

Status ModelSession::commit_prefix(int k) {
  ++logits_epoch_;
  if (verify_base_ < 0 || n_tokens() != verify_base_ + verify_rows_) {
    return invalid_argument("commit_prefix needs a verify() as the last appending call");
  }
  if (k < 1 || k > verify_rows_) {
    return invalid_argument("commit_prefix(%d): k must be in [1, %d]", k, verify_rows_);
  }
  if (k < verify_rows_) {
    state_.restore_frontier(slots_[k - 1]);
    std::memcpy(state_.logits().data(), s_->row_logits.data() + static_cast<int64_t>(k - 1) * cfg_.n_vocab,
                sizeof(float) * cfg_.n_vocab);
  }
  verify_base_ = -1;
  return Status();
}

Status ModelSession::save_snapshot() {
  state_.serialize(snapshot_);
  has_snapshot_ = true;
  return Status();
}

Status ModelSession::restore_snapshot() {
  ++logits_epoch_;
  if (!has_snapshot_) return invalid_argument("restore_snapshot: no snapshot was saved");
  if (!state_.deserialize(snapshot_)) return internal_error("restore_snapshot: snapshot does not match the session");
  verify_base_ = -1;
  return Status();
}

void ModelSession::reset() {
  ++logits_epoch_;
  state_.reset();
  verify_base_ = -1;
  state_.save_frontier(checkpoint_);
  checkpoint_logits_ = state_.logits();
  checkpoint_has_logits_ = false;
}

void ModelSession::set_capture_layers(std::vector<int> layers) {
  capture_layers_.clear();
  capture_index_.assign(cfg_.n_layer, -1);
  for (int il : layers) {
    if (il < 0 || static_cast<uint32_t>(il) >= cfg_.n_layer || capture_index_[il] >= 0) continue;
    capture_index_[il] = static_cast<int>(capture_layers_.size());
    capture_layers_.push_back(il);
  }
  captured_.assign(static_cast<size_t>(kMaxChunkRows) * capture_layers_.size() * cfg_.n_embd, 0.0f);
}

void ModelSession::set_capture_sink(std::function<void(int64_t, std::span<const float>)> sink) {
  capture_sink_ = std::move(sink);
}

std::span<const float> ModelSession::captured_row(int i) const {
  const size_t per_row = capture_layers_.size() * cfg_.n_embd;
  return std::span<const float>(captured_.data() + static_cast<size_t>(i) * per_row, per_row);
}

}  // namespace ds4::session
