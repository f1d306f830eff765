// speculative/policies.h — the DSpark runtime's policies: each reads counters, configuration
// and logit margins, and returns a decision; none touches the session or the drafter.
//
// Role: Runtime (speculative/runtime.h) runs the lossless protocol and asks these what to do:
//  * Scheduler (dspark.md §2.5): windowed pauses after unproductive windows, and the backoff
//    ladder (pause x2 per consecutive unproductive cycle up to x8, d_0 confidence bar +0.05 per
//    step up to +0.20), so text the drafter cannot follow costs few proposals.
//  * MarginGate: skip standalone proposals when the target's top1 - top2 logit margin is low
//    (the target itself is unsure; drafts rarely match there). Also the margin buckets the
//    cost gate and the lookup learn in (< 2, < 4, < 8, >= 8 logits).
//  * CostGate: propose / verify m drafts / fold only when the expected tokens beat the expected
//    cost, all in decode(1) units (plain decoding earns 1 token per unit). States: warm (the
//    previous proposal kept all of its >= 2 drafts: follow the streak) or cold, times the margin
//    bucket. Cold states start closed (P(draft) prior kColdPrior); a closed cold gate still
//    probes once probe_gap cycles passed and the margin is >= cost_probe_margin, the gap
//    doubling per unproductive probe (kProbeGapMin..kProbeGapMax), so it notices quickly when
//    text turns predictable and backs off exponentially where it does not.
//  * LookupPolicy: acceptance of prompt-lookup drafts by match length (LookupModel), one model
//    per margin bucket for the free d_0 checks and one for the drafts after a d_0 hit (they
//    behave differently: sharing them over-predicted continuations).
//  * FoldPolicy: when the next seed is verified as row 0 of the verify batch (armed after a
//    full accept; after a partial one too with fold_after_partial) and, under the cost gate,
//    whether a fold beats the standalone path's free d_0 check.
//  * OverlapPolicy: whether a standalone proposal runs beside the seed's decode, predicted from
//    the last standalone cycles (a proposal a gate then drops costs the decode its threads).
// Invariant: decisions read counters, configuration and logits only (no clock): the same
// inputs give the same decisions and counters. Figures behind the constants and rules:
// docs/measurements/speculative.md.
#pragma once

#include <cstdint>

#include "speculative/config.h"
#include "speculative/drafter_weights.h"

namespace ds4::speculative {

// Cost parameters of the gate (decode(1) = 1).
struct CostModel {
  float verify_base = kCpuCostVerifyBase, verify_row = kCpuCostVerifyRow;
  float draft = kCpuCostDraft, draft_reject = kCpuCostDraftReject;
  float verify(int n) const { return verify_base + verify_row * static_cast<float>(n); }
};

// Decayed acceptance counts of one cost-gate state. Index k = draft position.
struct AcceptModel {
  static constexpr float kPriorWeight = 1.0f;  // pseudo-counts of the prior
  AcceptModel() = default;
  explicit AcceptModel(float prior_draft) : prior_draft(prior_draft) {}
  float prior_draft = 1.0f;  // prior of P(draft); acceptance / continuation priors are 1.0
  float draft_n = 0, draft_hit = 0;                                  // proposals / with >= 1 draft
  float acc_n[kMaxBlockSize] = {}, acc_hit[kMaxBlockSize] = {};      // d_k checked / accepted
  float cont_n[kMaxBlockSize] = {}, cont_hit[kMaxBlockSize] = {};    // d_{k-1} accepted, k allowed / d_k drafted
  void decay(float keep);                  // every count *= keep
  void note_proposal(bool drafted);
  void note_accept(int k, bool hit);
  void note_cont(int k, bool drafted);
  float p_draft() const;
  float p_accept(int k) const;
  float p_cont(int k) const;               // k >= 1
};

// Acceptance of lookup drafts by match length: a draft continuing a match of l tokens (the
// lookup's suffix plus the drafts before it, all accepted) is accepted with probability q(l).
// Decayed counts per length; a length's counts decay when it is seen. Lengths up to flat_len
// take the prior `base`; each longer length's prior is the estimate one shorter moved kLonger
// of the way to 1 (longer matches are more predictive, and rarely seen lengths must not sit at
// an optimistic 1.0, which verified lookup drafts far too deep on prose). LookupPolicy keeps
// d_0 checks (kPrior from length 1) and continuations after a hit (kContPrior up to
// kContFlatLen) in separate models.
struct LookupModel {
  static constexpr int kMaxLen = 12;  // lengths >= kMaxLen share the last cell
  static constexpr float kPrior = 0.5f, kContPrior = 0.1f, kPriorWeight = 1.0f, kLonger = 0.4f;
  static constexpr int kContFlatLen = 3;
  float base = kPrior;
  int flat_len = 1;
  float n[kMaxLen + 1] = {}, hit[kMaxLen + 1] = {};
  float q(int l) const;
  void note(int l, bool accepted, float keep);
};

// Expected net gain of verifying m of n drafts after a d_0 hit (standalone path), maximized
// over m in [1, n] (m = 1: the single-draft decode, gain 0). p[k] = P(d_k accepted | d_{k-1}
// accepted) for k >= 1 (p[0] unused). Ties -> the smaller m. Writes the gain when non-null.
int best_verify_drafts(const CostModel& c, const float* p, int n, float* gain);
// Expected net gain of a folded cycle verifying [seed, d_0..d_{m-1}], maximized over m in
// [1, n]; p[k] = P(d_k accepted | d_{k-1} accepted), p[0] = P(d_0 accepted). Ties -> smaller m.
int best_fold_drafts(const CostModel& c, const float* p, int n, float* gain);


// ---- scheduler and backoff ----
class Scheduler {
 public:
  explicit Scheduler(const SpecConfig& cfg) : cfg_(cfg) {}
  // True when this cycle is paused (consumes one paused cycle).
  bool take_pause();
  bool paused() const { return pause_ > 0; }
  // σ thresholds of draft positions 0..n-1: the grid (or flat value), plus the backoff's
  // raised bar at position 0.
  void thresholds(float* thr, int n) const;
  // A standalone or fold cycle that proposed: drafted = the proposer gave >= 1 draft,
  // accepted = drafts kept.
  void note(bool drafted, int accepted);
  void reset();
  int pause() const { return pause_; }
  int streak() const { return streak_; }

