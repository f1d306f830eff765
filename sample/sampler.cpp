// sample/sampler.cpp — see sampler.h for the algorithm, filter order and RNG definition.
#include "sample/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

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
    : params_(params),
      rng_(params.seed),
      n_candidates_(std::min(kCandidates, std::max(n_vocab, 1))),
      scratch_(static_cast<size_t>(std::max(n_vocab, 0))) {}

namespace {

bool more_probable(const std::pair<double, int32_t>& a, const std::pair<double, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

bool lower_id(const std::pair<double, int32_t>& a, const std::pair<double, int32_t>& b) {
  return a.second < b.second;
}

}  // namespace

int32_t Sampler::sample(std::span<const float> logits, int32_t excluded) {
  DS4_CHECK_MSG(logits.size() == scratch_.size(), "Sampler: logits size != n_vocab");
  const int32_t top = argmax_excluding(logits, excluded);
  if (greedy() || top < 0) return top;

  const double max_logit = logits[top];
  const double inv_t = 1.0 / static_cast<double>(params_.temperature);
  const double min_p = params_.min_p > 0.0f ? static_cast<double>(params_.min_p) : 0.0;

  // Unnormalized probabilities relative to the top token (p_top == 1), min-p filter; id order.
  size_t n = 0;
  const int32_t n_vocab = static_cast<int32_t>(logits.size());
  for (int32_t i = 0; i < n_vocab; ++i) {
    if (i == excluded || std::isnan(logits[i])) continue;
    const double p = std::exp((static_cast<double>(logits[i]) - max_logit) * inv_t);
    if (p <= 0.0 || p < min_p) continue;
    scratch_[n++] = {p, i};
  }
  if (n == 0) return top;  // cannot happen (top has p == 1), kept for safety
  return finish(n);
}

int32_t Sampler::sample_candidates(std::span<const int32_t> ids, std::span<const float> values) {
  DS4_CHECK_MSG(ids.size() == values.size() && !ids.empty() && ids.size() <= scratch_.size(),
                "Sampler: bad candidate count");
  const int32_t top = ids[0];
  // No qualifying value (all NaN / excluded): top_two's fallback id lives in the row.
  if (top < 0) return kNeedRow;
  if (greedy()) return top;
  const float max_f = values[0];
  if (!std::isfinite(max_f)) return kNeedRow;  // p would be NaN for the top token(s)

  const double max_logit = max_f;
  const double inv_t = 1.0 / static_cast<double>(params_.temperature);
  const double min_p = params_.min_p > 0.0f ? static_cast<double>(params_.min_p) : 0.0;
  const size_t k_read = ids.size();
  size_t count = 0;  // qualifying candidates (a prefix; the padding has id -1)
  while (count < k_read && ids[count] >= 0) ++count;

  size_t n = 0;
  for (size_t j = 0; j < count; ++j) {
    const double p = std::exp((static_cast<double>(values[j]) - max_logit) * inv_t);
    if (p <= 0.0 || p < min_p) continue;
    scratch_[n++] = {p, ids[j]};
  }
  if (n == 0) return top;  // cannot happen (top has p == 1)

  if (count == k_read) {
    // Tokens outside may exist: every one has p <= bound (see the header).
    const double p_last = std::exp((static_cast<double>(values[k_read - 1]) - max_logit) * inv_t);
    const double bound = p_last * (1.0 + 0x1p-50) + std::numeric_limits<double>::denorm_min();
    bool decided = min_p > 0.0 && bound < min_p;
    const size_t k = params_.top_k > 0 ? static_cast<size_t>(params_.top_k) : 0;
    if (!decided && k > 0 && n >= k) {
      std::nth_element(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(k - 1),
                       scratch_.begin() + static_cast<std::ptrdiff_t>(n), more_probable);
      decided = scratch_[k - 1].first > bound;
    }
    if (!decided) return kNeedRow;
  }
  std::sort(scratch_.begin(), scratch_.begin() + static_cast<std::ptrdiff_t>(n), lower_id);
  return finish(n);
}

int32_t Sampler::finish(size_t n) {
  auto begin = scratch_.begin();
  const auto at = [&](size_t i) { return begin + static_cast<std::ptrdiff_t>(i); };

  // 1. top-k: the set of the k most probable, back in id order.
  if (params_.top_k > 0 && n > static_cast<size_t>(params_.top_k)) {
    const size_t k = static_cast<size_t>(params_.top_k);
    std::nth_element(begin, at(k - 1), at(n), more_probable);
    n = k;
    std::sort(begin, at(n), lower_id);
  }

  // 2. top-p over the remaining mass, most probable first.
  if (params_.top_p < 1.0f) {
    std::sort(begin, at(n), more_probable);
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

  // 3. Draw.
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
