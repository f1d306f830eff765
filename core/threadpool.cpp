// core/threadpool.cpp — persistent worker pool (see threadpool.h for the contract).
//
// Protocol (all atomics sequentially consistent, so the reasoning below is about one total
// order):
//   caller: busy_ := true; generation_ := odd (slot being written); wait inside_ == 0;
//           write the slot; next_chunk_ := 0; chunks_done_ := 0; generation_ := even (publish);
//           claim chunks like a worker; wait chunks_done_ == n_chunks_; busy_ := false.
//   worker: wait for generation_ to change; inside_ += 1; g := generation_;
//           if g is odd: inside_ -= 1 (the slot is being written; wait for the next change);
//           else claim chunks of job g until none is left; inside_ -= 1.
// A worker that increments inside_ after the caller saw inside_ == 0 must then read the odd
// (or a later, fully published) generation, so no worker ever reads a half-written slot. A
// worker that wakes late simply finds every chunk claimed: the caller never waits for a
// descheduled worker, only for chunks (this machine is often oversubscribed).
#include "core/threadpool.h"

#include <climits>

#if defined(__linux__)
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define DS4_CPU_RELAX() _mm_pause()
#else
#define DS4_CPU_RELAX() ((void)0)
#endif

namespace ds4 {
namespace {

// Spin iterations before blocking in the kernel; a few microseconds, enough to catch the
// back-to-back jobs of one forward pass without burning a shared core for long.
constexpr int kSpinIters = 4000;

// Blocking wait/wake on a 32-bit atomic. Linux: the futex syscall directly (the kernel
// re-checks the value atomically, so no wake-up is lost); elsewhere std::atomic::wait.
void block_while_equal(std::atomic<uint32_t>& a, uint32_t old) {
#if defined(__linux__)
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&a), FUTEX_WAIT_PRIVATE, old, nullptr, nullptr, 0);
#else
  a.wait(old);
#endif
}

void wake_all(std::atomic<uint32_t>& a) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&a), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
#else
  a.notify_all();
#endif
}

}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
  if (n_threads <= 0) n_threads = 1;
  n_threads_ = n_threads;
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this] { worker_main(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(2);
  wake_all(generation_);
  for (auto& t : workers_) t.join();
}

void ThreadPool::work_chunks() {
  const int64_t n_chunks = n_chunks_;
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1);
    if (c >= n_chunks) return;
    const int64_t begin = c * grain_;
    const int64_t end = begin + grain_ < n_items_ ? begin + grain_ : n_items_;
    tramp_(ctx_, begin, end);
    if (chunks_done_.fetch_add(1) + 1 == n_chunks) {
      job_done_.store(1u);
      if (caller_sleeping_.load() != 0) wake_all(job_done_);
    }
  }
}

void ThreadPool::worker_main() {
  uint32_t seen = generation_.load();
  for (;;) {
    // stop_ is checked after `seen` was read: a destructor that ran before that read is seen
    // here, one that runs after it changes generation_ and ends the wait below.
    if (stop_.load()) return;
    bool changed = false;
    for (int i = 0; i < kSpinIters && !changed; ++i) {
      changed = generation_.load() != seen;
      if (!changed) DS4_CPU_RELAX();
    }
    while (!changed) {
      sleepers_.fetch_add(1);
      if (generation_.load() == seen) block_while_equal(generation_, seen);
      sleepers_.fetch_sub(1);
      changed = generation_.load() != seen;
    }
    if (stop_.load()) return;
    inside_.fetch_add(1);
    const uint32_t g = generation_.load();
    if ((g & 1u) == 0u) work_chunks();
    inside_.fetch_sub(1);
    // Odd g: the slot is being written; the publish that follows changes it again.
    seen = g;
  }
}

void ThreadPool::run(int64_t n_items, int64_t grain, Trampoline tramp, void* ctx) {
  bool expected = false;
  if (!busy_.compare_exchange_strong(expected, true)) {
    // Re-entrant or concurrent use: run on this thread (results do not depend on it).
    tramp(ctx, 0, n_items);
    return;
  }
  const uint32_t g = generation_.load();  // even: no job is being written (busy_ held)
  generation_.store(g + 1u);
  while (inside_.load() != 0) DS4_CPU_RELAX();
  tramp_ = tramp;
  ctx_ = ctx;
  n_items_ = n_items;
  grain_ = grain;
  n_chunks_ = (n_items + grain - 1) / grain;
  next_chunk_.store(0);
  chunks_done_.store(0);
  job_done_.store(0u);
  generation_.store(g + 2u);
  if (sleepers_.load() != 0) wake_all(generation_);

  work_chunks();
  for (int i = 0; i < kSpinIters && job_done_.load() == 0u; ++i) DS4_CPU_RELAX();
  while (job_done_.load() == 0u) {
    caller_sleeping_.fetch_add(1);
    if (job_done_.load() == 0u) block_while_equal(job_done_, 0u);
    caller_sleeping_.fetch_sub(1);
  }
  busy_.store(false);
}

}  // namespace ds4
