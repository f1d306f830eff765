// spec/runtime.h — the DSpark speculative cycle (dspark.md §2.2-§2.6): ONE implementation used
// by the CLI, the bench and the server through engine/speculative.h.
//
// Role: given a ModelSession whose logits predict the next position and a Proposer, appends
// the next token(s) per step: the target's greedy seed plus the longest prefix of drafts the
// target confirms. Greedy only (the caller falls back to plain sampling at T > 0).
//
// Invariants (the correctness contract, tested against plain greedy decoding):
//  * Lossless: the appended stream equals plain greedy decoding token for token (ties ->
//    smallest id, an optional banned id never chosen), and the final session state
//    (serialize_state bytes, logits) equals the state plain decoding leaves.
//  * Only committed target rows reach the proposer's context (Proposer::sync(n) is called with
//    the committed length; rows of rejected drafts are never synced).
//  * Partial accepts commit through ModelSession::commit_prefix (prefix slots, no replay);
//    SpecConfig::replay forces rollback + ordinary decodes, which also serve as the fallback
//    when commit_prefix fails.
//  * Policies decide on counters only (no wall clock): the same inputs give the same output
//    and the same stats counters. Timings are measured for the report only.
//  * Never appends past the token budget (max_new) or the context.
//
// Flags (declared by the frontends in their core/flags.h table) and environment mirrors:
//   --dspark-confidence F       DS4_DSPARK_CONFIDENCE        σ threshold per position (0.6)
//   --dspark-confidence-grid L  DS4_DSPARK_CONFIDENCE_GRID   "a,b,c": per-position thresholds,
//                                                            last value extends; overrides the
//                                                            flat value when set
//   --dspark-fold               DS4_DSPARK_FOLD=1            seed verified as row 0 of the
//                                                            verify batch; armed only after a
//                                                            full accept
//   --dspark-fold-partial N     DS4_DSPARK_FOLD_PARTIAL=0/1  with fold: also stay/arm after a
//                                                            partial accept (k >= 1 drafts kept):
//                                                            the verify rows already captured the
//                                                            committed rows, so the next seed
//                                                            folds without a standalone decode.
//                                                            A d_0 miss still disarms. Default 0
//                                                            (the seed's rule), measured below.
//
// fold_after_partial default (tests/spec/fold_bench_test.cpp, DISABLED_ bench; models/ds4-tiny.gguf,
// CPU 1 thread, 9 prompts x 128 tokens, best of 3 interleaved rounds; same proposals at the same
// positions, so tokens/cycle is identical across the policies). tok/s of fold-after-partial over
// fold-seed-rule (tokens per cycle in brackets):
//   position-keyed oracle, per-draft accept c: 0.50 -> 0.860 (1.76), 0.70 -> 0.873 (2.45),
//     0.80 -> 1.004 (3.32), 0.90 -> 1.049 (4.04), 0.95 -> 1.006 (4.32)
//   trained drafter models/ds4-tiny-dspark.gguf: conf 0.6 -> 1.006 (1.29; 3 partials in 9
//     prompts), conf 0.3 -> 0.986 (1.57)
//   gated variant (fold_partial_min_hits = 6 of the last 8 d_0 checks): 0.934 / 0.900 / 1.017 /
//     1.030 / 1.012 (oracle), 1.004 / 0.996 (drafter)
// A d_0 miss of a folded seed costs a verify of n+1 rows for one token where the standalone
// path's free check costs nothing; after a partial accept that loses more than the saved seed
// decode gains unless per-draft acceptance is >= ~0.8. So the seed's rule stays the default.
//   --dspark-scheduler          DS4_DSPARK_SCHEDULER=0/1     windowed pause scheduler (on)
//   --dspark-scheduler-backoff  DS4_DSPARK_SCHEDULER_BACKOFF=1  pause ×2 per consecutive
//                                                            unproductive cycle (≤ ×8), pos-0
//                                                            bar +0.05 per step (≤ +0.20)
//   --dspark-margin-gate F      DS4_DSPARK_MARGIN_GATE       skip standalone proposals when the
//                                                            target top1−top2 logit margin < F
//   --dspark-replay             DS4_DSPARK_REPLAY=1          partial accepts by replay
//   --dspark-stats              DS4_DSPARK_STATS=1           counters + time split printed to
//                                                            stderr when the Runtime ends
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "session/session.h"
#include "spec/drafter.h"

