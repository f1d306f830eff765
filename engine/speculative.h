// engine/speculative.h — DSpark wired into the generation loop: a Decoder (engine/generate.h)
// that runs the speculative runtime of speculative/runtime.h when sampling is greedy, and the plain
// decoder otherwise. Frontend-facing: includes no speculative/ or session/ header (pimpl).
//
// Wiring (engine.cpp): Engine::open loads the support file with load_dspark_drafter(model,
// backend, options.mtp_path) and keeps its weights (one DrafterModel per Engine). Each
// SpeculativeDecoder holds its own drafter timeline (rings, counters, scratch), so one Engine
// serves any number of sessions, speculative or not, at once. new_speculative_decoder() builds
// one for a session and a frontend passes it as GenerateOptions::decoder. The decoder must be
// created BEFORE the prompt prefill of that session (it installs the hidden capture on the
// session) and must not outlive it.
//
// Invariants: greedy output and final session state are byte-identical to PlainDecoder's
// (tests/speculative); at T > 0 every step is PlainDecoder::step (no speculation).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/generate.h"

namespace ds4::speculative {
class DrafterModel;
}  // namespace ds4::speculative
namespace ds4::session {
class ModelSession;
}  // namespace ds4::session
namespace ds4::model {
class Model;
}  // namespace ds4::model
namespace ds4::backend {
class Backend;
}  // namespace ds4::backend

