// session/session.h — one model timeline: the DS4 forward graph (ds4-architecture.md §4)
// run over a State through backend ops, plus prefill / decode / verify, checkpoints, prefix
// commits and snapshots (§5.1, §6).
//
// Role: the engine's Session facade and DSpark (speculative/) drive this class. The forward pass
// lives here, next to the state it mutates (docs/ARCHITECTURE.md deviation note).
// Invariants:
//  * Rows are processed layer-major in token order; per layer, the state updates (raw push,
//    compressor steps) run row by row exactly as a decode does, each row's indexer selection
//    and attention read exactly the keys a decode at its position reads (batched per group of
//    rows, forward.cpp), and every batched op is batch invariant. So prefill(N) == N x
//    decode(), and verify row i == decode of rows[0..i], bit for bit, for any thread count.
//  * decode_many() stacks one row of each of k sessions in one forward: the row-local ops run
//    over all k rows, each row's state steps and attention run against its own session, so
//    each session ends exactly as after its own decode().
//  * checkpoint()/rollback()/commit_prefix() move only counters and compressor states.
//  * No allocation in prefill/decode/verify: scratch is sized at creation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/reduce.h"
#include "core/status.h"
#include "model/model.h"
#include "session/binding.h"
#include "session/state.h"

namespace ds4::session {

// Per-row result of verify(): greedy argmax and margin (core/reduce.h top_two: ties ->
// smallest id, NaN never wins, the verify's `excluded` id never chosen), computed on the
// backend, and the row's logits when the verify read them.
struct RowResult {
  int32_t argmax = 0;
  float margin = 0.0f;            // top1 - top2 of the row (same values as argmax)
  std::span<const float> logits;  // [n_vocab] or empty (verify without logits); valid until
                                  // the next mutating call
};

class ModelSession {
 public:
  // Bytes a session of n_ctx tokens allocates (state + prefix slots + scratch).
  // chunk_rows: the binding's prefill chunk (BoundModel::chunk_rows), which sizes the scratch.
  static uint64_t estimate_bytes(const model::ModelConfig& cfg, int64_t n_ctx, int chunk_rows = kDefaultChunkRows);
  // A session over weights bound once per model (the Engine's BoundModel, which must outlive
  // the session). Errors: n_ctx < 1 (kInvalidArgument); estimate above max_bytes (kResource).
  static Expected<std::unique_ptr<ModelSession>> create(const BoundModel& bound, int64_t n_ctx,
                                                        uint64_t max_bytes);
  // The same with a binding of its own (tests and tools that hold one session per model),
  // prefilling in chunks of chunk_rows (1..kMaxChunkRows, else kInvalidArgument).
  static Expected<std::unique_ptr<ModelSession>> create(const model::Model& model,
                                                        backend::Backend& backend,
                                                        int64_t n_ctx, uint64_t max_bytes,
                                                        int chunk_rows = kDefaultChunkRows);
  ~ModelSession();

  const model::ModelConfig& config() const { return cfg_; }
  int64_t n_ctx() const { return state_.n_ctx(); }
  int64_t n_tokens() const { return static_cast<int64_t>(state_.tokens().size()); }
  std::span<const int32_t> tokens() const { return state_.tokens(); }