 private:
  const SpecConfig& cfg_;
  int pause_ = 0;
  int win_cycles_ = 0, win_accepted_ = 0, win_no_draft_ = 0;
  int streak_ = 0;  // consecutive unproductive cycles (backoff)
};

// ---- margin gate ----
class MarginGate {
 public:
  static constexpr int kBuckets = 4;  // top1 - top2 logit margin: < 2, < 4, < 8, >= 8
  static int bucket(float margin);
  explicit MarginGate(float threshold) : threshold_(threshold) {}
  bool on() const { return threshold_ > 0.0f; }
  bool closed(float margin) const { return on() && margin < threshold_; }

 private:
  float threshold_;
};

// ---- cost gate ----
class CostGate {
 public:
  static constexpr int kProbeGapMin = 4, kProbeGapMax = 512;
  static constexpr float kColdPrior = 0.1f, kWarmPrior = 1.0f;  // prior P(draft) cold / warm
  static constexpr int kStates = 2 * MarginGate::kBuckets;      // warm * kBuckets + bucket
  enum class Decision { kPropose, kProbe, kSkip };

  explicit CostGate(const SpecConfig& cfg);
  // Start of a cycle: the previous cycle's warmth becomes this one's state (bucket 0 until
  // the margin is seen).
  void begin_cycle();
  // The state of this cycle's decision from the target's margin; observe_margin() also keeps
  // the margin for the probe rule (the standalone path).
  void set_state(float margin);
  void observe_margin(float margin);
  // Expected net gain of proposing up to n_allow drafts: P(draft) * (p_0 * best verify gain
  // [or the best fold gain, when folding]) - the draft's cost, minus the rejected draft's cost
  // when it drafts nothing. overlapped: priced at the overlap costs.
  float proposal_value(int n_allow, bool folding, bool overlapped) const;
  // Standalone: propose when the value is positive; else probe when cold, the probe gap has
  // passed and the margin is high enough; else skip.
  Decision decide(int n_allow, bool overlapped);
  CostModel cost_model(bool overlapped = false) const;
  // p[0] = P(d_0 accepted); p[k] = P(d_k accepted | d_{k-1} accepted), times P(d_k drafted)
  // when with_cont (before the proposal, when its length is not known yet).
  void fill_accept(float* p, int n, bool with_cont) const;
  // A proposal was made in this cycle's state (decays that state's counts first).
  void note_proposal(bool drafted);
  void note_accept(int k, bool hit) { am_[state_].note_accept(k, hit); }
  // Drafts d_first..d_{m-1} were checked (the check stops at the first miss), `accepted` of
  // d_0.. kept; n_drafted drafted of n_allow allowed.
  void note_checked(int first, int m, int accepted, int n_drafted, int n_allow);
  // The outcome of this cycle's DSpark proposal: warm = all of its >= 2 drafts kept (the next
  // cycle is warm); a warm outcome brings the probe gap back to its minimum, an unproductive
  // probe doubles it.
  void note_outcome(bool warm);
  void note_unproductive() { note_probe(false); }
  void reset();

