// speculative/proposer.cpp — DSparkProposer (see proposer.h).
#include "speculative/proposer.h"

#include <algorithm>

#include "session/session.h"

namespace ds4::speculative {

DSparkProposer::DSparkProposer(Drafter& drafter) : d_(drafter) {
  cap_ = d_.config().window + 2 * session::kMaxBatchRows;
  width_ = d_.capture_width();
  buf_ = backend::Array<float>(d_.model().backend(), static_cast<size_t>(cap_ * width_));
  tag_.assign(static_cast<size_t>(cap_), -1);
}

void DSparkProposer::on_capture(int64_t pos, std::span<const float> hidden) {
  if (static_cast<int64_t>(hidden.size()) != width_) return;  // capture layers changed under us
  if (pos < d_.ring_next()) d_.ring_truncate(pos);            // the timeline went back
  const int64_t slot = pos % cap_;
  // The session hands its captured row in backend memory: a backend-to-backend copy.
  d_.model().backend().copy(buf_.data() + slot * width_, hidden.data(), sizeof(float) * width_);
  tag_[slot] = pos;
}

void DSparkProposer::sync(int64_t n) {
  if (n < d_.ring_next()) d_.ring_truncate(n);
  const int64_t start = std::max<int64_t>(d_.ring_next(), n - d_.config().window);
  int64_t first = n;
  while (first > start && tag_[(first - 1) % cap_] == first - 1) --first;
  // Rows [first, n) are captured and committed; a missing row before them is a gap, which
  // commit_rows() turns into a ring reset.
  for (int64_t p = first; p < n;) {
    const int64_t slot = p % cap_;
    const int64_t run = std::min(n - p, cap_ - slot);
    d_.commit_rows(p, static_cast<int>(run), buf_.data() + slot * width_);
    p += run;
  }
}

void DSparkProposer::propose(int32_t anchor, int64_t pos, int n_max, std::span<const float> thr, Proposal* out) {
  d_.propose(anchor, pos, n_max, thr, out);
}

}  // namespace ds4::speculative
