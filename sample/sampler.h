// sample/sampler.h — next-token selection from a logits row (ds4-architecture.md §4.9).
//
// Role: greedy argmax, temperature sampling with top-k / min-p / top-p filters, and a seeded
// reproducible RNG. Shared by the CLI, the bench, the server and DSpark (engine sample_next).
//
// Invariants:
//   * argmax: the FIRST index holding the maximum (strict '>'), i.e. ties -> smallest id.
//     NaN logits never win.
//   * temperature <= 0 is exactly greedy (no RNG draw is consumed).
//   * Sampler::sample allocates nothing: scratch is sized to n_vocab at construction.
//   * The result depends only on (logits, params, seed, number of previous draws): the filter
//     order is fixed (min-p, then top-k, then top-p), sums run in a fixed order in double, and
//     the RNG is specified below — the same seed gives the same sequence on every machine.
//   * Draw order (the order the mass is summed and the draw walks): the kept tokens by id,
//     ascending; after top-p, most probable first (ties -> smaller id). Top-k picks a SET (the
//     k most probable, ties -> smaller id) and keeps id order, so no std::nth_element
//     permutation reaches the result.
//   * Two read-outs, one result: sample(row) reads the whole logits row; sample_candidates()
//     reads only the row's top-K (backend TopKParams / core top_k_row: value descending, ties
//     -> smaller id) and either returns exactly the token sample(row) returns with the same
//     RNG state, or kNeedRow without drawing (the caller then calls sample(row)). It decides
//     only when it can prove that no token outside the K candidates can be kept (see below).
//
// Filters (all relative to the temperature-scaled softmax p_i ∝ exp((l_i - l_max) / T)):
//   min-p: keep i with p_i >= min_p * p_max (p_max is the top token's probability);
//   top-k: keep the k most probable (ties -> smaller id first); k <= 0 disables;
//   top-p: keep the shortest most-probable prefix whose mass reaches top_p of the remaining
//          mass (always at least one token); top_p >= 1 disables.
//
// Candidate exactness (when sample_candidates may decide without the row): the proof is in
// docs/SAMPLING.md.
//
// RNG: xorshift64* (Marsaglia/Vigna: x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
// out = x * 0x2545F4914F6CDD1D), state seeded through one splitmix64 step of the user seed so
// every seed (0 included) gives a non-zero state. Uniform doubles take the top 53 bits.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace ds4 {

struct SamplerParams {
  float temperature = 1.0f;  // <= 0: greedy
  int top_k = 0;             // <= 0: off
  float top_p = 1.0f;        // >= 1: off
  float min_p = 0.05f;       // <= 0: off
  uint64_t seed = 1;
};

// xorshift64* seeded by splitmix64 (see header comment).
class Rng {
 public:
  explicit Rng(uint64_t seed = 1) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next_u64();
  double next_double();  // uniform in [0, 1)

 private:
  uint64_t state_ = 0;
};

// First index of the maximum logit (ties -> smallest id). -1 for an empty row.
int32_t argmax(std::span<const float> logits);
// Same, skipping `excluded` (e.g. EOS for the bench's non-EOS probe).
// Both are core/reduce.h's top_two(...).id (vectorized; same result as the scalar loop).
int32_t argmax_excluding(std::span<const float> logits, int32_t excluded);

class Sampler {
 public:
  Sampler(const SamplerParams& params, int n_vocab);

  const SamplerParams& params() const { return params_; }
  bool greedy() const { return params_.temperature <= 0.0f; }
  void reseed(uint64_t seed) { rng_.reseed(seed); }

  // Picks the next token from logits[0 .. n_vocab). `excluded` (>= 0) is never chosen.
  // logits.size() must equal the n_vocab given at construction.
  int32_t sample(std::span<const float> logits, int32_t excluded = -1);

  // How many candidates sample_candidates() wants: min(kCandidates, n_vocab).
  int candidates_wanted() const { return n_candidates_; }
  static constexpr int kCandidates = 256;  // == backend::kTopKMax
  static constexpr int32_t kNeedRow = -2;
  // The same choice as sample(row, excluded) from the row's top-K read-out (ids[j], values[j],
  // j < K = ids.size(), value descending, ties -> smaller id, `excluded` and NaN already left
  // out, tail padded with id -1), or kNeedRow (no draw consumed) when they cannot decide it.
  int32_t sample_candidates(std::span<const int32_t> ids, std::span<const float> values);

 private:
  // Top-k, top-p and the draw over scratch_[0..n): the kept tokens in id order.
  int32_t finish(size_t n);

  SamplerParams params_;
  Rng rng_;
  int n_candidates_ = 0;
  std::vector<std::pair<double, int32_t>> scratch_;  // [n_vocab] (unnormalized prob, id)
};

}  // namespace ds4
