// sample/sampler.cpp — see sampler.h for the algorithm, filter order and RNG definition.
#include "sample/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/reduce.h"
#include "core/status.h"

namespace ds4 {

void Rng::reseed(uint64_t seed) {
  // One splitmix64 step: a bijection, so distinct seeds give distinct states; the result is
  // zero only for one seed value, which we map to a fixed non-zero constant.
  uint64_t z = seed + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z = z ^ (z >> 31);
  state_ = z != 0 ? z : 0x2545F4914F6CDD1Dull;
}

uint64_t Rng::next_u64() {
  uint64_t x = state_;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  state_ = x;
  return x * 0x2545F4914F6CDD1Dull;
}

double Rng::next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

int32_t argmax_excluding(std::span<const float> logits, int32_t excluded) {
  return top_two(logits, excluded).id;
}

int32_t argmax(std::span<const float> logits) { return argmax_excluding(logits, -1); }

Sampler::Sampler(const SamplerParams& params, int n_vocab)
    : params_(params), rng_(params.seed), scratch_(static_cast<size_t>(std::max(n_vocab, 0))) {}

int32_t Sampler::sample(std::span<const float> logits, int32_t excluded) {
  DS4_CHECK_MSG(logits.size() == scratch_.size(), "Sampler: logits size != n_vocab");
  const int32_t top = argmax_excluding(logits, excluded);
  if (greedy() || top < 0) return top;

  const double max_logit = logits[top];
  const double inv_t = 1.0 / static_cast<double>(params_.temperature);
  const double min_p = params_.min_p > 0.0f ? static_cast<double>(params_.min_p) : 0.0;

  // 1. Unnormalized probabilities relative to the top token (p_top == 1), min-p filter.
  size_t n = 0;
  const int32_t n_vocab = static_cast<int32_t>(logits.size());
  for (int32_t i = 0; i < n_vocab; ++i) {
    if (i == excluded || std::isnan(logits[i])) continue;
    const double p = std::exp((static_cast<double>(logits[i]) - max_logit) * inv_t);
    if (p <= 0.0 || p < min_p) continue;
    scratch_[n++] = {p, i};
  }
  if (n == 0) return top;  // cannot happen (top has p == 1), kept for safety

  auto more_probable = [](const std::pair<double, int32_t>& a,
                          const std::pair<double, int32_t>& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  };
  auto begin = scratch_.begin();

  // 2. top-k.
  if (params_.top_k > 0 && n > static_cast<size_t>(params_.top_k)) {
    std::nth_element(begin, begin + params_.top_k - 1, begin + n, more_probable);
    n = static_cast<size_t>(params_.top_k);
  }

  // 3. top-p over the remaining mass.
  if (params_.top_p < 1.0f) {
    std::sort(begin, begin + n, more_probable);
    double total = 0.0;
    for (size_t i = 0; i < n; ++i) total += scratch_[i].first;
    const double target = static_cast<double>(std::max(params_.top_p, 0.0f)) * total;
    double cum = 0.0;
    size_t keep = 0;
    while (keep < n) {
      cum += scratch_[keep].first;
      ++keep;
      if (cum >= target) break;
    }
    n = std::max<size_t>(keep, 1);
  }

  // 4. Draw.
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += scratch_[i].first;
  const double u = rng_.next_double() * total;
  double cum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cum += scratch_[i].first;
    if (u < cum) return scratch_[i].second;
  }
  return scratch_[n - 1].second;  // rounding: u landed at the very end
}

}  // namespace ds4
