// session/state.h — the mutable per-session model state (ds4-architecture.md §6.1) and its
// checkpoint / prefix-slot / snapshot forms.
//
// Role: owns, per layer, the raw KV ring, the append-only compressed and indexer rows, the
// compressor states and their row counters; plus the token history and the last logits.
// Memory: every row and state array (and the logits) is a backend Array; the counters and
// the token history are host values. The raw KV rows are stored as IEEE f16 bits: every value
// written there is f16-rounded already (§4.3-§4.5), so the f16 store holds exactly the f32
// values the ops read, in half the bytes. The compressed rows are stored as FP8 codes and
// per-64 exponent bytes plus their RoPE dims as f16 (quant::fp8_row_bytes, 584 bytes for
// Flash's 512 values), the indexer rows as FP4 codes and per-32 exponent bytes
// (quant::fp4_row_bytes, 68 bytes for 128 values); both decode to exactly the f16 rows' values
// (quant/kv_sim.h). The State reads or writes its arrays only through
// backend copies / fills / uploads / downloads, so it runs unchanged on a device backend.
// Invariants:
//  * raw rows are addressed by absolute position (ring slot pos % raw_cap); raw_cap =
//    min(n_swa, n_ctx) + raw_slack(chunk_rows) (>= kRollbackSlack), so rows written by rejected
//    speculative tokens (at most kRollbackSlack after a checkpoint) or by the later rows of a
//    prefill chunk never overwrite a row a query can still see;
//  * compressed rows [0, n_comp) and indexer rows [0, n_index) are visible; rows past the
//    counters are invisible garbage (left by rolled-back tokens) and are overwritten later;
//  * compressor states start at kv = 0, score = -1e30 (NEG_INF of ds4);
//  * Frontier (checkpoint / prefix slot) = counters + compressor states only: O(layers).
//    save_frontier() copies every state in full (checkpoint). A prefix slot written by
//    save_layer_frontier() during a verify batch stores, for a layer whose compressor ratio is
//    above kMaxBatchRows (ratio 128), only the kMaxBatchRows − 1 phase rows that the batch's
//    later rows can overwrite (ratio-128 steps write one phase row and never shift); other
//    layers (ratio 4, whose pooling shifts rows, and its indexer) are copied in full. Such a
//    slot may only be restored onto the live state at the end of that same batch (what
//    ModelSession::commit_prefix does); restore_frontier checks the token counts for it.
//  * fill_synthetic(n) (benchmarks only) sets exactly the counters n decodes set (n_comp =
//    n / ratio, n_index = n / 4: one row per compressor_emits position), but not their values.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace ds4::session {

inline constexpr float kNegInf = -1.0e30f;   // ds4's finite "minus infinity"
inline constexpr int kMaxBatchRows = 8;      // verify rows per call (prefix slots, row logits)
// Prefill chunk: rows per forward call when only the last row's logits are needed. Larger
// chunks read each weight once for more tokens (memory-bound Flash); a chunk boundary never
// changes a row's bits. A BoundModel's chunk is 1..kMaxChunkRows (kDefaultChunkRows unless the
// engine's --prefill-chunk says otherwise); the session's scratch is sized for it.
inline constexpr int kMaxChunkRows = 256;
inline constexpr int kDefaultChunkRows = 32;
// The rollback budget of checkpoint(): tokens that may be appended after it and rolled back.
inline constexpr int kRollbackSlack = 32;
// Raw ring rows beyond the window of a session prefilling in chunks of chunk_rows: at least
// chunk_rows - 1 (a chunk's later rows push before its earlier rows attend, forward.cpp) and
// the rollback budget.
constexpr int raw_slack(int chunk_rows) { return chunk_rows > kRollbackSlack ? chunk_rows : kRollbackSlack; }

struct LayerState {
  int ratio = 0;                 // 0, 4 or 128
  int64_t n_comp = 0;            // visible compressed attention rows
  int64_t n_index = 0;           // visible indexer rows (ratio 4)
  backend::Array<uint16_t> raw;     // [raw_cap, head_dim] f16 KV rows, slot = pos % raw_cap
  backend::Array<uint8_t> comp;     // [comp_cap, fp8_row_bytes(head_dim, n_rot)] FP8 stores of the compressed KV rows (ratio != 0)
  backend::Array<uint8_t> index;    // [comp_cap, fp4_row_bytes(idx_dim)] FP4 stores of the indexer rows (ratio 4)
  backend::Array<float> cmp_kv;     // [coff*ratio, coff*head_dim] attention compressor state
  backend::Array<float> cmp_score;  // same shape
  backend::Array<float> idx_kv;     // [2*4, 2*idx_dim] indexer compressor state (ratio 4)
  backend::Array<float> idx_score;  // same shape
};

