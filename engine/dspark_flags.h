// engine/dspark_flags.h — the DSpark flags, declared once for every frontend (`ds4`,
// `ds4-bench-spec`, the server): names, help text and DS4_DSPARK_* environment mirrors in one
// table (core/flags.h), and the one way from their values to the runtime's SpecOptions.
//
// Invariants:
//   * Each DSpark flag is declared here and nowhere else; a frontend registers the table on
//     its FlagTable and never mirrors the options in a struct of its own.
//   * Options = the policy preset (--dspark-policy, or each of the bench's --policies), then
//     the switches: --dspark-fold / -backoff / -cost-gate only turn knobs on, the tri-state
//     ones (-1 = the preset's) and a given grid or margin replace the preset's value, and the
//     plain values (confidence, costs, window, overlap, replay, stats) are taken as given.
//   * Bad values give kInvalidArgument naming the flag, never an abort.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/flags.h"
#include "core/status.h"
#include "engine/speculative.h"

namespace ds4 {

struct DsparkFlags {
  bool enabled = false;                       // --dspark (frontends that may decode plainly)
  std::string policy = kDefaultDsparkPolicy;  // preset; the switches below add to it
  std::string grid;                           // "a,b,c" thresholds; "" = the preset's
  bool fold = false;                          // adds fold to the preset
  int fold_partial = -1;                      // 0/1; -1 = the preset's
  int scheduler = 1;                          // 0 turns the preset's scheduler off
  bool backoff = false;                       // adds the backoff ladder
  float margin_gate = -1.0f;                  // logits; -1 = the preset's
  bool cost_gate = false;                     // adds the cost gate
  int lookup = -1;                            // 0/1; -1 = the preset's
  bool calibrate = false;                     // measure the cost-gate costs (frontend acts on it)
  int calibrate_reps = 20;
  // The values the flags set as given: confidence, replay, stats, cost_* prices, cost_window,
  // overlap. Its policy knobs are ignored (the preset and the switches above decide them).
  SpecOptions values;
};

enum class DsparkFlagSet {
  kServe,  // ds4 and the server: every flag, --dspark-* names
  kBench,  // ds4-bench-spec: no --dspark / --dspark-policy (it sweeps --policies); the bench's
           // short spellings (--confidence, --cost-*, --overlap, --calibrate[-reps]) as aliases
};

// Registers the DSpark flags on `t`, bound to *f (whose current values are the defaults).
void register_dspark_flags(FlagTable& t, DsparkFlags* f, DsparkFlagSet set = DsparkFlagSet::kServe);

// Range checks of every value, the grid's syntax and the preset's name.
Status validate_dspark_flags(const DsparkFlags& f);

// The options of preset `policy` (grid / margin: the values presets with a grid / margin gate
// use) with the switches of `f` applied.
Expected<SpecOptions> dspark_options(const DsparkFlags& f, std::string_view policy,
                                     const std::vector<float>& preset_grid, float preset_margin);
// The same for f.policy with the default grid and margin (kDefaultDsparkGrid,
// kDefaultDsparkMarginGate).
Expected<SpecOptions> dspark_options(const DsparkFlags& f);

}  // namespace ds4
