// core/timer.h — monotonic wall-clock timing for progress and speed reports, and the median
// of repeated timings.
// Never used to make numeric or scheduling decisions (design.md §4: decisions use counters).
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

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

// Median of timing samples (the upper one of an even count; 0 for none): the figure of a
// repeated measurement least moved by a shared machine's outliers. Takes a copy to sort.
inline double median_of(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace ds4
