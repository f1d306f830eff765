// speculative/oracle_proposer.h — a MEASUREMENT proposer: drafts read from a recorded plain
// greedy continuation, each one right with a fixed per-position probability (the hit rate).
//
// Role: ds4-bench-spec --oracle (through engine/speculative.h new_oracle_speculative_decoder)
// shows what the speculative cycle pays when drafts are this good, on a target whose drafter
// cannot say (the generated full-shape Flash file: random weights, so a drafter accepts ~0).
// It knows the answer, so it is never a way to generate text.
// Invariants:
//  * Draft k of the proposal anchored at position pos is for position q = pos + 1 + k: the
//    script's token there when oracle_hit(seed, q, k, hit_rate), else wrong_token() of it (the
//    next id, skipping `avoid`: a valid id that is not the greedy one). Every position draws
//    on its own, so the drafts after the first wrong one are right or wrong the same way; the
//    block is always full (as a real drafter's), and the verify stops at the first wrong one.
//  * A draw is a pure function of (seed, q, k) (counter-based hash): no call counter, clock or
//    batch state, so fold, overlap, threads or timing never change a proposal.
//  * Confidence 1 at every position (conf, conf0; never conf0_rejected): a σ threshold <= 1
//    lets every draft through; the runtime's own gates (scheduler, margin, cost) still decide.
//  * No drafts where the script says nothing: an anchor before the script or unlike its token
//    at pos (another timeline) gives no_context; past the script's end the block is cut (zero
//    drafts when the anchor is its last token).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "speculative/proposer.h"

namespace ds4::speculative {

inline constexpr int kOracleBlockSize = 5;  // the generated drafter's block (DrafterGenOptions)

// Whether draft k for position q is the true token at hit rate h (h >= 1: always, h <= 0:
// never): a uniform [0, 1) draw from hash(seed, q, k) compared with h.
bool oracle_hit(uint64_t seed, int64_t q, int k, float h);
// A valid id other than `truth` (and other than `avoid` when >= 0): truth + 1 (mod n_vocab),
// or truth + 2 when that is `avoid`. n_vocab >= 3.
int32_t wrong_token(int32_t truth, int32_t n_vocab, int32_t avoid);

struct OracleOptions {
  std::vector<int32_t> script;  // [n] greedy tokens: script[i] is the token at position start + i
  int64_t start = 0;            // position of script[0] (the prompt's length)
  float hit_rate = 1.0f;        // P(a drafted position is the true token), in [0, 1]
  uint64_t seed = 0;            // of the hit draws
  int block_size = kOracleBlockSize;  // drafts per proposal, 1..kMaxBlockSize
  int32_t n_vocab = 0;          // the target's vocabulary (>= 3)
  int32_t avoid = -1;           // never proposed as a wrong draft (the banned EOS of a bench run)
};

class OracleProposer final : public Proposer {
 public:
  explicit OracleProposer(OracleOptions o);
  int block_size() const override { return o_.block_size; }
  void propose(int32_t anchor, int64_t pos, int n_max, std::span<const float> thresholds,
               Proposal* out) override;
  const OracleOptions& options() const { return o_; }

 private:
  OracleOptions o_;
};

}  // namespace ds4::speculative