  // Appends tokens (chunks of the binding's chunk_rows() rows). Errors leave the state unchanged:
  // kOutOfRange when n_tokens + len > n_ctx, kInvalidArgument for a token id >= n_vocab.
  Status prefill(std::span<const int32_t> tokens,
                 const std::function<void(int, int)>& progress = {});
  Status decode(int32_t token);
  // Decodes tokens[i] into sessions[i], all k (1..kMaxBatchRows) sessions in ONE forward: the
  // row-local ops (projections, MoE, head) run over the k stacked rows, so the weights are read
  // once; each row's raw push, compressor steps, indexer selection and attention run against
  // its own session's state. Batch invariance makes every session's state and logits
  // bit-identical to sessions[i]->decode(tokens[i]). The sessions must be distinct, bound to
  // the same BoundModel, and may differ in n_ctx and position; a pending verify() is dropped,
  // as by decode(). Errors (nothing is appended to any session): kInvalidArgument for a bad
  // k, a repeated session, a foreign binding or a bad token id; kOutOfRange for a full session.
  static Status decode_many(std::span<ModelSession* const> sessions, std::span<const int32_t> tokens);
  // Empty before the first token. A host view of backend memory on a host-addressable
  // backend (CPU); otherwise a downloaded copy. Valid until the next mutating call.
  std::span<const float> logits() const;
  // The greedy next token from the frontier logits, chosen on the backend (core/reduce.h
  // top_two: ties -> smallest id, NaN never wins, `excluded` never chosen): only the id is read
  // back. -1 without logits.
  int32_t greedy_token(int32_t excluded = -1);
  // greedy_token's id plus the top1 - top2 margin (one backend argmax with a margin: 8 bytes
  // read back). {-1, 0} without logits.
  TopTwo top_two_token(int32_t excluded = -1);
  // The sampling read-out of the frontier logits: backend top_k (k in 1..backend::kTopKMax,
  // `excluded` and NaN left out, value descending, ties -> smaller id, padded with -1 /
  // -inf) into ids[0..k) / values[0..k). Only these 8·k bytes cross from a device. false
  // without logits.
  bool top_candidates(int k, int32_t excluded, int32_t* ids, float* values);
  bool has_logits() const { return state_.has_logits(); }
  // Changes whenever logits() may have changed (every appending or restoring call, even a
  // failed one): callers key values derived from the logits on it (DSpark's top-2 cache).
  uint64_t logits_epoch() const { return logits_epoch_; }

  // 1..kMaxBatchRows rows at consecutive positions, appended; per-row argmax + margin
  // (`excluded` never chosen) and, when read_logits, the rows' logits. Without read_logits
  // only 8 bytes per row cross from a device; verify_row_logits(i) reads a row later.
  Expected<std::span<const RowResult>> verify(std::span<const int32_t> rows, int32_t excluded = -1,
                                              bool read_logits = true);
  // Row i's logits of the last verify (read back on first use on a device backend). Valid
  // until the next mutating call; empty when no verify is pending or i is out of range.
  std::span<const float> verify_row_logits(int i) const;
  void checkpoint();
  // Back to the last checkpoint (or the empty timeline if none). At most kRollbackSlack
  // tokens may have been appended since the checkpoint (programmer invariant).
  void rollback();
  // After verify(r): keep rows [0, k), 1 <= k <= r. kInvalidArgument otherwise.
  Status commit_prefix(int k);

  // BENCHMARK TOOL, timing only: brings an EMPTY session to n tokens without running them
  // (State::fill_synthetic: the counters and token history of n decodes of `token`, zero
  // rows, compressor states reset, no logits; the fill is the new checkpoint). Decoding after
  // it costs what decoding at context n costs; every output is meaningless. Errors, the
  // session unchanged: kInvalidArgument for tokens already in the session, n < 0 or a bad
  // token id; kOutOfRange for n > n_ctx.
  Status fill_synthetic(int64_t n, int32_t token = 0);

  Status save_snapshot();
  Status restore_snapshot();
  uint64_t state_bytes() const { return state_.payload_bytes(); }
  void reset();
  // The canonical state payload (State::serialize: tokens, logits, live rows, compressor
  // states) for a disk cache, and its import into a session of the same shape (model and
  // n_ctx). Both go through backend download / upload only, so they work on a backend whose
  // memory the host cannot address. import_state leaves the session as if the payload's
  // tokens had been prefilled (checkpoint = that state); a payload that does not fit
  // (kCorrupt) leaves the session empty.
  void export_state(std::vector<uint8_t>& out) const { state_.serialize(out); }
  Status import_state(std::span<const uint8_t> payload);

