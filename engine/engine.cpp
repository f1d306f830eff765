// engine/engine.cpp — Engine::open and the Engine / Session facades.
//
// Role: opens and validates the model (model::Model), builds the backend by name
// (backend/registry.h: "cpu"; "cuda" is a clear error until it exists), reads the tokenizer
// (TextCodec) and hands out Sessions that wrap session::ModelSession. Frontends see only engine.h.
// Invariants: the Engine outlives its Sessions (documented contract of engine.h); a Session
// never touches another Session's state; new_session() fails cleanly (kResource) when the
// context does not fit in memory.
#include "engine/engine.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "backend/backend.h"
#include "backend/registry.h"
#include "core/reduce.h"
#include "engine/engine_internal.h"
#include "engine/speculative.h"
#include "engine/state_file.h"
#include "speculative/drafter.h"
#include "speculative/oracle_proposer.h"
#include "engine/text.h"
#include "model/model.h"
#include "session/session.h"

namespace ds4 {

namespace {

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return uint64_t{1} << 34;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

constexpr int kMaxDecodeBatch = session::kMaxBatchRows;

class SessionImpl final : public Session {
 public:
  SessionImpl(std::unique_ptr<session::ModelSession> s, uint64_t model_id) : s_(std::move(s)), model_id_(model_id) {}

  int n_ctx() const override { return static_cast<int>(s_->n_ctx()); }
  int n_tokens() const override { return static_cast<int>(s_->n_tokens()); }
  std::span<const int32_t> tokens() const override { return s_->tokens(); }
  Status prefill(std::span<const int32_t> tokens, const ProgressFn& progress) override {
    return s_->prefill(tokens, progress);
  }
  Status decode(int32_t token) override { return s_->decode(token); }
  std::span<const float> logits() const override { return s_->logits(); }
  int32_t greedy_next(int32_t banned) override { return s_->greedy_token(banned); }
  bool top_candidates(int k, int32_t banned, int32_t* ids, float* values) override {
    return s_->top_candidates(k, banned, ids, values);
  }
  Expected<std::vector<VerifyRow>> verify(std::span<const int32_t> rows) override {
    auto r = s_->verify(rows);
    if (!r.ok()) return r.status();
    std::vector<VerifyRow> out;
    out.reserve(r->size());
    for (const session::RowResult& row : *r) out.push_back(VerifyRow{row.argmax, row.logits});
    return out;
  }
  void checkpoint() override { s_->checkpoint(); }
  void rollback() override { s_->rollback(); }
  Status commit_prefix(int k) override { return s_->commit_prefix(k); }
  Status save_snapshot() override { return s_->save_snapshot(); }
  Status restore_snapshot() override { return s_->restore_snapshot(); }
  uint64_t state_bytes() const override { return s_->state_bytes(); }
  void reset() override { s_->reset(); }
  Status fill_synthetic(int n) override { return s_->fill_synthetic(n); }
  Status export_state(std::vector<uint8_t>* image) const override {
    std::vector<uint8_t> payload;
    s_->export_state(payload);
    encode_state_image(model_id_, s_->n_ctx(), s_->tokens(), payload, image);
    return Status();
  }
  Status import_state(std::span<const uint8_t> image) override {
    std::span<const uint8_t> payload;
    Expected<StateFileHeader> h = decode_state_image(image, model_id_, s_->n_ctx(), &payload);
    if (!h.ok()) {
      s_->reset();
      return h.status();
    }
    DS4_RETURN_IF_ERROR(s_->import_state(payload));
    const std::span<const int32_t> got = s_->tokens();
    if (!std::equal(got.begin(), got.end(), h->tokens.begin(), h->tokens.end())) {
      s_->reset();
      return corrupt("state file: the payload's tokens differ from its header's");
    }
    return Status();
  }
  session::ModelSession* inner() { return s_.get(); }

 private:
  std::unique_ptr<session::ModelSession> s_;
  uint64_t model_id_ = 0;
};

class EngineImpl final : public Engine {
 public:
  EngineImpl(std::unique_ptr<model::Model> model, std::unique_ptr<backend::Backend> be,
             std::unique_ptr<TextCodec> text, std::unique_ptr<speculative::DrafterModel> drafter,
             ModelInfo info, int chunk_rows)
      : model_(std::move(model)),
        be_(std::move(be)),
        bound_(session::BoundModel::bind(*model_, *be_, chunk_rows)),
        text_(std::move(text)),
        drafter_(std::move(drafter)),
        info_(std::move(info)) {}

