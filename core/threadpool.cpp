// core/threadpool.cpp — persistent worker pool (see threadpool.h for the contract).
//
// Slot protocol (all atomics sequentially consistent, so the reasoning below is about one
// total order):
//   caller: busy_ := true; generation_ := odd (slot being written); wait inside_ == 0;
//           write the slot; next_chunk_ := 0; chunks_done_ := 0; generation_ := even (publish);
//           claim chunks like a helper; wait chunks_done_ == n_chunks_; busy_ := false.
//   helper: wait for generation_ to change (or closed_); inside_ += 1; g := generation_;
//           if g is odd: inside_ -= 1 (the slot is being written; wait for the next change);
//           else claim chunks of job g until none is left; inside_ -= 1.
// A helper that increments inside_ after the caller saw inside_ == 0 must then read the odd
// (or a later, fully published) generation, so no helper ever reads a half-written slot. A
// helper that wakes late simply finds every chunk claimed: the caller never waits for a
// descheduled helper, only for chunks (this machine is often oversubscribed).
//
// run_split publishes on the pool's own slot a job of n_threads() chunks: chunk 0 runs task a
// as the caller of part_[0], chunks [1, n_a) serve part_[0], chunk n_a runs task b as the
// caller of part_[1], the rest serve part_[1]. A serving chunk ends when its task closes the
// part, so the split job ends only after both tasks ended and every lent thread left its part
// (the parts can be reopened by the next split). Whichever thread claims a chunk runs it; no
// deadlock: at most n − 2 threads can block in serve(), so two keep claiming until both task
// chunks have run. A task's thread redirects its parallel_for calls to its part through a
// thread-local (only while the task runs), so the ops inside it need no pool argument.
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

std::atomic<uint64_t> g_published_jobs{0};

void wake_all(std::atomic<uint32_t>& a) {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&a), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
#else
  a.notify_all();
#endif
}

}  // namespace

uint64_t ThreadPool::published_jobs() { return g_published_jobs.load(std::memory_order_relaxed); }

ThreadPool::ThreadPool(int n_threads) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::thread::hardware_concurrency());
  if (n_threads <= 0) n_threads = 1;
  n_threads_ = n_threads;
  workers_.reserve(static_cast<size_t>(n_threads_ - 1));
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { main_.serve(i); });
}

ThreadPool::~ThreadPool() {
  main_.close();
  for (auto& t : workers_) t.join();
}

void ThreadPool::Slot::work_chunks() {
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

void ThreadPool::Slot::serve(int index) {
  uint32_t seen = generation_.load();
  // A helper lent to a task's part may arrive after the task published a job: join it now
  // (finding every chunk claimed is harmless).
  bool look = true;
  for (;;) {
    // closed_ is checked after `seen` was read: a close() that ran before that read is seen
    // here, one that runs after it changes generation_ and ends the wait below.
    if (closed_.load()) return;
    bool changed = look;
    look = false;
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
    if (closed_.load()) return;
    // A published job with too few chunks for this helper: skip it without touching the
    // slot's shared counters (on 16 cores, 15 helpers racing for the 4 chunks of a small
    // matvec cost more than the matvec). helpers_ is stored before the publish of job `now`,
    // so it is read here as of that job or a newer one; a newer job's value can only make
    // this helper skip a job it might have helped (the caller and the others still run every
    // chunk) or take the normal path below, which follows the protocol.
    const uint32_t now = generation_.load();
    if ((now & 1u) == 0u && index > helpers_.load(std::memory_order_relaxed)) {
      seen = now;
      continue;
    }
    inside_.fetch_add(1);
    const uint32_t g = generation_.load();
    if ((g & 1u) == 0u) work_chunks();
    inside_.fetch_sub(1);
    // Odd g: the slot is being written; the publish that follows changes it again.
    seen = g;
  }
}

void ThreadPool::Slot::close() {
  closed_.store(true);
  generation_.fetch_add(2);  // stays even; wakes and releases every waiting helper
  wake_all(generation_);
}

bool ThreadPool::Slot::run(int64_t n_items, int64_t grain, Trampoline tramp, void* ctx) {
  bool expected = false;
  if (!busy_.compare_exchange_strong(expected, true)) return false;
  g_published_jobs.fetch_add(1, std::memory_order_relaxed);
  const uint32_t g = generation_.load();  // even: no job is being written (busy_ held)
  generation_.store(g + 1u);
  while (inside_.load() != 0) DS4_CPU_RELAX();
  tramp_ = tramp;
  ctx_ = ctx;
  n_items_ = n_items;
  grain_ = grain;
  n_chunks_ = (n_items + grain - 1) / grain;
  helpers_.store(n_chunks_ - 1, std::memory_order_relaxed);
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
  return true;
}

namespace {
// The part of the pool a run_split task runs on (its thread only, while the task runs).
thread_local const ThreadPool* tl_split_pool = nullptr;
thread_local void* tl_split_slot = nullptr;
}  // namespace

void ThreadPool::run(int64_t n_items, int64_t grain, Trampoline tramp, void* ctx) {
  Slot* slot = tl_split_pool == this ? static_cast<Slot*>(tl_split_slot) : &main_;
  // Re-entrant or concurrent use: run on this thread (results do not depend on it).
  if (!slot->run(n_items, grain, tramp, ctx)) tramp(ctx, 0, n_items);
}

void ThreadPool::split(int n_a, Call a, void* a_ctx, Call b, void* b_ctx) {
  if (n_threads_ < 2 || tl_split_pool != nullptr) {
    a(a_ctx);
    b(b_ctx);
    return;
  }
  n_a = n_a < 1 ? 1 : (n_a > n_threads_ - 1 ? n_threads_ - 1 : n_a);
  struct Job {
    ThreadPool* pool;
    int n_a;
    Call call[2];
    void* ctx[2];
  } job{this, n_a, {a, b}, {a_ctx, b_ctx}};
  part_[0].open();
  part_[1].open();
  auto chunk = [](void* c, int64_t begin, int64_t end) {
    auto* j = static_cast<Job*>(c);
    for (int64_t i = begin; i < end; ++i) {
      const int part = i < j->n_a ? 0 : 1;
      const int64_t first = part == 0 ? 0 : j->n_a;
      const int64_t size = part == 0 ? j->n_a : j->pool->n_threads_ - j->n_a;
      Slot& slot = j->pool->part_[part];
      if (i == first) {
        // A part of one thread has no helpers: its parallel_for calls stay inline.
        if (size > 1) {
          tl_split_pool = j->pool;
          tl_split_slot = &slot;
        }
        j->call[part](j->ctx[part]);
        tl_split_pool = nullptr;
        tl_split_slot = nullptr;
        slot.close();
      } else {
        slot.serve(static_cast<int>(i - first));
      }
    }
  };
  if (!main_.run(n_threads_, 1, chunk, &job)) {
    a(a_ctx);
    b(b_ctx);
  }
}

}  // namespace ds4
