// speculative/proposer.h — what the runtime asks of a draft source, and the DSpark drafter as one.
//
// Role: a Proposer sees the target's hidden captures and committed length and turns an anchor
// token into drafts. DSparkProposer feeds a Drafter (one session's timeline) from the captures.
// Invariant: only committed target rows reach the drafter's rings: captures are buffered by
// position and handed over on sync(n_committed); rows of rejected drafts never are.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "speculative/drafter.h"

namespace ds4::speculative {

// What a proposer sees of the target and what it proposes.
class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual int block_size() const = 0;
  // Target layers whose HC mean the proposer needs for every processed row (may be empty).
  virtual std::vector<int> capture_layers() const { return {}; }
  // Every row the target processes (prefill, decode, verify — committed or not); `hidden` is
  // backend memory (ModelSession::set_capture_sink).
  virtual void on_capture(int64_t pos, std::span<const float> hidden) {}
  // Positions [0, n_committed) of the session are final; rows at >= n_committed are not.
  virtual void sync(int64_t n_committed) {}
  virtual void propose(int32_t anchor, int64_t pos, int n_max, std::span<const float> thresholds,
                       Proposal* out) = 0;
};

// The DSpark drafter as a Proposer: buffers captures by position in backend memory and feeds
// only committed rows (the trailing `window` of them) into the drafter's rings on sync().
class DSparkProposer final : public Proposer {
 public:
  explicit DSparkProposer(Drafter& drafter);
  int block_size() const override { return d_.config().block_size; }
  std::vector<int> capture_layers() const override { return d_.config().target_layers; }
  void on_capture(int64_t pos, std::span<const float> hidden) override;
  void sync(int64_t n_committed) override;
  void propose(int32_t anchor, int64_t pos, int n_max, std::span<const float> thresholds, Proposal* out) override;
  Drafter& drafter() { return d_; }

 private:
  Drafter& d_;
  int64_t cap_ = 0;                 // capture slots
  int64_t width_ = 0;               // floats per capture
  backend::Array<float> buf_;       // [cap_, width_] backend memory: the rings read it in place
  std::vector<int64_t> tag_;        // [cap_] position held (-1 none), host bookkeeping
};

}  // namespace ds4::speculative
