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
//   * small jobs (a single chunk) run inline on the caller without waking anyone, and a job
//     of c chunks involves only the caller and helpers 1..c−1 (the others skip it without
//     touching its counters: on many cores, idle threads racing for a few chunks cost more
//     than the chunks);
//   * re-entrant calls (from inside a job, or a second thread while the pool is busy) run
//     inline on their caller instead of deadlocking;
//   * parallel_for returns only after every chunk has finished;
//   * run_split(n_a, a, b) runs two tasks at once on disjoint parts of the pool: a on the
//     caller with n_a threads, b with the other n_threads() − n_a. Every parallel_for that a
//     (or b) issues on this pool is chunked exactly as usual and runs on that task's part
//     only, so results do not change, only which threads compute them.
#pragma once

#include <atomic>
#include <cstddef>
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

  // Jobs published to helpers so far by every pool of the process (inline calls excluded): a
  // profiling counter (relaxed, one increment per published job), read by benchmarks.
  static uint64_t published_jobs();

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

  // Runs a() and b() concurrently and returns when both are done: a on the calling thread
  // with n_a threads in all (clamped to [1, n_threads() − 1]), b on a pool thread with the
  // rest. Each task's own parallel_for calls on this pool use its part of the threads only.
  // A pool of 1 runs a() then b() on the caller. Not re-entrant: called from inside a job,
  // the two run one after the other on the caller. No allocation.
  template <typename A, typename B>
  void run_split(int n_a, A&& a, B&& b) {
    using FA = std::remove_reference_t<A>;
    using FB = std::remove_reference_t<B>;
    split(n_a, &call<FA>, const_cast<void*>(static_cast<const void*>(&a)), &call<FB>,
          const_cast<void*>(static_cast<const void*>(&b)));
  }

 private:
  using Trampoline = void (*)(void* ctx, int64_t begin, int64_t end);
  using Call = void (*)(void* ctx);
  template <typename Fn>
  static void trampoline(void* ctx, int64_t begin, int64_t end) {
    (*static_cast<Fn*>(ctx))(begin, end);
  }
  template <typename Fn>
  static void call(void* ctx) {
    (*static_cast<Fn*>(ctx))();
  }

  // One job slot and its protocol (threadpool.cpp). The pool's own slot is served by every
  // worker for the pool's lifetime; during run_split each task has a slot of its own, served
  // by the workers lent to it until the task closes it.
  class Slot {
   public:
    // Caller side: publish the job, run chunks beside the helpers, wait for all chunks.
    // Returns false, having run nothing, when a job is already running here (re-entrant or
    // concurrent use; the caller then runs the job inline).
    bool run(int64_t n_items, int64_t grain, Trampoline tramp, void* ctx);
    // Helper side: run chunks of every job published here until close(); then return.
    // `index` (1-based among the slot's helpers) joins only jobs of more than `index` chunks,
    // so a job of c chunks touches the caller and c − 1 helpers, not the whole pool.
    void serve(int index);
    void open() { closed_.store(false); }  // before any helper arrives (none is inside)
    void close();                           // helpers leave serve() once they see it

   private:
    void work_chunks();  // claim and run chunks of the published job until none is left

    // Cache lines by who touches them, so that read-modify-writes of the participants do not
    // invalidate the line every idle helper is spinning on (false sharing across the cores).
    static constexpr size_t kLine = 64;

    // Read by every waiting helper; written by the caller once or twice per job.
    // generation_: even = a job is published (or idle), odd = the caller is writing the slot.
    alignas(kLine) std::atomic<uint32_t> generation_{0};
    std::atomic<bool> closed_{false};        // helpers must leave serve()
    std::atomic<int64_t> helpers_{0};        // helpers the published job can use (a hint)
    // The job. Written only while generation_ is odd and no helper is inside_.
    Trampoline tramp_ = nullptr;
    void* ctx_ = nullptr;
    int64_t n_items_ = 0;
    int64_t grain_ = 1;
    int64_t n_chunks_ = 0;

    // Claimed and counted by the participants of a job.
    alignas(kLine) std::atomic<int64_t> next_chunk_{0};  // next unclaimed chunk index
    std::atomic<int64_t> chunks_done_{0};    // finished chunks of the current job
    alignas(kLine) std::atomic<int> inside_{0};  // helpers currently reading the slot
    std::atomic<int> sleepers_{0};           // helpers blocked (or about to) on generation_
    // The caller's: it spins on job_done_.
    alignas(kLine) std::atomic<uint32_t> job_done_{0};  // 1 once chunks_done_ reached n_chunks_ (futex word)
    std::atomic<int> caller_sleeping_{0};    // the caller is blocked (or about to) on job_done_
    std::atomic<bool> busy_{false};          // a job is running (guards re-entrant calls)
  };

  void run(int64_t n_items, int64_t grain, Trampoline tramp, void* ctx);
  void split(int n_a, Call a, void* a_ctx, Call b, void* b_ctx);

  int n_threads_ = 1;
  Slot main_;      // every worker's home slot
  Slot part_[2];   // run_split: the slots of task a and task b
  std::vector<std::thread> workers_;
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
