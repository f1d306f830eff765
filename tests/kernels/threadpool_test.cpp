// tests/kernels/threadpool_test.cpp — core/threadpool: coverage, chunking, re-entrancy.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
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

// run_split: both tasks run at once (each waits for the other to start), each task's
// parallel_for covers its items with the usual chunks, and while both tasks run their jobs run
// on disjoint thread sets no larger than the requested split (a thread whose task ended may
// then help the other part).
TEST(ThreadPool, RunSplitRunsTasksConcurrentlyOnDisjointParts) {
  for (int threads : {2, 3, 4, 6}) {
    ThreadPool pool(threads);
    bool concurrent = false, covered = false, disjoint = false, sized = false;
    // A lent worker may be descheduled on a loaded machine: a few attempts, one must show it.
    for (int attempt = 0; attempt < 20 && !(concurrent && covered && disjoint && sized); ++attempt) {
      covered = disjoint = true;
      std::atomic<bool> done[2] = {false, false};
      std::atomic<int> started{0};
      std::vector<std::thread::id> ids[2];
      std::mutex mu;
      bool met[2] = {false, false};
      std::vector<std::atomic<int>> hits[2];
      for (auto& h : hits) h = std::vector<std::atomic<int>>(1000);
      auto task = [&](int k) {
        started.fetch_add(1);
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
        while (started.load() < 2 && std::chrono::steady_clock::now() < until) {
        }
        met[k] = started.load() == 2;
        for (int rep = 0; rep < 20; ++rep) {
          pool.parallel_for(1000, 7, [&](int64_t b, int64_t e) {
            if (b % 7 != 0 || (e != 1000 && e - b != 7)) covered = false;
            for (int64_t i = b; i < e; ++i) hits[k][static_cast<size_t>(i)]++;
            volatile double s = 0;
            for (int i = 0; i < 2000; ++i) s = s + i;
            std::lock_guard<std::mutex> lock(mu);
            if (!done[1 - k].load() &&
                std::find(ids[k].begin(), ids[k].end(), std::this_thread::get_id()) == ids[k].end())
              ids[k].push_back(std::this_thread::get_id());
          });
        }
        done[k].store(true);
      };
      const int n_a = threads / 2;
      pool.run_split(n_a, [&] { task(0); }, [&] { task(1); });
      concurrent = met[0] && met[1];
      for (int k = 0; k < 2; ++k)
        for (auto& h : hits[k]) covered = covered && h.load() == 20;
      for (auto id : ids[0]) disjoint = disjoint && std::find(ids[1].begin(), ids[1].end(), id) == ids[1].end();
      sized = static_cast<int>(ids[0].size()) <= n_a && static_cast<int>(ids[1].size()) <= threads - n_a &&
              (threads < 4 || ids[0].size() + ids[1].size() > 2);
    }
    EXPECT_TRUE(concurrent) << threads << " threads";
    EXPECT_TRUE(covered) << threads << " threads";
    EXPECT_TRUE(disjoint) << threads << " threads";
    EXPECT_TRUE(sized) << threads << " threads";
  }
}

// A pool of one, and a split issued from inside a task, run the tasks one after the other.
TEST(ThreadPool, RunSplitFallsBackToSequential) {
  ThreadPool one(1);
  std::vector<int> order;
  one.run_split(1, [&] { order.push_back(0); }, [&] { order.push_back(1); });
  EXPECT_EQ(order, (std::vector<int>{0, 1}));
  ThreadPool pool(4);
  std::vector<int> inner;
  pool.run_split(2, [&] { pool.run_split(1, [&] { inner.push_back(0); }, [&] { inner.push_back(1); }); },
                 [&] {});
  EXPECT_EQ(inner, (std::vector<int>{0, 1}));
  // The pool is whole again afterwards.
  std::atomic<int64_t> n{0};
  pool.parallel_for(100, 3, [&](int64_t b, int64_t e) { n += e - b; });
  EXPECT_EQ(n.load(), 100);
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
