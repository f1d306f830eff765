// speculative/stats.cpp — SpecStats::report() (see stats.h).
#include "speculative/stats.h"

#include <cstdio>

namespace ds4::speculative {

std::string SpecStats::report() const {
  char buf[2048];
  std::string r;
  const double accept_rate = proposed_tokens ? 100.0 * accepted_draft_tokens / proposed_tokens : 0.0;
  const double avg_accept = cycles ? static_cast<double>(accepted_draft_tokens) / cycles : 0.0;
  std::snprintf(buf, sizeof buf,
                "dspark: cycles=%lld seeds=%lld folded_seeds=%lld proposals=%lld proposed=%lld accepted=%lld "
                "accept_rate=%.1f%% avg_accept=%.3f\n",
                (long long)cycles, (long long)seeds, (long long)folded_seeds, (long long)proposals,
                (long long)proposed_tokens, (long long)accepted_draft_tokens, accept_rate, avg_accept);
  r += buf;
  std::snprintf(buf, sizeof buf,
                "dspark: full=%lld partial=%lld direct_full=%lld direct_partial=%lld replay=%lld miss_first=%lld "
                "no_draft=%lld conf0_rejects=%lld no_room=%lld invalid_draft=%lld\n",
                (long long)full_accepts, (long long)partial_accepts, (long long)direct_full_commits,
                (long long)direct_partial_commits, (long long)replay_fallbacks, (long long)first_misses,
                (long long)no_draft, (long long)conf0_rejects, (long long)no_room, (long long)invalid_draft);
  r += buf;
  std::snprintf(buf, sizeof buf,
                "dspark: scheduler_skips=%lld tail_skips=%lld margin_skips=%lld verify_calls=%lld verify_rows=%lld "
                "single_draft_decodes=%lld cost_skips=%lld cost_probes=%lld cost_trims=%lld cost_unfolds=%lld "
                "overlapped=%lld overlap_discards=%lld overlap_conf0=%lld overlap_discard_conf0=%lld\n",
                (long long)scheduler_skips, (long long)tail_skips, (long long)margin_skips, (long long)verify_calls,
                (long long)verify_rows, (long long)single_draft_decodes, (long long)cost_skips,
                (long long)cost_probes, (long long)cost_trims, (long long)cost_unfolds, (long long)overlapped,
                (long long)overlap_discards, (long long)overlap_conf0, (long long)overlap_discard_conf0);
  r += buf;
  r += "dspark: draft_len_hist=";
  for (int i = 0; i <= kMaxBlockSize; ++i) r += (i ? "," : "") + std::to_string(draft_len_hist[i]);
  r += " accepted_len_hist=";
  for (int i = 0; i <= kMaxBlockSize; ++i) r += (i ? "," : "") + std::to_string(accepted_len_hist[i]);
  r += "\n";
  std::snprintf(buf, sizeof buf,
                "dspark: lookups=%lld lookup_first_misses=%lld lookup_drafts=%lld lookup_accepted=%lld\n",
                (long long)lookups, (long long)lookup_first_misses, (long long)lookup_drafts,
                (long long)lookup_accepted);
  r += buf;
  std::snprintf(buf, sizeof buf,
                "dspark: time_ms total=%.1f decode=%.1f propose=%.1f sync=%.1f verify=%.1f commit=%.1f replay=%.1f\n",
                t_total * 1e3, t_decode * 1e3, t_propose * 1e3, t_sync * 1e3, t_verify * 1e3, t_commit * 1e3,
                t_replay * 1e3);
  r += buf;
  return r;
}

}  // namespace ds4::speculative
