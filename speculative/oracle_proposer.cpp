// speculative/oracle_proposer.cpp — OracleProposer (see oracle_proposer.h).
#include "speculative/oracle_proposer.h"

#include <algorithm>

namespace ds4::speculative {

namespace {

uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace

bool oracle_hit(uint64_t seed, int64_t q, int k, float h) {
  if (h >= 1.0f) return true;
  if (!(h > 0.0f)) return false;
  uint64_t z = mix64(seed + 0x9e3779b97f4a7c15ull);
  z = mix64(z ^ static_cast<uint64_t>(q));
  z = mix64(z ^ (static_cast<uint64_t>(k) + 0x632be59bd9b4e019ull));
  const double u = static_cast<double>(z >> 11) * 0x1.0p-53;  // [0, 1)
  return u < static_cast<double>(h);
}

int32_t wrong_token(int32_t truth, int32_t n_vocab, int32_t avoid) {
  int32_t w = (truth + 1) % n_vocab;
  if (w == avoid) w = (truth + 2) % n_vocab;
  return w;
}

OracleProposer::OracleProposer(OracleOptions o) : o_(std::move(o)) {
  o_.block_size = std::clamp(o_.block_size, 1, kMaxBlockSize);
  o_.hit_rate = std::clamp(o_.hit_rate, 0.0f, 1.0f);
}

void OracleProposer::propose(int32_t anchor, int64_t pos, int n_max, std::span<const float> thr, Proposal* out) {
  *out = Proposal();
  const int64_t n_script = static_cast<int64_t>(o_.script.size());
  const int64_t i = pos - o_.start;  // the anchor's index in the script
  if (i < 0 || i >= n_script || o_.script[static_cast<size_t>(i)] != anchor) {
    out->no_context = true;
    return;
  }
  out->conf0 = 1.0f;
  const int n = static_cast<int>(std::min<int64_t>({static_cast<int64_t>(n_max), o_.block_size, n_script - 1 - i}));
  for (int k = 0; k < n; ++k) {
    if (1.0f < threshold_at(thr, k)) break;  // a bar no draft clears
    const int64_t q = pos + 1 + k;
    const int32_t truth = o_.script[static_cast<size_t>(i + 1 + k)];
    out->tokens[k] = oracle_hit(o_.seed, q, k, o_.hit_rate) ? truth : wrong_token(truth, o_.n_vocab, o_.avoid);
    out->conf[k] = 1.0f;
    out->n = k + 1;
  }
}

}  // namespace ds4::speculative
