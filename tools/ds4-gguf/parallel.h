// tools/ds4-gguf/parallel.h — a tiny fork/join helper for the tool's row loops.
//
// Invariant: callers compute every item independently of the others, so the output bytes do
// not depend on how [0, n) is split or on the number of threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace ds4::tools {

// Runs fn(begin, end) over [0, n) on up to kMaxThreads threads (contiguous ranges; results
// cannot depend on the split because every item is computed independently).
inline void parallel_for(uint64_t n, uint64_t min_per_thread, const std::function<void(uint64_t, uint64_t)>& fn) {
  constexpr unsigned kMaxThreads = 8;
  unsigned nt = std::min(kMaxThreads, std::max(1u, std::thread::hardware_concurrency()));
  nt = static_cast<unsigned>(std::min<uint64_t>(nt, std::max<uint64_t>(1, n / min_per_thread)));
  if (nt <= 1) {
    fn(0, n);
    return;
  }
  std::vector<std::thread> th;
  const uint64_t per = (n + nt - 1) / nt;
  for (unsigned t = 1; t < nt; ++t) {
    const uint64_t b = t * per, e = std::min(n, b + per);
    if (b < e) th.emplace_back(fn, b, e);
  }
  fn(0, std::min(n, per));
  for (auto& x : th) x.join();
}

}  // namespace ds4::tools