  const ModelInfo& info() const override { return info_; }

  Expected<std::unique_ptr<Session>> new_session(int n_ctx) override {
    uint64_t limit = physical_memory_bytes();
    if (!be_->host_addressable() && n_ctx >= 1) {
      // Device memory: the session's buffers must fit what is free now.
      char what[64];
      std::snprintf(what, sizeof what, "a session of %d tokens", n_ctx);
      DS4_RETURN_IF_ERROR(be_->check_memory(
          session::ModelSession::estimate_bytes(model_->config(), n_ctx, bound_->chunk_rows()), what));
      limit = UINT64_MAX;
    }
    auto s = session::ModelSession::create(*bound_, n_ctx, limit);
    if (!s.ok()) return s.status();
    return std::unique_ptr<Session>(new SessionImpl(std::move(s).value(), info_.model_id));
  }

  uint64_t session_bytes(int n_ctx) const override {
    return n_ctx < 1 ? 0 : session::ModelSession::estimate_bytes(model_->config(), n_ctx, bound_->chunk_rows());
  }

  Status decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens) override {
    session::ModelSession* inner[kMaxDecodeBatch];
    if (sessions.size() > kMaxDecodeBatch) {
      return invalid_argument("decode_batch takes at most %d sessions, got %zu", kMaxDecodeBatch, sessions.size());
    }
    for (size_t i = 0; i < sessions.size(); ++i) {
      auto* impl = dynamic_cast<SessionImpl*>(sessions[i]);
      if (impl == nullptr) return invalid_argument("decode_batch: session %zu was not made by an engine", i);
      inner[i] = impl->inner();
      if (&inner[i]->bound() != bound_.get()) {
        return invalid_argument("decode_batch: session %zu belongs to another engine", i);
      }
    }
    return session::ModelSession::decode_many(std::span<session::ModelSession* const>(inner, sessions.size()),
                                              tokens);
  }

  // text_ is never null: Engine::open fails when the tokenizer metadata is unusable.
  std::vector<int32_t> tokenize(std::string_view text) const override {
    return text_->tokenize(text);
  }
  std::vector<int32_t> tokenize_rendered(std::string_view text) const override {
    return text_->tokenize_rendered(text);
  }
  std::string render_chat(std::span<const ChatMessage> messages, ThinkMode mode) const override {
    return text_->render_chat(messages, mode);
  }
  std::string token_bytes(int32_t token) const override { return text_->token_bytes(token); }
  std::string detokenize(std::span<const int32_t> tokens) const override {
    return text_->detokenize(tokens);
  }
  int32_t bos_token() const override { return text_->bos(); }
  int32_t eos_token() const override { return text_->eos(); }
  const TextCodec& text() const override { return *text_; }

  const speculative::DrafterModel* drafter() const { return drafter_.get(); }

