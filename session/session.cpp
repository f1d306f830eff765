// session/session.cpp — ModelSession: creation and the timeline operations (prefill / decode /
// verify / checkpoint / rollback / commit_prefix / snapshots).
#include "session/session.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "session/scratch.h"

namespace ds4::session {

uint64_t ModelSession::estimate_bytes(const model::ModelConfig& cfg, int64_t n_ctx, int chunk_rows) {
  const uint64_t state = State::estimate_bytes(cfg, n_ctx, chunk_rows);
  // Frontier = compressor states only; kMaxBatchRows prefix slots + 1 checkpoint.
  uint64_t frontier = 0;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    const uint32_t r = cfg.compress_ratio(il);
    if (r == 0) continue;
    const uint64_t coff = r == 4 ? 2 : 1;
    frontier += 2 * coff * r * coff * cfg.head_dim * 4;
    if (r == 4) frontier += 2 * 8 * 2 * static_cast<uint64_t>(cfg.indexer_head_dim) * 4;
  }
  const int64_t raw_cap = std::min<int64_t>(cfg.n_swa, n_ctx) + raw_slack(chunk_rows);
  return state + (kMaxBatchRows + 1) * frontier + Scratch::bytes(cfg, n_ctx, raw_cap, chunk_rows) +
         static_cast<uint64_t>(cfg.n_vocab) * 4;
}

Status ModelSession::check_create(const model::ModelConfig& cfg, int64_t n_ctx, uint64_t max_bytes,
                                  int chunk_rows) {
  if (n_ctx < 1) return invalid_argument("context size must be >= 1 token, got %lld", static_cast<long long>(n_ctx));
  if (n_ctx > (int64_t{1} << 31) - 1) {
    return out_of_range("context size %lld exceeds the limit of %lld tokens", static_cast<long long>(n_ctx),
                        static_cast<long long>((int64_t{1} << 31) - 1));
  }
  const uint64_t need = estimate_bytes(cfg, n_ctx, chunk_rows);
  if (need > max_bytes) {
    return resource_error("a session of %lld tokens needs %.1f MiB of state, more than the %.1f MiB available",
                          static_cast<long long>(n_ctx), need / 1048576.0, max_bytes / 1048576.0);
  }
  if (cfg.n_expert_used > 64 || cfg.n_hc > 16) {
    return unsupported("n_expert_used %u / n_hc %u above the supported 64 / 16", cfg.n_expert_used, cfg.n_hc);
  }
  return Status();
}

Expected<std::unique_ptr<ModelSession>> ModelSession::create(const BoundModel& bound, int64_t n_ctx,
                                                             uint64_t max_bytes) {
  DS4_RETURN_IF_ERROR(check_create(bound.model().config(), n_ctx, max_bytes, bound.chunk_rows()));
  return std::unique_ptr<ModelSession>(new ModelSession(bound, n_ctx));
}

Expected<std::unique_ptr<ModelSession>> ModelSession::create(const model::Model& model,
                                                             backend::Backend& backend,
                                                             int64_t n_ctx, uint64_t max_bytes,
                                                             int chunk_rows) {
  if (chunk_rows < 1 || chunk_rows > kMaxChunkRows) {
    return invalid_argument("prefill chunk must be 1..%d rows, got %d", kMaxChunkRows, chunk_rows);
  }
  DS4_RETURN_IF_ERROR(check_create(model.config(), n_ctx, max_bytes, chunk_rows));
  std::unique_ptr<BoundModel> bound = BoundModel::bind(model, backend, chunk_rows);
  std::unique_ptr<ModelSession> s(new ModelSession(*bound, n_ctx));
  s->own_bound_ = std::move(bound);
  return s;
}

