// sample/sampler.h — next-token selection from a logits row (ds4-architecture.md §4.9).
//
// Role: greedy argmax, temperature sampling with top-k / min-p / top-p filters, and a seeded
// reproducible RNG. Shared by the CLI, the bench probe and (later) the server and DSpark.
//
// Invariants:
//   * argmax: the FIRST index holding the maximum (strict '>'), i.e. ties -> smallest id.
//     NaN logits never win.
//   * temperature <= 0 is exactly greedy (no RNG draw is consumed).
//   * Sampler::sample allocates nothing: scratch is sized to n_vocab at construction.
//   * The result depends only on (logits, params, seed, number of previous draws): the filter
//     order is fixed (min-p, then top-k, then top-p), sums run in a fixed order in double, and
//     the RNG is specified below — the same seed gives the same sequence on every machine.
//
// Filters (all relative to the temperature-scaled softmax p_i ∝ exp((l_i - l_max) / T)):
//   min-p: keep i with p_i >= min_p * p_max (p_max is the top token's probability);
//   top-k: keep the k most probable (ties -> smaller id first); k <= 0 disables;
//   top-p: keep the shortest most-probable prefix whose mass reaches top_p of the remaining
//          mass (always at least one token); top_p >= 1 disables.
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

 private:
  SamplerParams params_;
  Rng rng_;
  std::vector<std::pair<double, int32_t>> scratch_;  // [n_vocab] (unnormalized prob, id)
};

}  // namespace ds4
