// speculative/lookup.h — prompt-lookup drafts for the hybrid proposer (dspark.md §6 idea 6): the
// continuation of the most recent earlier occurrence of the context's last k tokens.
//
// Role: Runtime (SpecConfig::lookup) asks it for drafts before it pays for a DSpark proposal.
// The index is built incrementally over the session's committed tokens (prompt + output), so
// a lookup costs a few hash probes, not a forward pass. Repetitive text (code identifiers,
// structured keys, the loops of a small model) is where it finds continuations.
// Invariants:
//  * A lookup reads tokens only (no clock, no randomness): the same history gives the same
//    drafts, so runs stay reproducible. Drafts are only proposals; the target verifies them.
//  * Longest match first: k = kMaxMatch down to 1; for a given k the most recent earlier
//    occurrence (the index is exact: keys are compared token by token, so hash collisions
//    only cost a probe). lookup() then equals a backward scan of the history.
//  * update() indexes appended tokens only; a history that shrank or whose last indexed token
//    changed (a new conversation in the same session) is re-indexed from the start.
//  * reserve(n) sizes the tables for n tokens up front (a power of two >= 2n slots of 4 bytes
//    per match length: at most 64 bytes per token in all), so neither update() nor lookup()
//    allocates for histories up to n; past it the tables double (amortized O(1) per token).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace ds4::speculative {

class NgramLookup {
 public:
  static constexpr int kMaxMatch = 4;  // longest suffix tried

  // Tables for histories of up to n_tokens without growing (before the first update()).
  void reserve(int64_t n_tokens);
  // Indexes history[0, n) (the committed tokens); call before lookup() when it grew.
  void update(std::span<const int32_t> history);
  // Up to n_max drafts that followed the longest earlier match of the last k tokens of
  // context = history + tail (tail: at most one token not committed yet, the seed of a fold
  // cycle; may be empty). Returns k (0: no match, nothing written); *n_out = drafts written.
  int lookup(std::span<const int32_t> history, std::span<const int32_t> tail, int n_max, int32_t* out,
             int* n_out) const;
  int64_t indexed() const { return n_indexed_; }  // history tokens covered by the index
  size_t slots() const { return tables_[0].size(); }  // per match length

 private:
  void insert_ends(std::span<const int32_t> h, int64_t e_begin, int64_t e_end);
  // Capacity for max(h.size(), n_tokens) tokens; re-inserts the ends indexed so far (from h).
  void grow(std::span<const int32_t> h, size_t n_tokens);
  static uint64_t hash(const int32_t* t, int k);

  // tables_[k-1][hash & mask_]: continuation start (position after the k-gram) + 1; 0 = empty.
  std::vector<int32_t> tables_[kMaxMatch];
  uint64_t mask_ = 0;
  int64_t n_indexed_ = 0;     // history length the index covers (k-grams ending <= n - 2)
  int32_t last_token_ = -1;   // history[n_indexed_ - 1] when indexed (restart check)
};

}  // namespace ds4::speculative