ModelSession::ModelSession(const BoundModel& bound, int64_t n_ctx)
    : bound_(&bound), cfg_(bound.model().config()), be_(bound.backend()),
      state_(bound.model().config(), n_ctx, bound.backend(), bound.chunk_rows()) {
  checkpoint_ = state_.make_frontier();
  checkpoint_logits_ = backend::Array<float>(be_, cfg_.n_vocab);
  for (int i = 0; i < kMaxBatchRows; ++i) slots_.push_back(state_.make_frontier());
  row_results_.resize(kMaxBatchRows);
  capture_index_.assign(cfg_.n_layer, -1);
  s_ = std::make_unique<Scratch>(be_, cfg_, n_ctx, state_.raw_cap(), bound.chunk_rows());
  if (!be_.host_addressable()) {
    logits_host_.assign(cfg_.n_vocab, 0.0f);
    row_logits_host_.assign(s_->row_logits.size(), 0.0f);
  }
  state_.save_frontier(checkpoint_);
}

std::span<const float> ModelSession::host_floats(const backend::Array<float>& a, std::vector<float>& mirror,
                                                 size_t off, size_t n) const {
  if (be_.host_addressable()) return a.host().subspan(off, n);
  be_.download(mirror.data() + off, a.data() + off, n * sizeof(float));
  return std::span<const float>(mirror.data() + off, n);
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
    const int n = std::min(bound_->chunk_rows(), total - done);
    const bool last = done + n == total;
    forward_rows(tokens.data() + done, n, last ? n - 1 : n, false);
    done += n;
    if (progress) {
      // A device backend runs ahead of the host: wait for the chunk, so progress (and a cancel
      // between calls, engine/generate.cpp) is measured in finished work, at most one chunk late.
      be_.sync();
      progress(done, total);
    }
  }
  if (total > 0) {
    // The last chunk computed logits for its last row only: row_logits row 0.
    be_.copy(state_.logits().data(), s_->row_logits.data(), sizeof(float) * cfg_.n_vocab);
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
  be_.copy(state_.logits().data(), s_->row_logits.data(), sizeof(float) * cfg_.n_vocab);
  state_.set_has_logits(true);
  return Status();
}

Status ModelSession::decode_many(std::span<ModelSession* const> sessions, std::span<const int32_t> tokens) {
  for (ModelSession* s : sessions) {
    if (s != nullptr) ++s->logits_epoch_;
  }
  const size_t k = sessions.size();
  if (k < 1 || k > static_cast<size_t>(kMaxBatchRows) || tokens.size() != k) {
    return invalid_argument("decode_many takes 1..%d sessions and one token each, got %zu sessions and %zu tokens",
                            kMaxBatchRows, k, tokens.size());
  }
  for (size_t i = 0; i < k; ++i) {
    if (sessions[i] == nullptr) return invalid_argument("decode_many: session %zu is null", i);
    if (sessions[i]->bound_ != sessions[0]->bound_) {
      return invalid_argument("decode_many: session %zu is bound to other weights than session 0", i);
    }
    for (size_t j = 0; j < i; ++j) {
      if (sessions[j] == sessions[i]) return invalid_argument("decode_many: session %zu repeats session %zu", i, j);
    }
    const Status st = sessions[i]->validate_tokens(tokens.subspan(i, 1));
    if (!st.ok()) return Status(st.code(), "decode_many: session " + std::to_string(i) + ": " + st.message());
  }
  // Session 0's scratch carries the stacked rows; the row logits land in its row_logits.
  ModelSession& lead = *sessions[0];
  for (ModelSession* s : sessions) s->verify_base_ = -1;
  lead.forward_rows(tokens.data(), static_cast<int>(k), 0, false, sessions.data());
  const int64_t V = lead.cfg_.n_vocab;
  for (size_t i = 0; i < k; ++i) {
    ModelSession& s = *sessions[i];
    lead.be_.copy(s.state_.logits().data(), lead.s_->row_logits.data() + static_cast<int64_t>(i) * V,
                  sizeof(float) * V);
    s.state_.set_has_logits(true);
  }
  return Status();
}

std::span<const float> ModelSession::logits() const {
  if (!state_.has_logits()) return {};
  return host_floats(state_.logits(), logits_host_, 0, cfg_.n_vocab);
}

