// session/scratch.h — the per-session activation buffers of the forward graph.
//
// Role: every intermediate of forward_rows() for up to `rows` (the chunk) rows, allocated once at
// session creation so prefill / decode / verify never allocate (ENGINEERING.md rule 7). Every
// activation is a backend Array (device memory on a device backend); only the op descriptors
// of a batched attention call (attn_queries, idx_queries) are host structs.
// Shapes use the ModelConfig symbols: E n_embd, HC n_hc*n_embd, MIX hc_mix_dim, QL q_lora,
// Q q_dim, D head_dim, W 2*D (largest compressor width), IW 2*idx_dim, IQ idx q dim,
// OL o_low_dim, X n_expert, U n_expert_used, F n_ff_exp, V n_vocab, n = rows (the session's
// prefill chunk, at least kMaxBatchRows).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"
#include "session/block.h"
#include "session/session.h"
#include "session/state.h"

namespace ds4::session {

struct ModelSession::Scratch {
  int rows = 0;                         // n: the most rows of one forward_rows() call
  backend::Array<float> x, x2;          // [n, HC] HC state (current / next)
  backend::Array<float> flat;           // [n, HC]
  backend::Array<float> mix;            // [n, MIX]
  backend::Array<float> y;              // [n, E] HC-pre output
  backend::Array<float> post;           // [n, n_hc]
  backend::Array<float> comb;           // [n, n_hc*n_hc]
  backend::Array<float> h;              // [n, E] normed sublayer input
  backend::Array<float> qa, qr;         // [n, QL]
  backend::Array<float> q;              // [n, Q]
  backend::Array<float> kv;             // [n, D]
  backend::Array<float> ckv, csc;       // [n, W] attention compressor projections
  backend::Array<float> ikv, isc;       // [n, IW] indexer compressor projections
  backend::Array<float> iq;             // [n, IQ] indexer queries
  backend::Array<float> iw;             // [n, n_idx_head] indexer head weights
  backend::Array<float> heads;          // [n, Q] attention outputs
  backend::Array<float> low;            // [n, OL]
  backend::Array<float> o;              // [n, E]
  backend::Array<float> router;         // [n, X] router logits
  backend::Array<float> probs;          // [n, X] sqrt-softplus scores
  backend::Array<int32_t> sel;          // [n, U]
  backend::Array<float> wt;             // [n, U]
  backend::Array<uint8_t> moe_scratch;  // backend::moe_scratch_bytes
  backend::Array<float> sg, su;         // [n, F] shared expert gate/up
  backend::Array<float> sh_out;         // [n, E]
  // The last sublayer's HC post, carried into the next sublayer's HC pre (one op); flushed
  // before anything else reads the HC state (a captured hidden, the output head).
  HcCarry carry;
  // Attention of up to `attn_rows` rows is one batched backend call (attention_layer); each
  // row of such a group has its own key pointers, scores, indexer scratch and mask.
  int attn_rows = 1;                 // G = attn_group_rows(): rows per batched attention call
  int64_t max_comp = 0;              // max compressed / indexer rows (n_ctx / 4 + 2)
  backend::Array<float> attn_scores;    // [G, n_head, raw_cap + max_comp]
  backend::Array<float> idx_scores;     // [G, max_comp]
  backend::Array<int32_t> idx_order;    // [G, max_comp]
  backend::Array<uint8_t> allowed;      // [G, max_comp]
  std::vector<backend::SinkAttentionParams> attn_queries;  // [G]
  std::vector<backend::IndexerSelectParams> idx_queries;   // [G]
  // The compressor steps of the group being built (<= 2 per row: attention and indexer), in
  // the order they run; capacity reserved at creation, so pushing never allocates.
  std::vector<backend::CompressorStepParams> comp_steps;
  backend::Array<float> pooled;        // [D] compressor pooling
  backend::Array<float> head_mix;       // [n, n_hc] output-head collapse logits
  backend::Array<float> row_logits;     // [kMaxBatchRows, V] logits of rows [first, n)
  backend::Array<int32_t> tokens;       // [n] the rows' token ids (embedding, hash routing)
  backend::Array<int32_t> argmax;       // [kMaxBatchRows] greedy argmax of the row logits
  // [2 * backend::kTopKMax] a read-out, read back in ONE download: r ids (argmax / top_k) then
  // r f32 words (margins / candidate logits) right after them.
  backend::Array<int32_t> readout;

  Scratch(backend::Backend& be, const model::ModelConfig& cfg, int64_t n_ctx, int64_t raw_cap, int rows);
  // G: the scratch's rows (a prefill chunk's attention in one batched call: on CUDA the fused
  // sink kernel takes groups of more than kMaxBatchRows), fewer when the per-row attention
  // scratch would pass kAttnScratchBudget (long contexts of a wide model), never below 1 (the
  // unbatched form).
  static int attn_group_rows(const model::ModelConfig& cfg, int64_t n_ctx, int64_t raw_cap, int rows);
  // Bytes the constructor allocates (for the memory estimate).
  static uint64_t bytes(const model::ModelConfig& cfg, int64_t n_ctx, int64_t raw_cap, int rows);
  // The rows a session whose prefill chunk is `chunk_rows` sizes its scratch for (verify and
  // decode_many need kMaxBatchRows).
  static int rows_for(int chunk_rows) { return std::max(chunk_rows, kMaxBatchRows); }
};

}  // namespace ds4::session
