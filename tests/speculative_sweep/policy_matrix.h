// tests/speculative_sweep/policy_matrix.h — the ONE list of DSpark policy knobs the identity sweep
// (identity_sweep_test.cpp, issue #5) covers, and the plan of which (prompt, combination)
// runs it makes within its CI budget.
//
// A combination is a set of knobs turned on over the bench's baseline (bench/spec_channels.cpp:
// scheduler on, fold off, flat confidence 0.6); knob values are the bench's defaults (grid
// 0.55,0.6,0.65, margin gate 2.0), so the sweep checks the configurations `make bench-spec`
// measures.
//
// Knob roles:
//   kPolicy   a policy of issue #5 (fold, grid, backoff, margin, fold-after-partial) or beyond
//             it (lookup);
//   kControl  another runtime switch (the cost gate): crossed with every policy set, at most
//             one control per combination. The runtime's plumbing controls (scheduler off,
//             replay commits) are not in this sweep: tests/speculative/runtime_test.cpp PolicyTest
//             crosses them with every policy set under an adversarial oracle proposer (every
//             accept length, partial accepts, misses); this sweep was cut to fit CI (< 20
//             minutes) on the slowest 2-core machine seen (AVX2, ~4.5 ms per decode);
//   kNeutral  no effect on the output by contract (stats): not crossed (it would only double
//             the runs); switched on in every other rotated slot of each channel (see plan()), so the
//             contract is checked on about half of them.
// combinations() = every set of kPolicy knobs whose `needs` are met, alone and with each
// single kControl knob (24 policy sets x (1 + 1 control) + 24 with the lookup, which needs
// the cost gate = 72 today).
//
// plan(): every prompt runs
//   * the anchor: every kPolicy knob on except the ones that need another (the bench's "all"
//     policy: fold+grid+backoff+margin);
//   * `rotated` rotated runs (rotated_runs_per_prompt(): kRotatedRunsPerPrompt, or
//     DS4_SPEC_SWEEP_ROTATED for a deeper run): all other combinations share 64 x that many
//     slots, each combination a block of consecutive slots, and consecutive slots go to
//     consecutive channels, so every combination runs on >= 1 prompt with the CI default and
//     on >= 4 prompts of all four channels from 5 rotated runs per prompt up (both checked by
//     the plan test).
// The CI time is therefore fixed by (anchors + rotated) runs per prompt; adding a knob spreads
// the rotated slots thinner (the plan test fails when a combination would get no prompt:
// raise kRotatedRunsPerPrompt or make the knob a control, consciously).
//
// Adding a policy flag: one row in knobs() (name, how to turn it on, what it needs, role).
// Combination names ("fold+grid+margin") appear in failure messages.
//
// Invariants: combinations() and plan() are deterministic; names are unique.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/flags.h"
#include "engine/speculative.h"

