// tests/kernels/threadpool_test.cpp — core/threadpool: coverage, chunking, re-entrancy.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "core/threadpool.h"

namespace ds4 {
namespace {

// Every item is visited exactly once and every chunk starts on a grain boundary.
TEST(ThreadPool, CoversEveryItemOnceWithGrainAlignedChunks) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.n_threads(), threads);
    for (int64_t n : {0, 1, 2, 7, 64, 1000, 4097}) {
      for (int64_t grain : {1, 3, 16, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> bad_chunks{0};
        for (int rep = 0; rep < 3; ++rep) {
          pool.parallel_for(n, grain, [&](int64_t b, int64_t e) {
            if (threads > 1 && n > grain && (b % grain != 0 || (e != n && e - b != grain))) ++bad_chunks;
            for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
          });
        }
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 3) << "n=" << n << " grain=" << grain;
        EXPECT_EQ(bad_chunks.load(), 0);
      }
    }
  }
}

TEST(ThreadPool, SingleThreadPoolIsOnePlainCall) {
  ThreadPool pool(1);
  int calls = 0;
  int64_t seen_b = -1, seen_e = -1;
  pool.parallel_for(100, 7, [&](int64_t b, int64_t e) {
    ++calls;
    seen_b = b;
    seen_e = e;
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen_b, 0);
  EXPECT_EQ(seen_e, 100);
}

TEST(ThreadPool, UsesWorkerThreadsForLargeJobs) {
  ThreadPool pool(3);
  std::atomic<int> on_other{0};
  const auto caller = std::this_thread::get_id();
  // Enough chunks that each spins a little; some must land on a worker (they spin-wait).
  for (int rep = 0; rep < 50 && on_other.load() == 0; ++rep) {
    pool.parallel_for(64, 1, [&](int64_t, int64_t) {
      volatile double s = 0;
      for (int i = 0; i < 20000; ++i) s = s + i;
      if (std::this_thread::get_id() != caller) ++on_other;
    });
  }
  EXPECT_GT(on_other.load(), 0);
}

TEST(ThreadPool, NestedAndConcurrentCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  pool.parallel_for(8, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallel_for(10, 1, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
  });
  EXPECT_EQ(total.load(), 80);

  std::atomic<int64_t> sum{0};
  auto job = [&] {
    for (int rep = 0; rep < 200; ++rep)
      pool.parallel_for(33, 4, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) sum += i;
      });
  };
  std::thread t1(job), t2(job);
  t1.join();
  t2.join();
  EXPECT_EQ(sum.load(), 2 * 200 * (32 * 33 / 2));
}

TEST(ThreadPool, NullPoolHelperRunsInline) {
  int calls = 0;
  parallel_for(nullptr, 10, 2, [&](int64_t b, int64_t e) {
    ++calls;
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 10);
  });
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace ds4
