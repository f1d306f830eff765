// speculative/runtime.h — the DSpark speculative cycle (dspark.md §2.2-§2.6): the lossless
// protocol. ONE implementation used by the CLI, the bench and the server through
// engine/speculative.h.
//
// Role: given a ModelSession whose logits predict the next position and a Proposer, appends
// the next token(s) per step: the target's greedy seed plus the longest prefix of drafts the
// target confirms. Greedy only (the caller falls back to plain sampling at T > 0). A cycle:
//  * standalone: decode the seed; propose from it (optionally beside the decode: overlap);
//    check d_0 for free against the seed's logits; on a hit verify d_0..d_{m-1} (one decode
//    when m = 1), keep the prefix the target confirms, commit it.
//  * fold (armed after an accept): verify [seed, d_0..d_{m-1}] as one batch instead.
//  * lookup (SpecConfig::lookup): prompt-lookup drafts (speculative/lookup.h) are tried
//    first, standalone (free d_0 check) or folded, before paying for a DSpark proposal.
// What to do at each point (pause, gate, probe, trim, fold or unfold, overlap) is asked of the
// policies in speculative/policies.h; this file only runs the protocol and counts (stats.h).
//
// Invariants (the correctness contract, tested against plain greedy decoding):
//  * Lossless: the appended stream equals plain greedy decoding token for token (ties ->
//    smallest id, an optional banned id never chosen), and the final session state
//    (serialize_state bytes, logits) equals the state plain decoding leaves.
//  * Only committed target rows reach the proposer's context (Proposer::sync(n) is called with
//    the committed length; rows of rejected drafts are never synced).
//  * Partial accepts commit through ModelSession::commit_prefix (prefix slots, no replay);
//    SpecConfig::replay forces rollback + ordinary decodes instead, and only then does a
//    verify take a checkpoint first.
//  * Policies decide on counters, configuration and logits only (no wall clock): the same
//    inputs give the same output and the same stats counters. Timings are for the report.
//  * Overlap changes only the time split: at the same prices every counter, draft and output
//    is the same with overlap on or off.
//  * Never appends past the token budget (max_new) or the context.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/reduce.h"
#include "core/status.h"
#include "session/session.h"
#include "speculative/config.h"
#include "speculative/lookup.h"
#include "speculative/policies.h"
#include "speculative/proposer.h"
#include "speculative/stats.h"

namespace ds4::speculative {

class Runtime {
 public:
  // Installs the proposer's capture layers and sink on `s` (call before the prompt prefill so
  // the context rows are captured); the destructor removes them (and prints the stats report
  // to stderr when cfg.stats).
  Runtime(session::ModelSession& s, Proposer& p, SpecConfig cfg);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // One step (engine Decoder contract): clears *out, writes the tokens chosen; all are
  // appended except a final stop_token. Nothing written when the context is full.
  // max_new >= 1: token budget left; stop_token / banned_token: -1 for none.
  Status step(int max_new, int32_t stop_token, int32_t banned_token, std::vector<int32_t>* out);

  const SpecStats& stats() const { return stats_; }
  // "dspark: policy fold=F grid=G backoff=B margin=M cost_gate=C scheduler=S overlap=O
  // fold_partial=P lookup=L" (G = grid length, O = whether overlap is on, P = fold after partial
  // accepts in effect) followed by stats().report(): what --dspark-stats prints.
  std::string report() const;
  const SpecConfig& config() const { return cfg_; }
  void reset_policy();  // scheduler / backoff / fold / gate state back to start (new request)

  // Policy state, for tests and reports.
  bool fold_armed() const { return fold_.armed(); }
  const AcceptModel& accept_model(int state) const { return cost_.accept_model(state); }
  const LookupModel& lookup_model(int bucket, bool continuation) const {
    return lookup_policy_.model(bucket, continuation);
  }
  int lookup_bucket() const { return lookup_policy_.bucket(); }
  int probe_gap() const { return cost_.probe_gap(); }
  int cost_state() const { return cost_.state(); }  // of the last cycle: warm * kMarginBuckets + bucket
  static constexpr int kProbeGapMin = CostGate::kProbeGapMin, kProbeGapMax = CostGate::kProbeGapMax;
  static constexpr int kMarginBuckets = MarginGate::kBuckets;
  static constexpr float kColdPrior = CostGate::kColdPrior, kWarmPrior = CostGate::kWarmPrior;
  static int margin_bucket(float margin) { return MarginGate::bucket(margin); }

