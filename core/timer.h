// core/timer.h — monotonic wall-clock timing for progress and speed reports.
// Never used to make numeric or scheduling decisions (design.md §4: decisions use counters).
#pragma once

#include <chrono>

namespace ds4 {

class Timer {
 public:
  Timer() : start_(Clock::now()) {}
  void reset() { start_ = Clock::now(); }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double millis() const { return seconds() * 1e3; }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

}  // namespace ds4