 private:
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<backend::Backend> be_;
  std::unique_ptr<session::BoundModel> bound_;  // the weights bound once; every session shares them
  std::unique_ptr<TextCodec> text_;
  std::unique_ptr<speculative::DrafterModel> drafter_;  // null without --mtp; shared by every session
  ModelInfo info_;
};

ModelInfo make_info(const model::Model& m, const std::string& path) {
  const model::ModelConfig& c = m.config();
  ModelInfo info;
  info.name = c.name;
  info.path = path;
  std::error_code ec;
  info.file_bytes = std::filesystem::file_size(path, ec);
  if (ec) info.file_bytes = 0;
  info.n_layer = static_cast<int>(c.n_layer);
  info.n_embd = static_cast<int>(c.n_embd);
  info.n_vocab = static_cast<int>(c.n_vocab);
  info.n_ctx_train = static_cast<int>(std::min<uint64_t>(c.context_length, INT32_MAX));
  info.routed_quant_bits = m.expert_quant() == model::ExpertQuant::kQ4 ? 4 : 2;
  // Steady-state growth: ratio-4 layers add (D + idx_dim) f32 per 4 tokens, ratio-128 layers
  // D f32 per 128 tokens (§6.1); exact for the Flash and tiny shapes.
  double per_token = 0.0;
  uint64_t fixed = 0;
  for (uint32_t il = 0; il < c.n_layer; ++il) {
    const uint32_t r = c.compress_ratio(il);
    fixed += static_cast<uint64_t>(c.raw_capacity(c.n_swa)) * c.head_dim * 4;
    if (r == 4) {
      per_token += (c.head_dim + c.indexer_head_dim) * 4.0 / 4.0;
      fixed += 2ull * 8 * 2 * c.head_dim * 4 + 2ull * 8 * 2 * c.indexer_head_dim * 4;
    } else if (r == 128) {
      per_token += c.head_dim * 4.0 / 128.0;
      fixed += 2ull * 128 * c.head_dim * 4;
    }
  }
  info.kv_bytes_per_token = static_cast<uint64_t>(per_token + 0.5);
  info.session_fixed_bytes = fixed;
  info.has_drafter = false;
  return info;
}

// FNV-1a-64 over what a session state depends on: the GGUF metadata (keys, types, raw
// values), the tensor table (name, type, shape, offset, size), the first kSampleBytes of every
// tensor (cheap even for a 100 GB file: one page each), the file size and the numerics
// options that change computed bits (activation numerics, backend kind).
uint64_t model_identity(const model::Model& m, const EngineOptions& o) {
  constexpr uint64_t kSampleBytes = 4096;
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  };
  auto mix_u64 = [&mix](uint64_t v) { mix(&v, sizeof(v)); };
  const gguf::File& f = m.file();
  mix_u64(f.file_size());
  for (const gguf::KeyValue& kv : f.metadata()) {
    mix(kv.key.data(), kv.key.size());
    mix_u64(static_cast<uint64_t>(kv.type) << 32 | static_cast<uint64_t>(kv.array_type));
    mix_u64(kv.array_count);
    mix_u64(kv.data_bytes);
    if (kv.data != nullptr) mix(kv.data, kv.data_bytes);
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    mix(t.name.data(), t.name.size());
    mix_u64(static_cast<uint64_t>(t.type));
    for (int64_t d : t.ne) mix_u64(static_cast<uint64_t>(d));
    mix_u64(t.offset);
    mix_u64(t.nbytes);
    if (t.data != nullptr) mix(t.data, std::min(t.nbytes, kSampleBytes));
  }
  // Not the backend: every backend computes the same bits, so a state saved on one loads on
  // any other.
  mix_u64(o.f32_activations ? 1 : 0);
  return h;
}

}  // namespace

Status Session::export_state(std::vector<uint8_t>*) const {
  return unsupported("this session cannot export its state");
}
Status Session::import_state(std::span<const uint8_t>) {
  return unsupported("this session cannot import a state");
}
Status Session::fill_synthetic(int) {
  return unsupported("this session cannot be filled synthetically");
}

session::ModelSession* model_session(Session& s) {
  auto* impl = dynamic_cast<SessionImpl*>(&s);
  return impl != nullptr ? impl->inner() : nullptr;
}

const speculative::DrafterModel* engine_drafter(Engine& e) {
  auto* impl = dynamic_cast<EngineImpl*>(&e);
  return impl != nullptr ? impl->drafter() : nullptr;
}

Expected<std::unique_ptr<SpeculativeDecoder>> new_speculative_decoder(Engine& engine, Session& session,
                                                                      const SpecOptions& options) {
  const speculative::DrafterModel* drafter = engine_drafter(engine);
  if (drafter == nullptr) {
    return invalid_argument("DSpark needs a drafter: open the engine with a support GGUF (--mtp FILE)");
  }
  session::ModelSession* ms = model_session(session);
  if (ms == nullptr) return invalid_argument("DSpark: the session was not made by this engine");
  return SpeculativeDecoder::create(*drafter, *ms, options);
}

Expected<std::unique_ptr<SpeculativeDecoder>> new_oracle_speculative_decoder(Engine& engine, Session& session,
                                                                             const SpecOptions& options,
                                                                             const OracleScript& script) {
  if (!(script.hit_rate >= 0.0f && script.hit_rate <= 1.0f)) {
    return invalid_argument("oracle proposer: hit rate must be in [0, 1], got %g", static_cast<double>(script.hit_rate));
  }
  if (script.block_size < 0 || script.block_size > speculative::kMaxBlockSize) {
    return invalid_argument("oracle proposer: block size must be in 0..%d, got %d", speculative::kMaxBlockSize,
                            script.block_size);
  }
  if (script.start < 0) return invalid_argument("oracle proposer: negative script start");
  session::ModelSession* ms = model_session(session);
  if (ms == nullptr) return invalid_argument("oracle proposer: the session was not made by this engine");
  int block = script.block_size;
  if (block == 0) {
    const speculative::DrafterModel* drafter = engine_drafter(engine);
    block = drafter != nullptr ? drafter->config().block_size : speculative::kOracleBlockSize;
  }
  return SpeculativeDecoder::create_oracle(*ms, options, script, block, engine.text().eos());
}