// Counters + compressor states of every layer: what a rollback or a prefix commit restores.
struct Frontier {
  int64_t n_tokens = 0;
  std::vector<int64_t> n_comp;   // [n_layer]
  std::vector<int64_t> n_index;  // [n_layer]
  backend::Array<float> states;  // all layers' cmp_kv, cmp_score, idx_kv, idx_score, packed
  // [n_layer] -1: layer il's states are stored in full; else the layer holds a prefix-slot
  // delta taken during the verify batch that starts at this token count: rows
  // (row_base + j) % ratio for j = 1 .. kMaxBatchRows-1, each as cmp_kv row then cmp_score row.
  std::vector<int64_t> row_base;
};

class State {
 public:
  // Bytes State(cfg, n_ctx, be, chunk_rows) allocates (all layers + tokens + logits), without
  // allocating.
  static uint64_t estimate_bytes(const model::ModelConfig& cfg, int64_t n_ctx, int chunk_rows = kDefaultChunkRows);

  // chunk_rows: the session's prefill chunk (1..kMaxChunkRows), which sizes the raw ring.
  State(const model::ModelConfig& cfg, int64_t n_ctx, backend::Backend& be, int chunk_rows = kDefaultChunkRows);

  void reset();  // empty timeline: counters 0, states initialized, no tokens
  // BENCHMARK TOOL, timing only (ds4-bench --fill-ctx): the shape of a timeline of n tokens
  // without computing it. Tokens = n copies of `token`; per layer the counters n decodes
  // leave (n_comp = n / ratio, n_index = n / 4 for ratio 4); every raw, compressed and indexer
  // row zero bytes (0.0 whatever the rows' float format, sized from the arrays' bytes); the
  // compressor states at their reset values; no logits. A decode after it runs the same ops
  // over the same number of rows as after n real tokens; its outputs are meaningless.
  // Preconditions (the caller checks them): 0 <= n <= n_ctx, 0 <= token < n_vocab.
  void fill_synthetic(int64_t n, int32_t token);

  int64_t n_ctx() const { return n_ctx_; }
  int64_t raw_cap() const { return raw_cap_; }
  int64_t comp_cap(int il) const;
  size_t frontier_state_floats() const { return frontier_floats_; }

  std::vector<LayerState>& layers() { return layers_; }
  const std::vector<LayerState>& layers() const { return layers_; }
  std::vector<int32_t>& tokens() { return tokens_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  const backend::Array<float>& logits() const { return logits_; }  // [n_vocab]
  backend::Backend& backend() const { return be_; }
  bool has_logits() const { return has_logits_; }
  void set_has_logits(bool v) { has_logits_ = v; }

  // Frontier capture / restore (counters + compressor states + token count).
  void save_frontier(Frontier& f) const;      // f must come from make_frontier()
  void restore_frontier(const Frontier& f);   // truncates tokens to f.n_tokens
  Frontier make_frontier() const;             // allocates one (outside hot loops)
  // Prefix-slot capture of one layer after one verify row's compressor steps: counters plus
  // what restore_frontier needs to bring the end-of-batch live state back to this row (see
  // the header comment). Must be called while tokens().size() is the batch's first position
  // (ModelSession appends the batch tokens after all layers).
  void save_layer_frontier(int il, Frontier& f) const;

  // Canonical serialization: tokens, logits, per layer counters, live raw rows in position
  // order, visible compressed rows (FP8 stores) and indexer rows (FP4 stores), as stored;
  // compressor states (f32).
  // Equal states <=> equal bytes.
  uint64_t payload_bytes() const;
  void serialize(std::vector<uint8_t>& out) const;
  // Inverse of serialize() for a payload of this same State shape (snapshot restore, disk
  // cache). Checks the sizes, counters and token ids against this State; false on any
  // mismatch, leaving the State partly overwritten (the caller resets it).
  bool deserialize(std::span<const uint8_t> in);

 private:
  size_t layer_state_offset(int il) const { return state_offsets_[il]; }

  const model::ModelConfig& cfg_;
  backend::Backend& be_;
  int64_t n_ctx_ = 0;
  int64_t raw_cap_ = 0;
  std::vector<LayerState> layers_;
  std::vector<size_t> state_offsets_;  // [n_layer] offset of layer il in Frontier::states
  size_t frontier_floats_ = 0;
  std::vector<int32_t> tokens_;        // capacity n_ctx
  backend::Array<float> logits_;       // [n_vocab]
  bool has_logits_ = false;
};

}  // namespace ds4::session
