// engine/dspark_flags.cpp — the DSpark flag table and its options (see dspark_flags.h).
#include "engine/dspark_flags.h"

namespace ds4 {

namespace {

// "--dspark-<name>", plus the bench's short spelling when it has one.
std::string names(DsparkFlagSet set, const char* name, const char* bench_alias = nullptr) {
  std::string n = std::string("--dspark-") + name;
  if (set == DsparkFlagSet::kBench && bench_alias != nullptr) n += std::string(",") + bench_alias;
  return n;
}

}  // namespace

void register_dspark_flags(FlagTable& t, DsparkFlags* f, DsparkFlagSet set) {
  SpecOptions& v = f->values;
  if (set == DsparkFlagSet::kServe) {
    t.flag("--dspark", &f->enabled,
           "DSpark speculative decoding, greedy only, output identical to plain decoding "
           "(drafter: --mtp, or the bundled one with the default model)")
        .option("--dspark-policy", &f->policy,
                std::string("DSpark: policy preset, then the switches below add to it (") + kDsparkPolicies +
                    "; costall = fold + grid + backoff + margin gate + cost gate; costlookup = costall + lookup)",
                "DS4_DSPARK_POLICY", "NAME");
  }
  t.option(names(set, "confidence", "--confidence"), &v.confidence,
           "DSpark: sigmoid confidence threshold per draft position, 0..1", "DS4_DSPARK_CONFIDENCE")
      .option(names(set, "confidence-grid"), &f->grid,
              "DSpark: per-position thresholds 'a,b,c' (last value extends; default: the preset's)",
              "DS4_DSPARK_CONFIDENCE_GRID", "LIST")
      .flag(names(set, "fold"), &f->fold, "DSpark: verify the seed as row 0 after a full accept", "DS4_DSPARK_FOLD")
      .option(names(set, "fold-partial"), &f->fold_partial,
              "DSpark: with fold, also fold after a partial accept 0/1 (default: the preset's; costall 1)",
              "DS4_DSPARK_FOLD_PARTIAL")
      .option(names(set, "scheduler"), &f->scheduler, "DSpark: windowed pause scheduler (counters only) 0/1",
              "DS4_DSPARK_SCHEDULER")
      .flag(names(set, "scheduler-backoff"), &f->backoff,
            "DSpark: pause x2 per unproductive cycle (<= x8), bar +0.05 (<= +0.20)", "DS4_DSPARK_SCHEDULER_BACKOFF")
      .option(names(set, "margin-gate"), &f->margin_gate,
              "DSpark: skip standalone proposals when target top1-top2 < this (logits; -1 = the preset's)",
              "DS4_DSPARK_MARGIN_GATE")
      .flag(names(set, "replay"), &v.replay, "DSpark: commit partial accepts by rollback + decode (strict control)",
            "DS4_DSPARK_REPLAY")
      .flag(names(set, "stats"), &v.stats, "DSpark: print counters and time split", "DS4_DSPARK_STATS")
      .flag(names(set, "cost-gate"), &f->cost_gate,
            "DSpark: propose/verify/fold only when the expected tokens beat the expected cost", "DS4_DSPARK_COST_GATE")
      .option(names(set, "cost-verify-base", "--cost-verify-base"), &v.cost_verify_base,
              "DSpark cost gate: verify(n) ~ BASE + ROW*n decode(1) units (base)", "DS4_DSPARK_COST_VERIFY_BASE")
      .option(names(set, "cost-verify-row", "--cost-verify-row"), &v.cost_verify_row,
              "DSpark cost gate: verify cost per row, decode(1) units", "DS4_DSPARK_COST_VERIFY_ROW")
      .option(names(set, "cost-draft", "--cost-draft"), &v.cost_draft,
              "DSpark cost gate: one proposal reaching the vocab head, decode(1) units", "DS4_DSPARK_COST_DRAFT")
      .option(names(set, "cost-draft-reject", "--cost-draft-reject"), &v.cost_draft_reject,
              "DSpark cost gate: one proposal stopped by the conf0 precheck, decode(1) units",
              "DS4_DSPARK_COST_DRAFT_REJECT")
      .option(names(set, "cost-draft-overlap", "--cost-draft-overlap"), &v.cost_draft_overlap,
              "DSpark cost gate: a standalone proposal overlapped with the seed's decode, decode(1) units",
              "DS4_DSPARK_COST_DRAFT_OVERLAP")
      .option(names(set, "cost-draft-reject-overlap", "--cost-draft-reject-overlap"), &v.cost_draft_reject_overlap,
              "DSpark cost gate: an overlapped proposal stopped by the conf0 precheck, decode(1) units",
              "DS4_DSPARK_COST_DRAFT_REJECT_OVERLAP")
      .option(names(set, "cost-window", "--cost-window"), &v.cost_window,
              "DSpark cost gate: memory of the acceptance statistics, proposals", "DS4_DSPARK_COST_WINDOW")
      .option(names(set, "overlap", "--overlap"), &v.overlap,
              "DSpark: propose while the seed decodes, the threads split in two: -1 auto (on with 2 threads and "
              "no cost gate, or cost gate with free overlap prices), 0 off, 1 on",
              "DS4_DSPARK_OVERLAP")
      .option(names(set, "lookup"), &f->lookup,
              "DSpark: prompt-lookup drafts (n-gram continuations of the context) before each DSpark "
              "proposal, verified like drafts 0/1 (default: the preset's; costlookup 1)",
              "DS4_DSPARK_LOOKUP")
      .flag(names(set, "calibrate", "--calibrate"), &f->calibrate,
            set == DsparkFlagSet::kBench
                ? "DSpark: measure the cost gate's costs on this machine first and use them instead of "
                  "--dspark-cost-*"
                : "DSpark: measure the cost gate's costs on this machine (threads, ISA), print them as "
                  "DS4_DSPARK_COST_* lines and exit (drafter: --mtp, or the bundled one)")
      .option(names(set, "calibrate-reps", "--calibrate-reps"), &f->calibrate_reps,
              "DSpark: rounds of --dspark-calibrate (medians)", "", "N");
}

Status validate_dspark_flags(const DsparkFlags& f) {
  const SpecOptions& v = f.values;
  if (!(v.confidence >= 0.0f && v.confidence <= 1.0f)) {
    return invalid_argument("--dspark-confidence must be in [0, 1], got %g", v.confidence);
  }
  if (f.fold_partial < -1 || f.fold_partial > 1) {
    return invalid_argument("--dspark-fold-partial must be 0 or 1 (-1 for the preset's), got %d", f.fold_partial);
  }
  if (!(f.margin_gate >= 0.0f) && f.margin_gate != -1.0f) {
    return invalid_argument("--dspark-margin-gate must be >= 0 (or -1 for the preset's), got %g", f.margin_gate);
  }
  if (!(v.cost_verify_base >= 0.0f && v.cost_verify_row >= 0.0f && v.cost_draft >= 0.0f &&
        v.cost_draft_reject >= 0.0f && v.cost_draft_overlap >= 0.0f && v.cost_draft_reject_overlap >= 0.0f)) {
    return invalid_argument("--dspark-cost-* costs must be >= 0");
  }
  if (v.overlap < -1 || v.overlap > 1) {
    return invalid_argument("--dspark-overlap must be -1 (auto), 0 or 1, got %d", v.overlap);
  }
  if (f.lookup < -1 || f.lookup > 1) {
    return invalid_argument("--dspark-lookup must be 0 or 1 (-1 for the preset's), got %d", f.lookup);
  }
  if (f.calibrate_reps < 1) {
    return invalid_argument("--dspark-calibrate-reps must be >= 1, got %d", f.calibrate_reps);
  }
  if (v.cost_window < 1) return invalid_argument("--dspark-cost-window must be >= 1, got %d", v.cost_window);
  if (!f.grid.empty()) {
    std::vector<float> grid;
    DS4_RETURN_IF_ERROR(parse_dspark_confidence_grid(f.grid, &grid));
  }
  SpecOptions probe;
  return apply_dspark_policy(f.policy, {}, 0.0f, &probe);
}

Expected<SpecOptions> dspark_options(const DsparkFlags& f, std::string_view policy,
                                     const std::vector<float>& preset_grid, float preset_margin) {
  SpecOptions so = f.values;
  DS4_RETURN_IF_ERROR(apply_dspark_policy(policy, preset_grid, preset_margin, &so));
  if (!f.grid.empty()) DS4_RETURN_IF_ERROR(parse_dspark_confidence_grid(f.grid, &so.confidence_grid));
  so.fold = so.fold || f.fold;
  if (f.fold_partial >= 0) so.fold_after_partial = f.fold_partial != 0;
  so.scheduler = so.scheduler && f.scheduler != 0;
  so.backoff = so.backoff || f.backoff;
  if (f.margin_gate >= 0.0f) so.margin_gate = f.margin_gate;
  so.cost_gate = so.cost_gate || f.cost_gate;
  if (f.lookup >= 0) so.lookup = f.lookup != 0;
  return so;
}

Expected<SpecOptions> dspark_options(const DsparkFlags& f) {
  std::vector<float> grid;
  DS4_RETURN_IF_ERROR(parse_dspark_confidence_grid(kDefaultDsparkGrid, &grid));
  return dspark_options(f, f.policy, grid, kDefaultDsparkMarginGate);
}

}  // namespace ds4
