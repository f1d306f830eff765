// core/threadpool.h — the persistent worker pool behind every parallel CPU kernel.
//
// Role: `parallel_for(n_items, grain, fn)` runs fn(begin, end) over [0, n_items) split into
// chunks [c·grain, min(n_items, (c+1)·grain)). The chunk BOUNDARIES depend only on
// (n_items, grain), never on the thread count or timing; which thread runs a chunk is
// dynamic (first come, first served), which is harmless because callers split INDEPENDENT
// outputs only (design.md §4: threads split output rows, never a reduction). So every result
// is bit-identical for any thread count.
// Invariants:
//   * the calling thread participates; n_threads() counts it (a pool of 1 has no workers
//     and parallel_for is a plain call fn(0, n_items));
//   * zero heap allocation per call: the job is a (trampoline, context) pair in a fixed
//     slot pointing at the caller's lambda on its stack;
//   * small jobs (a single chunk) run inline on the caller without waking anyone;
//   * re-entrant calls (from inside a job, or a second thread while the pool is busy) run
//     inline on their caller instead of deadlocking;
//   * parallel_for returns only after every chunk has finished.
#pragma once

#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

namespace ds4 {

class ThreadPool {
 public:
  // n_threads <= 0: std::thread::hardware_concurrency() (at least 1).
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Threads that run chunks, the caller included.
  int n_threads() const { return n_threads_; }

  // Runs fn(begin, end) for every chunk of [0, n_items); grain < 1 is treated as 1.
  template <typename F>
  void parallel_for(int64_t n_items, int64_t grain, F&& fn) {
    if (n_items <= 0) return;
    if (grain < 1) grain = 1;
    if (n_threads_ == 1 || n_items <= grain) {
      fn(int64_t{0}, n_items);
      return;
    }
    using Fn = std::remove_reference_t<F>;
    run(n_items, grain, &trampoline<Fn>, const_cast<void*>(static_cast<const void*>(&fn)));
  }

 private:
  using Trampoline = void (*)(void* ctx, int64_t begin, int64_t end);
  template <typename Fn>
  static void trampoline(void* ctx, int64_t begin, int64_t end) {
    (*static_cast<Fn*>(ctx))(begin, end);
  }

  void run(int64_t n_items, int64_t grain, Trampoline tramp, void* ctx);
  void work_chunks();  // claim and run chunks of the published job until none is left
  void worker_main();

  int n_threads_ = 1;
  std::vector<std::thread> workers_;

  // The one job slot. Written only while generation_ is odd and no worker is inside_.
  Trampoline tramp_ = nullptr;
  void* ctx_ = nullptr;
  int64_t n_items_ = 0;
  int64_t grain_ = 1;
  int64_t n_chunks_ = 0;

  // generation_: even = a job is published (or idle), odd = the caller is writing the slot.
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> inside_{0};             // workers currently reading the slot
  std::atomic<int64_t> next_chunk_{0};     // next unclaimed chunk index
  std::atomic<int64_t> chunks_done_{0};    // finished chunks of the current job
  std::atomic<uint32_t> job_done_{0};      // 1 once chunks_done_ reached n_chunks_ (futex word)
  std::atomic<int> sleepers_{0};           // workers blocked (or about to) on generation_
  std::atomic<int> caller_sleeping_{0};    // the caller is blocked (or about to) on job_done_
  std::atomic<bool> busy_{false};          // a job is running (guards re-entrant calls)
  std::atomic<bool> stop_{false};
};

// Convenience: pool == nullptr runs fn(0, n_items) on the caller.
template <typename F>
void parallel_for(ThreadPool* pool, int64_t n_items, int64_t grain, F&& fn) {
  if (pool == nullptr) {
    if (n_items > 0) fn(int64_t{0}, n_items);
    return;
  }
  pool->parallel_for(n_items, grain, static_cast<F&&>(fn));
}

}  // namespace ds4