int32_t Session::greedy_next(int32_t banned) {
  const std::span<const float> l = logits();
  return l.empty() ? -1 : top_two(l, banned).id;
}

bool Session::top_candidates(int k, int32_t banned, int32_t* ids, float* values) {
  const std::span<const float> l = logits();
  if (l.empty()) return false;
  top_k_row(l, k, banned, ids, values);
  return true;
}

Expected<std::unique_ptr<Engine>> Engine::open(const EngineOptions& options) {
  if (options.n_threads < 0) {
    return invalid_argument("thread count must be >= 0 (0 = all cores), got %d", options.n_threads);
  }
  if (options.prefill_chunk < 0 || options.prefill_chunk > session::kMaxChunkRows) {
    return invalid_argument("prefill chunk must be 1..%d rows (0 = the backend's default), got %d",
                            session::kMaxChunkRows, options.prefill_chunk);
  }
  // The backend by name (backend/registry.h): options are checked before the model is read.
  const int threads = options.n_threads > 0
                          ? options.n_threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  backend::BackendOptions bo;
  bo.n_threads = threads;
  bo.act = options.f32_activations ? backend::ActivationNumerics::kF32 : backend::ActivationNumerics::kQuantized;
  bo.cpu_isa = options.cpu_isa;
  bo.device = options.device;
  bo.cuda_sync = options.cuda_sync;
  bo.cuda_profile = options.cuda_profile;
  bo.cuda_hc_fused = options.cuda_hc_fused;
  bo.cuda_q8_r1 = options.cuda_q8_r1;
  bo.cuda_graphs = options.cuda_graphs;
  bo.cuda_moe = options.cuda_moe;
  bo.cuda_dense_rows = options.cuda_dense_rows;
  bo.cuda_pdl = options.cuda_pdl;
  bo.cuda_pdl_all = options.cuda_pdl_all;
  bo.cuda_wide_persistent = options.cuda_wide_persistent;
  bo.cuda_batch_steps = options.cuda_batch_steps;
  bo.cuda_attn = options.cuda_attn;
  bo.cuda_fuse_norms = options.cuda_fuse_norms;
  bo.cuda_hc_products = options.cuda_hc_products;
  bo.cuda_fold_input_norm = options.cuda_fold_input_norm;
  bo.cuda_lanes = options.cuda_lanes;
  bo.cuda_fold_hc_post = options.cuda_fold_hc_post;
  const std::string name = options.backend == BackendKind::kCuda  ? "cuda"
                           : options.backend == BackendKind::kCpu ? "cpu"
                                                                  : backend::resolve_backend_name("auto", options.device);
  auto made = backend::make_backend(name, bo);
  if (!made.ok()) return made.status();
  std::unique_ptr<backend::Backend> be = std::move(made).value();
  // The user's chunk, else the backend's preference (256 rows on CUDA), else the session's default.
  const int preferred = std::clamp(be->preferred_prefill_rows(), 0, session::kMaxChunkRows);
  const int chunk_rows = options.prefill_chunk > 0 ? options.prefill_chunk
                         : preferred > 0           ? preferred
                                                   : session::kDefaultChunkRows;
  auto model = model::Model::open(options.model_path);
  if (!model.ok()) return model.status();
  // A device backend copies the weights: refuse early, saying how much is needed and free.
  DS4_RETURN_IF_ERROR(be->check_memory((*model)->file().file_size(), "the model's weights"));
  auto text = TextCodec::from_gguf((*model)->file());
  if (!text.ok()) return text.status();
  ModelInfo info = make_info(**model, options.model_path);
  info.backend = be->description();
  info.model_id = model_identity(**model, options);
  std::unique_ptr<speculative::DrafterModel> drafter;
  if (!options.mtp_path.empty()) {
    auto d = load_dspark_drafter(**model, *be, options.mtp_path);
    if (!d.ok()) return d.status();
    drafter = std::move(d).value();
    info.has_drafter = true;
  }
  return std::unique_ptr<Engine>(new EngineImpl(std::move(model).value(), std::move(be),
                                                std::move(text).value(), std::move(drafter),
                                                std::move(info), chunk_rows));
}

}  // namespace ds4