namespace ds4::spec {

struct SpecConfig {
  float confidence = 0.6f;               // flat σ threshold (all positions)
  std::vector<float> confidence_grid;    // per-position thresholds (last extends); empty = flat
  bool fold = false;
  // Fold also after partial accepts (only with fold). Default false: figures in the header.
  bool fold_after_partial = false;
  // Gate of fold_after_partial: arm after a partial only when at least this many of the last
  // 8 d_0 checks hit (a folded d_0 miss costs a whole verify for one token). 0 = always.
  int fold_partial_min_hits = 0;
  bool scheduler = true;
  int sched_window = 4;                  // cycles per profitability window
  int sched_skip = 2;                    // pause after a low-acceptance window
  int sched_slow_skip = 4;               // pause after a window with >= half no-draft cycles
  float sched_min_avg = 1.5f;            // accepted drafts per cycle below this = low
  int no_draft_skip = 0;                 // pause after each no-draft cycle (0 = off, ds4#833)
  int tail_min_tokens = 10;              // no proposals when fewer tokens remain (0 = off)
  bool backoff = false;
  float margin_gate = 0.0f;              // logits; <= 0 = off. Margin = top1 - top2 of the logits
                                         // after the seed's decode (the row d_0 must match)
  bool replay = false;
  bool stats = false;
  int max_draft = 0;                     // cap on drafts per proposal (0 = block size)
};

// "0.55,0.6,0.65" -> {0.55, 0.6, 0.65}; each value in [0, 1]. kInvalidArgument otherwise.
Status parse_confidence_grid(std::string_view text, std::vector<float>* out);

// §2.6 counters (+ time split, report only).
struct SpecStats {
  int64_t cycles = 0;              // steps through the runtime
  int64_t seeds = 0;               // target-chosen tokens appended (standalone + folded)
  int64_t folded_seeds = 0;        // seeds verified as row 0 of a fold batch
  int64_t proposals = 0;           // proposer calls
  int64_t proposed_tokens = 0;
  int64_t accepted_draft_tokens = 0;
  int64_t full_accepts = 0, partial_accepts = 0;
  int64_t direct_full_commits = 0, direct_partial_commits = 0, replay_fallbacks = 0;
  int64_t first_misses = 0;        // d_0 rejected (free check or fold row 0)
  int64_t no_draft = 0;            // proposer gave nothing (confidence / no context)
  int64_t conf0_rejects = 0;
  int64_t no_room = 0;             // budget/context left no room for drafts
  int64_t invalid_draft = 0;       // drafts cut at an invalid / banned / stop id
  int64_t scheduler_skips = 0, tail_skips = 0, margin_skips = 0;
  int64_t verify_calls = 0, verify_rows = 0, single_draft_decodes = 0;
  int64_t draft_len_hist[kMaxBlockSize + 1] = {};
  int64_t accepted_len_hist[kMaxBlockSize + 1] = {};
  double t_decode = 0, t_propose = 0, t_sync = 0, t_verify = 0, t_commit = 0, t_replay = 0, t_total = 0;  // s

  std::string report() const;  // multi-line, "dspark: ..." lines
};

// What a proposer sees of the target and what it proposes.
class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual int block_size() const = 0;
  // Target layers whose HC mean the proposer needs for every processed row (may be empty).
  virtual std::vector<int> capture_layers() const { return {}; }
  // Every row the target processes (prefill, decode, verify — committed or not).
  virtual void on_capture(int64_t pos, std::span<const float> hidden) {}
  // Positions [0, n_committed) of the session are final; rows at >= n_committed are not.
  virtual void sync(int64_t n_committed) {}
  virtual void propose(int32_t anchor, int64_t pos, int n_max, std::span<const float> thresholds,
                       Proposal* out) = 0;
};

// The DSpark drafter as a Proposer: buffers captures by position and feeds only committed
// rows (the trailing `window` of them) into the drafter's rings on sync().
class DSparkProposer final : public Proposer {
 public:
  explicit DSparkProposer(Drafter& drafter);
  int block_size() const override { return d_.config().block_size; }
  std::vector<int> capture_layers() const override { return d_.config().target_layers; }
  void on_capture(int64_t pos, std::span<const float> hidden) override;
  void sync(int64_t n_committed) override;
  void propose(int32_t anchor, int64_t pos, int n_max, std::span<const float> thresholds, Proposal* out) override;
  Drafter& drafter() { return d_; }

 private:
  Drafter& d_;
  int64_t cap_ = 0;                 // capture slots
  int64_t width_ = 0;               // floats per capture
  std::vector<float> buf_;          // [cap_, width_]
  std::vector<int64_t> tag_;        // [cap_] position held (-1 none)
};

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
  const SpecConfig& config() const { return cfg_; }
  bool fold_armed() const { return fold_armed_; }
  void reset_policy();  // scheduler / backoff / fold state back to start (new request)

 private:
  int32_t choose(std::span<const float> logits) const;
  void thresholds(float* thr, int n) const;
  Status standalone(int32_t seed, int max_new, std::vector<int32_t>* out);
  Status fold_cycle(int32_t seed, int max_new, std::vector<int32_t>* out, bool* handled);
  int clean_drafts(Proposal& p) const;  // cut at invalid/banned/stop ids; returns n
  int propose_drafts(int32_t seed, int64_t L, int n_allow);  // sync + propose + clean + stats
  Status commit(int keep, int rows, const int32_t* row_tokens);
  bool scheduler_paused();
  void scheduler_note(bool drafted, int accepted);
  void note_d0(bool hit);
  bool fold_after_partial_open() const;  // fold_after_partial and its gate

  session::ModelSession& s_;
  Proposer& p_;
  SpecConfig cfg_;
  SpecStats stats_;
  int32_t stop_ = -1, banned_ = -1;
  bool fold_armed_ = false;
  // Scheduler (counters only).
  int pause_ = 0;
  int win_cycles_ = 0, win_accepted_ = 0, win_no_draft_ = 0;
  int streak_ = 0;  // consecutive unproductive cycles (backoff)
  uint32_t d0_hits_ = 0;  // last 8 d_0 checks, newest in bit 0 (1 = hit)
  Proposal prop_;
  int32_t rows_[session::kMaxBatchRows] = {};
};

}  // namespace ds4::spec
