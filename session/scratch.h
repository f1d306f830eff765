// session/scratch.h — the per-session activation buffers of the forward graph.
//
// Role: every intermediate of forward_rows() for up to kMaxChunkRows rows, allocated once at
// session creation so prefill / decode / verify never allocate (ENGINEERING.md rule 7).
// Shapes use the ModelConfig symbols: E n_embd, HC n_hc*n_embd, MIX hc_mix_dim, QL q_lora,
// Q q_dim, D head_dim, W 2*D (largest compressor width), IW 2*idx_dim, IQ idx q dim,
// OL o_low_dim, X n_expert, U n_expert_used, F n_ff_exp, V n_vocab, n = kMaxChunkRows.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "session/session.h"
#include "session/state.h"

namespace ds4::session {

struct ModelSession::Scratch {
  std::vector<float> x, x2;          // [n, HC] HC state (current / next)
  std::vector<float> flat;           // [n, HC]
  std::vector<float> mix;            // [n, MIX]
  std::vector<float> y;              // [n, E] HC-pre output
  std::vector<float> post;           // [n, n_hc]
  std::vector<float> comb;           // [n, n_hc*n_hc]
  std::vector<float> h;              // [n, E] normed sublayer input
  std::vector<float> qa, qr;         // [n, QL]
  std::vector<float> q;              // [n, Q]
  std::vector<float> kv;             // [n, D]
  std::vector<float> ckv, csc;       // [n, W] attention compressor projections
  std::vector<float> ikv, isc;       // [n, IW] indexer compressor projections
  std::vector<float> iq;             // [n, IQ] indexer queries
  std::vector<float> iw;             // [n, n_idx_head] indexer head weights
  std::vector<float> heads;          // [n, Q] attention outputs
  std::vector<float> low;            // [n, OL]
  std::vector<float> o;              // [n, E]
  std::vector<float> router;         // [n, X] router logits
  std::vector<float> probs;          // [n, X] sqrt-softplus scores
  std::vector<int32_t> sel;          // [n, U]
  std::vector<float> wt;             // [n, U]
  std::vector<float> moe_out;        // [n, E]
  std::vector<uint8_t> moe_scratch;  // backend::moe_scratch_bytes
  std::vector<float> sg, su;         // [n, F] shared expert gate/up
  std::vector<float> sh_out;         // [n, E]
  // Attention of up to `attn_rows` rows is one batched backend call (attention_layer); each
  // row of such a group has its own key pointers, scores, indexer scratch and mask.
  int attn_rows = 1;                 // G = attn_group_rows(): rows per batched attention call
  int64_t max_comp = 0;              // max compressed / indexer rows (n_ctx / 4 + 2)
  std::vector<float> attn_scores;    // [G, n_head, raw_cap + max_comp]
  std::vector<const float*> raw_ptrs;  // [G, raw_cap]
  std::vector<float> idx_scores;     // [G, max_comp]
  std::vector<int32_t> idx_order;    // [G, max_comp]
  std::vector<uint8_t> allowed;      // [G, max_comp]
  std::vector<backend::SinkAttentionParams> attn_queries;  // [G]
  std::vector<backend::IndexerSelectParams> idx_queries;   // [G]
  std::vector<float> pooled, crow;   // [D] compressor pooling / emitted row
  std::vector<float> head_mix;       // [n, n_hc] output-head collapse logits
  std::vector<float> row_logits;     // [kMaxBatchRows, V] logits of rows [first, n)

  Scratch(const model::ModelConfig& cfg, int64_t n_ctx, int64_t raw_cap);
  // G: kMaxBatchRows, fewer when the per-row attention scratch would pass kAttnScratchBudget
  // (long contexts of a wide model), never below 1 (the unbatched form).
  static int attn_group_rows(const model::ModelConfig& cfg, int64_t n_ctx, int64_t raw_cap);
  // Bytes the constructor allocates (for the memory estimate).
  static uint64_t bytes(const model::ModelConfig& cfg, int64_t n_ctx, int64_t raw_cap);
};

}  // namespace ds4::session