int32_t ModelSession::greedy_token(int32_t excluded) {
  if (!state_.has_logits()) return -1;
  backend::ArgmaxParams ap;
  ap.x = state_.logits().data();
  ap.n = cfg_.n_vocab;
  ap.stride = cfg_.n_vocab;
  ap.out = s_->argmax.data();
  ap.excluded = excluded;
  be_.argmax(ap);
  int32_t id = -1;
  be_.download(&id, s_->argmax.data(), sizeof(id));
  return id;
}

TopTwo ModelSession::top_two_token(int32_t excluded) {
  if (!state_.has_logits()) return TopTwo{-1, 0.0f};
  int32_t* ro = s_->readout.data();
  backend::ArgmaxParams ap;
  ap.x = state_.logits().data();
  ap.n = cfg_.n_vocab;
  ap.stride = cfg_.n_vocab;
  ap.out = ro;
  ap.excluded = excluded;
  ap.margin = reinterpret_cast<float*>(ro + 1);
  be_.argmax(ap);
  uint32_t words[2];
  be_.download(words, ro, sizeof words);
  TopTwo t;
  std::memcpy(&t.id, &words[0], 4);
  std::memcpy(&t.margin, &words[1], 4);
  return t;
}

bool ModelSession::top_candidates(int k, int32_t excluded, int32_t* ids, float* values) {
  DS4_CHECK_MSG(k >= 1 && k <= backend::kTopKMax, "top_candidates: k out of range");
  if (!state_.has_logits()) return false;
  int32_t* ro = s_->readout.data();
  backend::TopKParams tp;
  tp.x = state_.logits().data();
  tp.n = cfg_.n_vocab;
  tp.stride = cfg_.n_vocab;
  tp.k = k;
  tp.excluded = excluded;
  tp.ids = ro;
  tp.values = reinterpret_cast<float*>(ro + k);
  be_.top_k(tp);
  uint32_t words[2 * backend::kTopKMax];
  be_.download(words, ro, sizeof(uint32_t) * 2 * static_cast<size_t>(k));
  std::memcpy(ids, words, sizeof(int32_t) * static_cast<size_t>(k));
  std::memcpy(values, words + k, sizeof(float) * static_cast<size_t>(k));
  return true;
}

Expected<std::span<const RowResult>> ModelSession::verify(std::span<const int32_t> rows, int32_t excluded,
                                                          bool read_logits) {
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
  backend::ArgmaxParams ap;
  ap.x = s_->row_logits.data();
  ap.n = V;
  ap.stride = V;
  ap.n_rows = n;
  ap.out = s_->readout.data();
  ap.excluded = excluded;
  ap.margin = reinterpret_cast<float*>(s_->readout.data() + n);
  be_.argmax(ap);
  uint32_t words[2 * kMaxBatchRows];  // n ids, then n margins: one download
  be_.download(words, s_->readout.data(), sizeof(uint32_t) * 2 * static_cast<size_t>(n));
  int32_t ids[kMaxBatchRows];
  float margins[kMaxBatchRows];
  std::memcpy(ids, words, sizeof(int32_t) * static_cast<size_t>(n));
  std::memcpy(margins, words + n, sizeof(float) * static_cast<size_t>(n));
  std::span<const float> all;
  if (read_logits) all = host_floats(s_->row_logits, row_logits_host_, 0, static_cast<size_t>(n) * V);
  for (int i = 0; i < n; ++i) {
    row_results_[i].argmax = ids[i];
    row_results_[i].margin = margins[i];
    row_results_[i].logits = read_logits ? all.subspan(static_cast<size_t>(i) * V, V) : std::span<const float>();
    slots_[i].n_tokens = verify_base_ + i + 1;
  }
  be_.copy(state_.logits().data(), s_->row_logits.data() + (n - 1) * V, sizeof(float) * V);
  state_.set_has_logits(true);
  return std::span<const RowResult>(row_results_.data(), n);
}

std::span<const float> ModelSession::verify_row_logits(int i) const {
  if (verify_base_ < 0 || i < 0 || i >= verify_rows_) return {};
  const size_t V = static_cast<size_t>(cfg_.n_vocab);
  return host_floats(s_->row_logits, row_logits_host_, static_cast<size_t>(i) * V, V);
}

