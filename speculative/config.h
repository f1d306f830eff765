// speculative/config.h — the DSpark runtime's configuration: policy switches, cost-gate prices
// and their CPU defaults. Plain data; the one set of DSpark options from the flags (engine/
// dspark_flags.h) to the runtime (speculative/runtime.h).
//
// Invariant: every field is configuration read by deterministic policies; nothing here is
// measured at run time. Figures behind the defaults: docs/measurements/speculative.md.
#pragma once

#include <string_view>
#include <vector>

#include "core/status.h"

namespace ds4::speculative {

// CPU defaults of the cost gate, in decode(1) units, measured by calibrate_dspark_costs on a
// 2-core AVX2 host at 2 threads. They move with kernels, threads and machine: re-measure with
// `ds4 --dspark-calibrate` and pass them on.
inline constexpr float kCpuCostVerifyBase = 0.47f;
inline constexpr float kCpuCostVerifyRow = 0.49f;
inline constexpr float kCpuCostDraft = 1.18f;
inline constexpr float kCpuCostDraftReject = 0.80f;
// A proposal overlapping the seed's decode is priced like a sequential one: cheaper prices
// opened the gate to dropped pairs and mispredicted overlaps, which the model does not see.
inline constexpr float kCpuCostDraftOverlap = kCpuCostDraft;
inline constexpr float kCpuCostDraftRejectOverlap = kCpuCostDraftReject;
// Free overlap: both overlap prices <= kFreeOverlapCost mean a proposal beside the seed's
// decode adds nothing to it; then every wanted standalone proposal overlaps and the scheduler's
// pause and the margin gate (which exist to save proposal time) let it through. The
// calibration sets free prices only when the measured pair is at least kFreeOverlapMargin below
// a decode: inside real cycles a pair costs more than in the calibration.
inline constexpr float kFreeOverlapCost = 0.0f;
inline constexpr float kFreeOverlapMargin = 0.20f;

struct SpecConfig {
  float confidence = 0.6f;               // flat σ threshold (all positions)
  std::vector<float> confidence_grid;    // per-position thresholds (last extends); empty = flat
  // Fold: the seed is verified as row 0 of the verify batch, armed after a full accept.
  bool fold = false;
  // With fold, also arm after a partial accept (the verify rows already captured the kept
  // rows). Off: the seed's rule; the costall preset turns it on.
  bool fold_after_partial = false;
  // Gate of fold_after_partial: arm after a partial only when at least this many of the last
  // 8 d_0 checks hit (a folded d_0 miss costs a whole verify for one token). 0 = always.
  int fold_partial_min_hits = 0;
  bool scheduler = true;                 // windowed pause scheduler (dspark.md §2.5)
  int sched_window = 4;                  // cycles per profitability window
  int sched_skip = 2;                    // pause after a low-acceptance window
  int sched_slow_skip = 4;               // pause after a window with >= half no-draft cycles
  float sched_min_avg = 1.5f;            // accepted drafts per cycle below this = low
  int no_draft_skip = 0;                 // pause after each no-draft cycle (0 = off, ds4#833)
  int tail_min_tokens = 10;              // no proposals when fewer tokens remain (0 = off)
  bool backoff = false;                  // pause x2 per unproductive cycle (<= x8), d_0 bar +0.05 (<= +0.20)
  float margin_gate = 0.0f;              // logits; <= 0 = off. Margin = top1 - top2 of the logits
                                         // after the seed's decode (the row d_0 must match)
  bool replay = false;                   // partial accepts by rollback + decodes (strict control)
  bool stats = false;                    // the runtime prints its report to stderr when it ends
  int max_draft = 0;                     // cap on drafts per proposal (0 = block size)
  // Cost gate (speculative/policies.h CostGate). Costs in decode(1) units.
  bool cost_gate = false;
  float cost_verify_base = kCpuCostVerifyBase;  // verify(n) ~ base + row * n
  float cost_verify_row = kCpuCostVerifyRow;
  float cost_draft = kCpuCostDraft;             // a proposal reaching the vocab head
  float cost_draft_reject = kCpuCostDraftReject;  // a proposal stopped by the conf0 precheck
  float cost_draft_overlap = kCpuCostDraftOverlap;  // the same two, standalone with overlap on
  float cost_draft_reject_overlap = kCpuCostDraftRejectOverlap;
  int cost_window = 16;                  // proposals of memory of the acceptance statistics
  float cost_probe_margin = 6.0f;        // probes only when the d_0 row's top1-top2 margin >= this
  // Standalone proposals run concurrently with the seed's decode (Backend::run_pair):
  // -1 auto = on when the session's backend has exactly 2 threads and the cost gate is off, or
  // when the cost gate is on with free overlap prices (kFreeOverlapCost); 0 off, 1 on.
  int overlap = -1;
  // Hybrid proposer: prompt-lookup drafts (speculative/lookup.h) tried before a DSpark
  // proposal, free of the drafter's cost.
  bool lookup = false;
};

// "0.55,0.6,0.65" -> {0.55, 0.6, 0.65}; each value in [0, 1], at most kMaxBlockSize of them.
// kInvalidArgument (naming the bad item) otherwise.
Status parse_confidence_grid(std::string_view text, std::vector<float>* out);

}  // namespace ds4::speculative