  // --- internals for tests and DSpark ---
  // Layers whose output HC state (mean over the n_hc streams) is captured per processed row.
  void set_capture_layers(std::vector<int> layers);
  // Called for every processed row (prefill, decode, verify) with its position and the
  // captured [n_capture, n_embd] f32 rows, valid during the call only, in BACKEND memory: the
  // span's data() is a backend address (copy it with Backend::copy; read it directly only on a
  // host-addressable backend), so nothing crosses to the host on a device backend.
  void set_capture_sink(std::function<void(int64_t pos, std::span<const float> hidden)> sink);
  // Captured hidden of row i of the last forward call: [n_capture, n_embd] f32 (host view or
  // downloaded copy, like logits()).
  std::span<const float> captured_row(int i) const;
  // The same row in backend memory (what the capture sink receives).
  std::span<const float> captured_backend_row(int i) const;
  const State& state() const { return state_; }
  backend::Backend& backend() const { return be_; }
  const BoundModel& bound() const { return *bound_; }
  void serialize_state(std::vector<uint8_t>& out) const { state_.serialize(out); }

 private:
  ModelSession(const BoundModel& bound, int64_t n_ctx);
  static Status check_create(const model::ModelConfig& cfg, int64_t n_ctx, uint64_t max_bytes, int chunk_rows);
  // Host view of n floats at a[off] (host-addressable backend), or their download into the
  // same offset of `mirror` (sized like a at creation).
  std::span<const float> host_floats(const backend::Array<float>& a, std::vector<float>& mirror, size_t off,
                                     size_t n) const;
  Status validate_tokens(std::span<const int32_t> tokens) const;
  // Runs n rows (tokens at positions n_tokens()..) through all layers; computes logits for
  // rows [logits_first, n) into row_logits_; capture_slots stores the prefix slots.
  // owners (decode_many): row i is the next token of owners[i] (distinct sessions, one row
  // each, this one among them); this session's scratch carries the stacked rows, and each row's
  // state steps, attention scratch, captured hidden and token push go to its owner.
  void forward_rows(const int32_t* tokens, int n, int logits_first, bool capture_slots,
                    ModelSession* const* owners = nullptr);
  void attention_layer(int il, int n, int64_t pos0, bool capture_slots, ModelSession* const* owners);
  void ffn_layer(int il, int n, const int32_t* tokens);
  void output_head(int first, int n);
  void capture_hidden(int il, int n, ModelSession* const* owners);

  std::unique_ptr<BoundModel> own_bound_;  // set only by create(model, backend, ...)
  const BoundModel* bound_ = nullptr;
  const model::ModelConfig& cfg_;
  backend::Backend& be_;
  State state_;

  // Speculation bookkeeping.
  Frontier checkpoint_;
  backend::Array<float> checkpoint_logits_;  // [V]
  bool checkpoint_has_logits_ = false;
  std::vector<Frontier> slots_;          // [kMaxBatchRows] state after verify row i
  int64_t verify_base_ = -1;             // n_tokens before the last verify (-1: none pending)
  int verify_rows_ = 0;
  std::vector<RowResult> row_results_;   // [kMaxBatchRows]
  uint64_t logits_epoch_ = 0;
  std::vector<uint8_t> snapshot_;
  bool has_snapshot_ = false;

  // Hidden capture.
  std::vector<int> capture_layers_;
  std::vector<int> capture_index_;       // [n_layer] -> slot in capture_layers_ or -1
  backend::Array<float> captured_;       // [scratch rows, n_capture, n_embd]
  // Host copies for a backend whose memory the host cannot read (empty on the CPU).
  mutable std::vector<float> logits_host_, row_logits_host_, captured_host_;
  std::function<void(int64_t, std::span<const float>)> capture_sink_;

  struct Scratch;
  std::unique_ptr<Scratch> s_;
};

}  // namespace ds4::session
