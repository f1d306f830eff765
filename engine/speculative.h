// engine/speculative.h — DSpark wired into the generation loop: a Decoder (engine/generate.h)
// that runs the speculative runtime of speculative/runtime.h when sampling is greedy, and the plain
// decoder otherwise. Frontend-facing: of the lower layers it includes only the plain-data
// options (speculative/config.h); the runtime and the session stay behind a pimpl.
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
// (tests/speculative); at T > 0 every step is PlainDecoder::step (no speculation). The same
// holds with the oracle proposer (new_oracle_speculative_decoder, a measurement tool).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/generate.h"
#include "speculative/config.h"

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

// The DSpark options: speculative::SpecConfig itself (plain data, speculative/config.h), so the
// flags (engine/dspark_flags.h), the presets below and the runtime share one struct.
// SpecOptions{} is the seed's baseline policy; frontends start from a preset instead.
using SpecOptions = speculative::SpecConfig;

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
// Default: costlookup (the comparison of the presets: docs/measurements/speculative.md).
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
// defaults (speculative::kCpuCost*) are one 2-core host's. This measures them here, on a fixed
// prompt, from `reps` interleaved rounds (medians): decode(1); verify(n) for n = 1..8 over the
// greedy continuation (realistic expert routing); one proposal that reaches the vocab head and
// one stopped by the conf0 precheck; the same two run beside a decode (Backend::run_pair), as
// cost beyond the decode. verify(n) is fitted as base + row * n by least squares over n = 2..8
// (DSpark blocks verify up to 6 rows, lookup drafts up to session::kMaxBatchRows = 8).
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
// Overlapped proposals are priced like sequential ones, as the defaults are (speculative/config.h
// kCpuCostDraftOverlap), unless the measured pair is clearly cheaper than a decode (both extras
// <= -speculative::kFreeOverlapMargin): then free (speculative::kFreeOverlapCost), which turns
// overlap on under the cost gate (--dspark-overlap -1).
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

// MEASUREMENT TOOL, not a way to generate: the oracle proposer (speculative/oracle_proposer.h).
// Drafts come from a recorded plain greedy run of the same prompt, each drafted position right
// with probability hit_rate (a deterministic draw per (seed, position, draft index)) and a wrong
// valid id otherwise. The speculative cycle around it is the real one (policies, verifies,
// commits; output identical to plain decoding), so tokens/s at a hit rate is what DSpark would
// pay with a drafter that good and free. ds4-bench-spec --oracle.
struct OracleScript {
  std::vector<int32_t> tokens;  // the plain greedy continuation: tokens[i] at position start + i
  int64_t start = 0;            // position of tokens[0] (the prompt's length in tokens)
  float hit_rate = 1.0f;        // in [0, 1]
  uint64_t seed = 0;            // of the hit draws
  int block_size = 0;           // drafts per proposal (1..16); 0 = the engine drafter's, else 5
};

class SpeculativeDecoder final : public Decoder {
 public:
  // `ms` is the ModelSession behind the engine Session that step() will receive.
  // `drafter` (the engine's weights) must outlive the decoder; the decoder keeps its own
  // drafter timeline, so any number of decoders may share one DrafterModel.
  static std::unique_ptr<SpeculativeDecoder> create(const speculative::DrafterModel& drafter,
                                                    session::ModelSession& ms, const SpecOptions& options);
  // The oracle proposer instead of a drafter (measurements only; see OracleScript). `avoid`:
  // an id never proposed as a wrong draft (the EOS a bench bans), -1 none.
  static std::unique_ptr<SpeculativeDecoder> create_oracle(session::ModelSession& ms, const SpecOptions& options,
                                                           const OracleScript& script, int block_size,
                                                           int32_t avoid);
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

// Frontend entry point: a speculative decoder for a session of `engine`. Defined in
// engine/engine.cpp (it knows the Engine's drafter and the ModelSession behind a Session):
// kInvalidArgument when the engine has no drafter (no --mtp file). The drafter reads the hidden
// rows the session captures once the decoder exists, so make it before prefilling the prompt;
// made on a session that already holds a prefix (a cached conversation), it starts from the
// rows of the tokens appended after it (output stays exact; only early acceptance can drop).
Expected<std::unique_ptr<SpeculativeDecoder>> new_speculative_decoder(Engine& engine, Session& session,
                                                                      const SpecOptions& options);

// MEASUREMENT TOOL: a speculative decoder whose proposer is the oracle of `script` (see
// OracleScript), for a session of `engine`; the engine needs no drafter. Same rules as
// new_speculative_decoder (make it before the prefill; it must not outlive the session).
// kInvalidArgument for a hit rate outside [0, 1], a block size outside 0..16, a negative start.
Expected<std::unique_ptr<SpeculativeDecoder>> new_oracle_speculative_decoder(Engine& engine, Session& session,
                                                                             const SpecOptions& options,
                                                                             const OracleScript& script);

// The drafter for `target` from a support GGUF path (validated against the target's shapes).
Expected<std::unique_ptr<speculative::DrafterModel>> load_dspark_drafter(const model::Model& target,
                                                                        backend::Backend& backend,
                                                                        const std::string& mtp_path);

}  // namespace ds4