namespace ds4::speculative_sweep {

// bench/spec_channels.cpp defaults (also what scripts/bench_spec.sh runs).
inline constexpr float kConfidence = 0.6f;
inline constexpr float kMarginGate = 2.0f;
inline const std::vector<float>& bench_grid() {
  static const std::vector<float> g = {0.55f, 0.6f, 0.65f};
  return g;
}

enum class Role { kPolicy, kControl, kNeutral };

struct Knob {
  const char* name;
  void (*turn_on)(SpecOptions* o);
  const char* needs;  // name of a knob this one is meaningful only with, or nullptr
  Role role;
};

// The knob table (order = bit order of Combo::mask).
inline const std::vector<Knob>& knobs() {
  static const std::vector<Knob> k = {
      {"fold", [](SpecOptions* o) { o->fold = true; }, nullptr, Role::kPolicy},
      {"grid", [](SpecOptions* o) { o->confidence_grid = bench_grid(); }, nullptr, Role::kPolicy},
      {"backoff", [](SpecOptions* o) { o->backoff = true; }, nullptr, Role::kPolicy},
      {"margin", [](SpecOptions* o) { o->margin_gate = kMarginGate; }, nullptr, Role::kPolicy},
      {"foldpartial", [](SpecOptions* o) { o->fold_after_partial = true; }, "fold", Role::kPolicy},
      // The cost gate is a control: crossed with every policy set in the rotation, kept out of
      // the anchors so they stay the bench's baseline/"all" (the gate makes proposals rarer).
      {"cost", [](SpecOptions* o) { o->cost_gate = true; }, nullptr, Role::kControl},
      // The lookup (hybrid proposer) runs under the cost gate here, as in the engine's default
      // preset costlookup; without the gate PolicyTest (tests/speculative/runtime_test.cpp) covers it.
      {"lookup", [](SpecOptions* o) { o->lookup = true; }, "cost", Role::kPolicy},
      {"stats", [](SpecOptions* o) { o->stats = true; }, nullptr, Role::kNeutral},
  };
  return k;
}

// Budget: rotated DSpark runs per prompt on top of the anchor. 1 + 2 DSpark runs + 1 plain run
// per prompt x 64 prompts x 512 tokens: 2 rotated runs give the 71 rotated combinations 128
// slots, so each gets >= 1 prompt (1 + 1 took ~6 min of CI wall time on the slowest 2-core
// machine seen, AVX2, ~4.5 ms per single-thread decode; on the 2-core Zen 4 the sweep's 16
// shards took ~160 CPU-seconds).
inline constexpr int kRotatedRunsPerPrompt = 2;
// From this many rotated runs per prompt up, every combination runs on >= kDeepMinPrompts
// prompts spanning all four channels (DS4_SPEC_SWEEP_ROTATED=5 or more: a deeper sweep).
inline constexpr int kDeepRotatedRunsPerPrompt = 5;
inline constexpr int kDeepMinPrompts = 4;

// rotated_runs_per_prompt() value of the full cross product (DS4_SPEC_SWEEP_ROTATED=all):
// every prompt runs every combination (72 x 64 runs of 512 tokens; ~80 CPU-minutes: 329 s wall
// on a 16-core Xeon, its 16 shards in parallel, as
// `DS4_SPEC_SWEEP_ROTATED=all ctest -L speculative_sweep -j16` runs them).
inline constexpr int kFullCross = -1;

// kRotatedRunsPerPrompt, or DS4_SPEC_SWEEP_ROTATED (1..64, or "all" = kFullCross) when set;
// read once.
inline int rotated_runs_per_prompt() {
  static const int n = [] {
    const std::optional<std::string> v = ds4::process_env()("DS4_SPEC_SWEEP_ROTATED");
    if (v && *v == "all") return kFullCross;
    const int e = v && !v->empty() ? std::atoi(v->c_str()) : 0;
    return e >= 1 && e <= 64 ? e : kRotatedRunsPerPrompt;
  }();
  return n;
}

struct Combo {
  uint32_t mask = 0;        // bit i = knobs()[i] on
  std::string name;         // "baseline" or "fold+grid+..."
  SpecOptions options;
  bool anchor = false;      // runs on every prompt
};

struct PlannedRun {
  int combo = 0;            // index into combinations()
  bool neutral_on = false;  // kNeutral knobs switched on for this run
};

inline int knob_index(const std::string& name) {
  const std::vector<Knob>& k = knobs();
  for (size_t i = 0; i < k.size(); ++i) {
    if (name == k[i].name) return static_cast<int>(i);
  }
  return -1;
}

// Options of a combination, with the kNeutral knobs on or off.
inline SpecOptions options_for(const Combo& c, bool neutral_on) {
  SpecOptions o = c.options;
  if (neutral_on) {
    for (const Knob& k : knobs()) {
      if (k.role == Role::kNeutral) k.turn_on(&o);
    }
  }
  return o;
}

inline std::string run_name(const Combo& c, bool neutral_on) {
  std::string n = c.name;
  if (neutral_on) {
    for (const Knob& k : knobs()) {
      if (k.role == Role::kNeutral) n += std::string("+") + k.name;
    }
  }
  return n;
}

// Every valid combination (kPolicy knobs with their needs met, plus at most one kControl knob):
// anchors first, then by mask.
inline std::vector<Combo> combinations() {
  const std::vector<Knob>& k = knobs();
  uint32_t policy_free = 0, control = 0;  // kPolicy bits without `needs`; kControl bits
  for (size_t i = 0; i < k.size(); ++i) {
    if (k[i].role == Role::kControl) control |= 1u << i;
    if (k[i].role == Role::kPolicy && k[i].needs == nullptr) policy_free |= 1u << i;
  }
  std::vector<Combo> anchors, rotated;
  for (uint32_t mask = 0; mask < (1u << k.size()); ++mask) {
    if (__builtin_popcount(mask & control) > 1) continue;  // one control at a time
    Combo c;
    c.mask = mask;
    c.options.confidence = kConfidence;
    c.options.scheduler = true;
    c.options.fold = false;
    bool valid = true;
    for (size_t i = 0; i < k.size() && valid; ++i) {
      if (!(mask & (1u << i))) continue;
      if (k[i].role == Role::kNeutral) valid = false;
      if (k[i].needs != nullptr) {
        const int need = knob_index(k[i].needs);
        if (need < 0 || !(mask & (1u << need))) valid = false;
      }
      k[i].turn_on(&c.options);
      if (!c.name.empty()) c.name += "+";
      c.name += k[i].name;
    }
    if (!valid) continue;
    if (c.name.empty()) c.name = "baseline";
    c.anchor = mask == policy_free;
    (c.anchor ? anchors : rotated).push_back(std::move(c));
  }
  anchors.insert(anchors.end(), rotated.begin(), rotated.end());
  return anchors;
}

// runs[g] for global prompt index g = channel * per_channel + i (channel-major): the anchors,
// then its rotated runs. Rotated slot s (0 .. n_prompts * rotated - 1) holds
// rotated combination floor(s * n_rotated / n_slots) and goes to prompt (channel s % n_channels,
// index (s / n_channels) % per_channel); kNeutral knobs are on when (s / n_channels) is odd (every
// other prompt of each channel's rotation). rotated_per_prompt == kFullCross: every prompt g
// runs every rotated combination r (r-th in combination order), kNeutral knobs on when g + r is
// odd, so each combination runs with them on for half the prompts of every channel.
inline std::vector<std::vector<PlannedRun>> plan(const std::vector<Combo>& combos, int n_channels,
                                                 int per_channel, int rotated_per_prompt) {
  const int n_prompts = n_channels * per_channel;
  std::vector<std::vector<PlannedRun>> runs(n_prompts);
  std::vector<int> rotated;
  for (size_t ci = 0; ci < combos.size(); ++ci) {
    if (combos[ci].anchor) {
      for (auto& r : runs) r.push_back(PlannedRun{static_cast<int>(ci), false});
    } else {
      rotated.push_back(static_cast<int>(ci));
    }
  }
  if (rotated.empty()) return runs;
  if (rotated_per_prompt == kFullCross) {
    for (int g = 0; g < n_prompts; ++g) {
      for (size_t r = 0; r < rotated.size(); ++r) {
        runs[g].push_back(PlannedRun{rotated[r], (g + static_cast<int>(r)) % 2 == 1});
      }
    }
    return runs;
  }
  const int64_t n_slots = static_cast<int64_t>(n_prompts) * rotated_per_prompt;
  for (int64_t s = 0; s < n_slots; ++s) {
    const int combo = rotated[static_cast<size_t>(s * static_cast<int64_t>(rotated.size()) / n_slots)];
    const int ch = static_cast<int>(s % n_channels);
    const int idx = static_cast<int>((s / n_channels) % per_channel);
    runs[ch * per_channel + idx].push_back(PlannedRun{combo, (s / n_channels) % 2 == 1});
  }
  return runs;
}

}  // namespace ds4::speculative_sweep
