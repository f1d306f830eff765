// speculative/lookup.cpp — NgramLookup (see lookup.h).
//
// Index layout: for k = 1..kMaxMatch, the k-gram ending at position e (tokens e-k+1..e) is
// stored under its hash with the value e + 2 (its continuation starts at e + 1; 0 = empty);
// a later occurrence of the same k-gram replaces the earlier one.
// Only k-grams with e <= n - 2 are indexed, so every entry has at least one continuation
// token inside the history and none is the query suffix itself.
#include "speculative/lookup.h"

#include <algorithm>

namespace ds4::speculative {

namespace {
constexpr size_t kMinTable = 1024;
}  // namespace

uint64_t NgramLookup::hash(const int32_t* t, int k) {
  uint64_t h = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(k + 1);
  for (int i = 0; i < k; ++i) {
    h ^= static_cast<uint32_t>(t[i]);
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
  }
  return h ^ (h >> 29);
}

// Open addressing with linear probing; keys are compared token by token (through the
// positions the slots hold), so the index is exact: one slot per distinct k-gram, holding its
// latest end. Load <= 1/2 (grow()), so probes are short.
void NgramLookup::insert_ends(std::span<const int32_t> h, int64_t e_begin, int64_t e_end) {
  const int32_t* t = h.data();
  for (int64_t e = e_begin; e < e_end; ++e) {
    for (int k = 1; k <= kMaxMatch && k <= e + 1; ++k) {
      std::vector<int32_t>& tab = tables_[k - 1];
      const int32_t* key = t + e - k + 1;
      uint64_t i = hash(key, k) & mask_;
      while (tab[i] != 0 && !std::equal(key, key + k, t + (tab[i] - 2) - k + 1)) i = (i + 1) & mask_;
      tab[i] = static_cast<int32_t>(e + 2);
    }
  }
}

// Capacity: a power of two >= 2 x the k-grams to hold (load <= 1/2), re-inserting the ends
// indexed so far in position order (so the most recent occurrence wins again).
void NgramLookup::grow(std::span<const int32_t> h, size_t n_tokens) {
  const size_t want = std::max(kMinTable, 2 * std::max(h.size(), n_tokens));
  if (!tables_[0].empty() && tables_[0].size() >= want) return;
  size_t cap = tables_[0].empty() ? kMinTable : tables_[0].size();
  while (cap < want) cap *= 2;
  for (auto& t : tables_) t.assign(cap, 0);
  mask_ = cap - 1;
  insert_ends(h, 0, std::max<int64_t>(0, n_indexed_ - 1));
}

void NgramLookup::reserve(int64_t n_tokens) {
  if (n_indexed_ == 0 && n_tokens > 0) grow(std::span<const int32_t>(), static_cast<size_t>(n_tokens));
}

void NgramLookup::update(std::span<const int32_t> history) {
  const int64_t n = static_cast<int64_t>(history.size());
  if (n < n_indexed_ || (n_indexed_ > 0 && history[static_cast<size_t>(n_indexed_ - 1)] != last_token_)) {
    for (auto& t : tables_) std::fill(t.begin(), t.end(), 0);  // another timeline: start over
    n_indexed_ = 0;
  }
  if (n == n_indexed_) return;
  grow(history, 0);
  insert_ends(history, std::max<int64_t>(0, n_indexed_ - 1), n - 1);
  n_indexed_ = n;
  last_token_ = n > 0 ? history[static_cast<size_t>(n - 1)] : -1;
}

int NgramLookup::lookup(std::span<const int32_t> history, std::span<const int32_t> tail, int n_max, int32_t* out,
                        int* n_out) const {
  *n_out = 0;
  const int64_t H = static_cast<int64_t>(history.size());
  const int64_t N = H + static_cast<int64_t>(tail.size());
  if (n_max < 1 || tables_[0].empty() || N < 2) return 0;
  auto at = [&](int64_t i) { return i < H ? history[static_cast<size_t>(i)] : tail[static_cast<size_t>(i - H)]; };
  int32_t suffix[kMaxMatch];
  for (int k = static_cast<int>(std::min<int64_t>(kMaxMatch, N - 1)); k >= 1; --k) {
    for (int i = 0; i < k; ++i) suffix[i] = at(N - k + i);
    const std::vector<int32_t>& tab = tables_[k - 1];
    uint64_t i = hash(suffix, k) & mask_;
    int64_t cs = -1;  // continuation start of the latest occurrence
    for (; tab[i] != 0; i = (i + 1) & mask_) {
      const int64_t c = static_cast<int64_t>(tab[i]) - 1;
      if (c - k < 0 || c > H - 1) continue;  // (not possible for an index of this history)
      if (std::equal(suffix, suffix + k, history.data() + (c - k))) {
        cs = c;
        break;
      }
    }
    if (cs < 0) continue;
    int n = 0;
    for (int64_t p = cs; p < N && n < n_max; ++p) out[n++] = at(p);
    *n_out = n;
    return k;
  }
  return 0;
}

}  // namespace ds4::speculative