namespace ds4 {

// DSpark policies (speculative::SpecConfig; flag / environment names documented in speculative/runtime.h:
// DS4_DSPARK_CONFIDENCE, _CONFIDENCE_GRID, _FOLD, _FOLD_PARTIAL, _SCHEDULER, _SCHEDULER_BACKOFF,
// _MARGIN_GATE, _REPLAY, _STATS, _COST_GATE, _COST_VERIFY_BASE, _COST_VERIFY_ROW, _COST_DRAFT,
// _COST_DRAFT_REJECT, _COST_DRAFT_OVERLAP, _COST_DRAFT_REJECT_OVERLAP, _COST_WINDOW, _OVERLAP).
// SpecOptions{} holds the seed's baseline policy; frontends start from the default preset
// instead (apply_dspark_policy(kDefaultDsparkPolicy, ...), below) and layer their flags on it.
struct SpecOptions {
  float confidence = 0.6f;             // σ threshold per draft position
  std::vector<float> confidence_grid;  // per-position thresholds, last extends (empty = flat)
  bool fold = false;                   // seed as row 0 of the verify batch after full accepts
  bool fold_after_partial = false;     // with fold: also fold after partial accepts (runtime.h)
  bool scheduler = true;               // windowed pause scheduler (counters only)
  bool backoff = false;                // scheduler backoff ladder
  float margin_gate = 0.0f;            // skip standalone proposals below this logit margin
  bool replay = false;                 // partial accepts by rollback + decode (strict control)
  bool stats = false;                  // frontends print stats_report() at the end
  int max_draft = 0;                   // cap on drafts per proposal (0 = block size)
  int tail_min_tokens = 10;            // no proposals when fewer tokens remain
  // Cost gate (speculative/runtime.h "Cost gate"): propose / verify / fold only when the expected
  // tokens beat the expected cost. Costs in decode(1) units; defaults = speculative::kCpuCost*
  // (measured on the CPU backend; static_assert'ed equal in speculative.cpp).
  bool cost_gate = false;
  float cost_verify_base = 0.47f;      // verify(n) ~ base + row * n
  float cost_verify_row = 0.49f;
  float cost_draft = 1.18f;            // a proposal that reaches the vocab head
  float cost_draft_reject = 0.80f;     // a proposal stopped by the conf0 precheck
  float cost_draft_overlap = 1.18f;    // the same two for a standalone proposal with overlap on
  float cost_draft_reject_overlap = 0.80f;
  int cost_window = 16;                // memory of the acceptance statistics (proposals)
  // Standalone proposals alongside the seed's decode, the engine's threads split in two
  // (speculative/runtime.h "Overlap"): -1 auto = on with exactly 2 engine threads and no cost gate, or
  // under the cost gate with free overlap prices (speculative::kFreeOverlapCost); 0 off, 1 on. Speed
  // only.
  int overlap = -1;
  // Hybrid proposer (speculative/runtime.h "Lookup"): prompt-lookup drafts before DSpark proposals.
  bool lookup = false;
};

// "0.55,0.6,0.65" -> thresholds (each in [0, 1]); kInvalidArgument names the bad item.
Status parse_dspark_confidence_grid(std::string_view text, std::vector<float>* out);

// Named policy presets, one table for the ds4 CLI (--dspark-policy) and ds4-bench-spec
// (--policies). Each sets only the policy knobs (fold, grid, backoff, margin gate, cost gate,
// scheduler, lookup) starting from the seed's baseline (scheduler on, everything else off):
//   baseline | fold | grid | backoff | margin   the baseline, or it plus that one knob
//   all                                         fold + grid + backoff + margin
//   cost | costfold                             the cost gate alone, + fold
//   costall                                     all + cost gate + fold after partial accepts
//   costallseed                                 costall with the seed's fold rule (fold only
//                                               after a full accept): the side-by-side control
//   costlookup                                  costall + the lookup (hybrid proposer)
//   noscheduler                                 the baseline without the pause scheduler
// Default: costlookup. costall was the only preset that kept every benchmark channel at
// >= 0.99x plain on the CPU backend (bench 8 prompts x 128 tokens, 2 threads, AVX2, 2026-12-03;
// the plain-scheduler presets lose 15-30% on code and prose, where few drafts are accepted);
// its fold after partial accepts (issue #5 item 5; speculative/runtime.h "fold_after_partial") is
// measured against costallseed there. costlookup adds the lookup (speculative/runtime.h "Lookup"),
// which beat costall on structured, code and English text and matched it on Italian under
// every calibrated cost set tried (figures there).
inline constexpr const char* kDsparkPolicies =
    "baseline,fold,grid,backoff,margin,all,cost,costfold,costall,costallseed,costlookup,noscheduler";
inline constexpr const char* kDefaultDsparkPolicy = "costlookup";
inline constexpr const char* kDefaultDsparkGrid = "0.55,0.6,0.65";  // grid of the *grid / *all presets
inline constexpr float kDefaultDsparkMarginGate = 2.0f;             // margin of the *margin / *all presets
// Sets the policy knobs of `so` for preset `name` (other fields untouched); `grid` and
// `margin` are the values the presets with a grid / margin gate use. kInvalidArgument for an
// unknown name (the message lists the known ones).
Status apply_dspark_policy(std::string_view name, const std::vector<float>& grid, float margin, SpecOptions* so);

// Cost-gate calibration (ds4 --dspark-calibrate, ds4-bench-spec --calibrate). The cost gate's
// constants are decode(1) units of one machine, backend, thread count and ISA; the compiled-in
// defaults (speculative::kCpuCost*) were measured on a 2-core AVX2 host. On a 16-core AVX-512 host
// verify(6) is ~2.2-2.6 decode(1) instead of ~3.3, so the defaults keep the gate shut where
// proposing pays. This measures them here, on a fixed prompt, from `reps` interleaved rounds
// (medians): decode(1); verify(n) for n = 1..8 over the greedy continuation (realistic expert
// routing); one proposal that reaches the vocab head and one stopped by the conf0 precheck;
// the same two run beside a decode (Backend::run_pair), as cost beyond the decode. verify(n) is
// fitted as base + row * n by least squares over n = 2..8 (DSpark blocks verify up to 6 rows,
// lookup drafts up to session::kMaxBatchRows = 8).
// The figures are timings, so they vary from run to run; a run that USES them stays
// reproducible, because the runtime only reads the constants it is given (design.md §4).
// Correctness is checked on the way: every verify row's argmax must equal a plain decode's
// (kInternal otherwise). Needs an engine opened with a drafter; it runs its own session and
// drafter timeline, so live sessions are untouched. Allocates; not for hot paths.
struct DsparkCostCalibration {
  int reps = 0;
  int n_threads = 0;
  double decode_ms = 0.0;                  // decode(1) median: the unit
  std::vector<double> verify;              // [9]: verify[n] = verify(n) / decode(1), n = 1..8
  float verify_base = 0.0f, verify_row = 0.0f;  // the fit (row clamped >= 0.01)
  float draft = 0.0f;                      // proposal reaching the vocab head
  float draft_reject = 0.0f;               // proposal stopped by the conf0 precheck
  float overlap_draft_extra = 0.0f;        // decode || proposal, minus decode(1)
  float overlap_reject_extra = 0.0f;
};
// `progress` (optional) is called with (rounds done, reps).
Expected<DsparkCostCalibration> calibrate_dspark_costs(Engine& engine, int reps,
                                                       const ProgressFn& progress = {});
// Copies the measured costs into `so` (cost_verify_base/_row, cost_draft, cost_draft_reject).
// Overlapped proposals are priced like sequential ones, as the defaults are (speculative/runtime.h
// "kCpuCostDraftOverlap": cheaper prices opened the gate to mispredicted overlaps), unless the
// measured pair is clearly cheaper than a decode (both extras <= -speculative::kFreeOverlapMargin):
// then free (speculative::kFreeOverlapCost), which turns overlap on under the cost gate
// (--dspark-overlap -1).
void apply_dspark_costs(const DsparkCostCalibration& c, SpecOptions* so);
// Human-readable table, then the environment lines (DS4_DSPARK_COST_*=...) that make
// ds4 and ds4-bench-spec use these costs.
std::string format_dspark_costs(const DsparkCostCalibration& c);

// Counters a frontend may show (the full set is in stats_report()).
struct SpecSummary {
  int64_t cycles = 0;
  int64_t proposed = 0;        // draft tokens proposed
  int64_t accepted = 0;        // draft tokens accepted
  double accept_rate = 0.0;    // accepted / proposed
};

class SpeculativeDecoder final : public Decoder {
 public:
  // `ms` is the ModelSession behind the engine Session that step() will receive.
  // `drafter` (the engine's weights) must outlive the decoder; the decoder keeps its own
  // drafter timeline, so any number of decoders may share one DrafterModel.
  static std::unique_ptr<SpeculativeDecoder> create(const speculative::DrafterModel& drafter,
                                                    session::ModelSession& ms, const SpecOptions& options);
  ~SpeculativeDecoder() override;

  Status step(Session& session, Sampler& sampler, const StepLimits& limits,
              std::vector<int32_t>* out) override;

  SpecSummary summary() const;
  std::string stats_report() const;  // "dspark: ..." lines (counters + time split)
  void reset_policy();               // scheduler / fold state back to start (new request)

 private:
  SpeculativeDecoder();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Frontend entry point: a speculative decoder for a session of `engine`. DEFINED IN
// engine/engine.cpp (owner "forward"; it knows the Engine's drafter and the ModelSession
// behind a Session): kInvalidArgument when the engine has no drafter (no --mtp file). Create
// it before prefilling the session's prompt.
Expected<std::unique_ptr<SpeculativeDecoder>> new_speculative_decoder(Engine& engine, Session& session,
                                                                      const SpecOptions& options);

// The drafter for `target` from a support GGUF path (validated against the target's shapes).
Expected<std::unique_ptr<speculative::DrafterModel>> load_dspark_drafter(const model::Model& target,
                                                                        backend::Backend& backend,
                                                                        const std::string& mtp_path);

}  // namespace ds4
