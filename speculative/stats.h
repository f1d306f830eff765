// speculative/stats.h — the DSpark runtime's counters (dspark.md §2.6) and time split.
//
// Role: what the runtime counts per cycle, and the "dspark: ..." report --dspark-stats prints.
// Invariant: the counters follow the runtime's decisions only (no clock): the same inputs give
// the same counters. The t_* fields are wall-clock time for the report and never decide.
#pragma once

#include <cstdint>
#include <string>

#include "speculative/drafter_weights.h"

namespace ds4::speculative {

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
  int64_t cost_skips = 0;          // cycles the cost gate kept plain (no proposal)
  int64_t cost_trims = 0;          // proposals verified with fewer drafts than drafted
  int64_t cost_unfolds = 0;        // armed fold cycles sent to the standalone path by the gate
  int64_t cost_probes = 0;         // proposals made although the gate was closed (probe ladder)
  int64_t overlapped = 0;          // standalone proposals computed alongside the seed's decode
  int64_t overlap_discards = 0;    // of those, dropped because a gate then said no
  int64_t overlap_conf0 = 0;       // overlapped proposals stopped by the conf0 precheck
  int64_t overlap_discard_conf0 = 0;  // of those, dropped by a gate
  int64_t lookups = 0;             // cycles whose drafts came from the lookup (checked or verified)
  int64_t lookup_first_misses = 0; // of those, d_0 rejected
  int64_t lookup_drafts = 0;       // lookup drafts put to the target: d_0 of every standalone
                                   // check, the verified ones after a hit, a fold batch's
                                   // (also in proposed_tokens)
  int64_t lookup_accepted = 0;     // of those, kept (also in accepted_draft_tokens)
  int64_t draft_len_hist[kMaxBlockSize + 1] = {};
  int64_t accepted_len_hist[kMaxBlockSize + 1] = {};
  double t_decode = 0, t_propose = 0, t_sync = 0, t_verify = 0, t_commit = 0, t_replay = 0, t_total = 0;  // s

  std::string report() const;  // multi-line, "dspark: ..." lines
};

}  // namespace ds4::speculative