  const AcceptModel& accept_model(int state) const { return am_[state]; }
  int state() const { return state_; }
  int probe_gap() const { return probe_gap_; }

 private:
  void note_probe(bool productive);
  const SpecConfig& cfg_;
  AcceptModel am_[kStates];  // cold models start closed (kColdPrior), warm ones open (kWarmPrior)
  int state_ = 0;             // this cycle's model index
  bool prev_warm_ = false;    // the previous cycle fully accepted >= 2 drafts
  float margin_ = 0.0f;       // this cycle's top1 - top2 at the standalone decision
  bool warm_ = false;         // this cycle fully accepted >= 2 drafts (the next one is warm)
  int since_proposal_ = kProbeGapMin;  // cycles since the last proposal (start: probe at once)
  int probe_gap_ = kProbeGapMin;       // cold gate-closed cycles between probes
  bool probing_ = false;               // this cycle's proposal is a probe
};

// ---- lookup acceptance ----
class LookupPolicy {
 public:
  explicit LookupPolicy(const SpecConfig& cfg);
  // This cycle's lookup: match length k (0 = no lookup drafts) proposed from logits whose
  // margin falls in `bucket`.
  void begin(int match, int bucket) {
    match_ = match;
    bucket_ = bucket;
  }
  void clear() { match_ = 0; }
  bool active() const { return match_ > 0; }
  // p[j] = q(match + j) of draft d_j (d_0: the d_0-check model, j >= 1: the continuation's).
  void fill(float* p, int n) const;
  // Lookup drafts d_first..d_{m-1} were checked (stops at the first miss), `accepted` kept.
  void note(int first, int m, int accepted);
  void reset();
  const LookupModel& model(int bucket, bool continuation) const {
    return lkm_[bucket + (continuation ? MarginGate::kBuckets : 0)];
  }
  int bucket() const { return bucket_; }

 private:
  int table(int j) const { return bucket_ + (j > 0 ? MarginGate::kBuckets : 0); }
  const SpecConfig& cfg_;
  LookupModel lkm_[2 * MarginGate::kBuckets];  // [d_0 checks | continuations] x margin bucket
  int match_ = 0;
  int bucket_ = 0;
};

// ---- fold ----
class FoldPolicy {
 public:
  explicit FoldPolicy(const SpecConfig& cfg) : cfg_(cfg) {}
  bool armed() const { return armed_; }
  void disarm() { armed_ = false; }
  void note_d0(bool hit) { d0_hits_ = ((d0_hits_ << 1) | (hit ? 1u : 0u)) & 0xffu; }
  // After a full accept the next seed's logits are in hand: fold when configured.
  void after_full() { armed_ = cfg_.fold; }
  // After a partial accept (the verify captured the kept rows): fold_after_partial and its gate.
  void after_partial() { armed_ = partial_open(); }
  void reset();

  // Cost gate, fold armed, lookup drafts: fold them (use, m drafts), send the cycle to the
  // standalone path, where d_0 is checked for free (unfold), or neither (DSpark proposes).
  struct LookupChoice {
    bool use = false, unfold = false;
    int m = 0;
  };
  static LookupChoice choose_lookup(const CostModel& c, const float* p, int n, float dspark_value);
  // Cost gate, fold armed, a DSpark proposal of n drafts: fold m of them, or unfold.
  struct DsparkChoice {
    bool unfold = false;
    int m = 0;
  };
  static DsparkChoice choose_dspark(const CostModel& c, const float* p, int n);

 private:
  bool partial_open() const;
  const SpecConfig& cfg_;
  bool armed_ = false;
  uint32_t d0_hits_ = 0;  // last 8 d_0 checks, newest in bit 0 (1 = hit)
};

// ---- overlap ----
class OverlapPolicy {
 public:
  // Standalone cycles that wanted a proposal and got past the gates in a row needed before a
  // proposal overlaps the next decode: one pass after a gated cycle predicts poorly where the
  // margin alternates.
  static constexpr int kMinPasses = 2;
  OverlapPolicy(const SpecConfig& cfg, int n_threads);
  bool on() const { return on_; }
  bool free() const { return free_; }  // on, cost gate on, both overlap prices free
  // Overlap this cycle's wanted proposal with the seed's decode?
  bool predict() const { return on_ && (free_ || passes_ >= kMinPasses); }
  void note_gated() { passes_ = 0; }
  void note_passed() { passes_ = passes_ + 1 < kMinPasses ? passes_ + 1 : kMinPasses; }
  void reset() { passes_ = kMinPasses; }

 private:
  bool on_ = false;
  bool free_ = false;
  int passes_ = kMinPasses;
};

}  // namespace ds4::speculative