 private:
  // Greedy id and top1 - top2 margin of the session's current logits (banned id excluded),
  // computed on the backend (ModelSession::top_two_token: 8 bytes read back) and cached per
  // ModelSession::logits_epoch(): the seed's choice, the margin gate, the cost gate's bucket
  // and the free d_0 check all read this one result.
  const TopTwo& top();
  // After a verify's commit: the committed frontier row's id + margin (the verify computed
  // them with the banned id excluded, the same definition as top()) fill top()'s cache.
  void seed_top(const session::RowResult& r);
  // verify of rows_[0..n) reading back ids + margins only (banned id never chosen): a row's
  // argmax is then exactly top_two(row, banned).id, the greedy choice.
  Expected<std::span<const session::RowResult>> verify_rows(int n);
  // have_proposal: prop_ already holds the (cleaned) proposal of this seed (fold fallback).
  Status standalone(int32_t seed, int max_new, std::vector<int32_t>* out, bool have_proposal = false);
  Status fold_cycle(int32_t seed, int max_new, std::vector<int32_t>* out, bool* handled);
  int clean_drafts(Proposal& p) const;  // cut at invalid/banned/stop ids; returns n
  int propose_drafts(int32_t seed, int64_t L, int n_allow);  // sync + propose + finish_proposal
  int finish_proposal();  // clean prop_ + count it (stats, acceptance model); returns n
  // Decodes the seed and, concurrently, proposes from it into prop_ (not yet counted).
  Status decode_with_proposal(int32_t seed, int64_t L, int n_allow);
  // Keeps `keep` of the `rows` just verified: a full accept needs nothing, a partial one
  // commits the prefix (or, with replay, rolls back and decodes it).
  Status commit(int keep, int rows, const int32_t* row_tokens);
  // Lookup drafts after context + tail into prop_ (at most what the budget, the context and a
  // verify batch with the tail rows allow); starts the lookup policy's cycle with the match
  // length when there are any. Returns the number of drafts.
  int propose_lookup(std::span<const int32_t> tail, int max_new);
  void count_lookup(int n);  // a lookup whose first n drafts are put to the target (stats)
  // p[j] = q(match + j) of this cycle's lookup, or the DSpark state's p_accept(j).
  void fill_checked(float* p, int n) const;
  // After d_0 was accepted (free check): verify (or decode) drafts d_0..d_{n-1} of prop_,
  // commit the kept prefix, append it to *out and update counters and policies.
  Status verify_after_hit(int n, int n_drafted, int n_allow, std::vector<int32_t>* out);
  // The fold batch [seed, d_0..d_{n-1}] of prop_: verify, commit, counters, policies.
  Status fold_verify(int32_t seed, int n, int n_drafted, int n_allow, std::vector<int32_t>* out);

  session::ModelSession& s_;
  Proposer& p_;
  SpecConfig cfg_;
  SpecStats stats_;
  int32_t stop_ = -1, banned_ = -1;
  // Policies (they read cfg_).
  Scheduler sched_;
  MarginGate margin_gate_;
  CostGate cost_;
  LookupPolicy lookup_policy_;
  FoldPolicy fold_;
  OverlapPolicy overlap_;
  Proposal prop_;
  int32_t rows_[session::kMaxBatchRows] = {};
  NgramLookup lookup_;              // the n-gram index over the session's tokens
  TopTwo top_;                      // top() cache: valid for (top_epoch_, top_banned_)
  uint64_t top_epoch_ = ~uint64_t{0};
  int32_t top_banned_ = -2;
};

}  // namespace ds4::speculative