void ModelSession::checkpoint() {
  state_.save_frontier(checkpoint_);
  be_.copy(checkpoint_logits_.data(), state_.logits().data(), checkpoint_logits_.bytes());
  checkpoint_has_logits_ = state_.has_logits();
}

void ModelSession::rollback() {
  ++logits_epoch_;
  DS4_CHECK_MSG(n_tokens() >= checkpoint_.n_tokens && n_tokens() - checkpoint_.n_tokens <= kRollbackSlack,
                "rollback: more tokens appended since the checkpoint than the raw ring slack");
  state_.restore_frontier(checkpoint_);
  be_.copy(state_.logits().data(), checkpoint_logits_.data(), checkpoint_logits_.bytes());
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
    be_.copy(state_.logits().data(), s_->row_logits.data() + static_cast<int64_t>(k - 1) * cfg_.n_vocab,
             sizeof(float) * cfg_.n_vocab);
  }
  verify_base_ = -1;
  return Status();
}

Status ModelSession::fill_synthetic(int64_t n, int32_t token) {
  if (n_tokens() != 0) {
    return invalid_argument("fill_synthetic needs an empty session, this one holds %lld tokens",
                            static_cast<long long>(n_tokens()));
  }
  if (n < 0) return invalid_argument("fill_synthetic: token count must be >= 0, got %lld", static_cast<long long>(n));
  if (n > n_ctx()) {
    return out_of_range("fill_synthetic: %lld tokens do not fit a context of %lld tokens", static_cast<long long>(n),
                        static_cast<long long>(n_ctx()));
  }
  if (token < 0 || static_cast<uint32_t>(token) >= cfg_.n_vocab) {
    return invalid_argument("fill_synthetic: token id %d outside the vocabulary [0, %u)", token, cfg_.n_vocab);
  }
  ++logits_epoch_;
  verify_base_ = -1;
  state_.fill_synthetic(n, token);
  // The filled timeline is the rollback point, as after a prefill from an empty timeline.
  state_.save_frontier(checkpoint_);
  be_.copy(checkpoint_logits_.data(), state_.logits().data(), checkpoint_logits_.bytes());
  checkpoint_has_logits_ = false;
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

Status ModelSession::import_state(std::span<const uint8_t> payload) {
  ++logits_epoch_;
  verify_base_ = -1;
  if (!state_.deserialize(payload)) {
    reset();
    return corrupt("session state payload does not match this session (model shape, n_ctx, counters or token ids)");
  }
  // The loaded state is the new rollback point, as after a prefill from an empty timeline.
  state_.save_frontier(checkpoint_);
  be_.copy(checkpoint_logits_.data(), state_.logits().data(), checkpoint_logits_.bytes());
  checkpoint_has_logits_ = state_.has_logits();
  return Status();
}

void ModelSession::reset() {
  ++logits_epoch_;
  state_.reset();
  verify_base_ = -1;
  state_.save_frontier(checkpoint_);
  be_.copy(checkpoint_logits_.data(), state_.logits().data(), checkpoint_logits_.bytes());
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
  const size_t floats = static_cast<size_t>(s_->rows) * capture_layers_.size() * cfg_.n_embd;
  captured_ = backend::Array<float>(be_, floats);
  if (!be_.host_addressable()) captured_host_.assign(floats, 0.0f);
}

void ModelSession::set_capture_sink(std::function<void(int64_t, std::span<const float>)> sink) {
  capture_sink_ = std::move(sink);
}

std::span<const float> ModelSession::captured_backend_row(int i) const {
  const size_t per_row = capture_layers_.size() * cfg_.n_embd;
  return std::span<const float>(captured_.data() + static_cast<size_t>(i) * per_row, per_row);
}

std::span<const float> ModelSession::captured_row(int i) const {
  const size_t per_row = capture_layers_.size() * cfg_.n_embd;
  return host_floats(captured_, captured_host_, static_cast<size_t>(i) * per_row, per_row);
}

}  // namespace ds4::session
