// ThreadPool: every index runs exactly once, from one caller or many at once,
// nested calls finish, and a call admits no more workers than its chunks need
// (a counter, not a timing: a two-chunk op on a large pool wakes one worker),
// and a call allocates nothing on the caller, whatever its lambda captures.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <thread>
#include <vector>

#include "alloc_counter.h"

namespace kaiwu {
namespace {

// Counts how often each index of [0, n) was visited.
std::vector<int> Visits(ThreadPool& pool, int64_t n, double cost) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
  pool.ParallelFor(n, cost, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
  });
  std::vector<int> out;
  for (auto& h : hits) out.push_back(h.load());
  return out;
}

TEST(ThreadPool, EveryIndexOnceAtAnySize) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 3, 7, 64, 1000, 4097}) {
      for (double cost : {1.0, 1e4, 1e6}) {
        std::vector<int> v = Visits(pool, n, cost);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(v[static_cast<size_t>(i)], 1) << "threads " << threads << " n " << n << " i " << i;
      }
    }
  }
}

TEST(ThreadPool, ParallelForAllocatesNothing) {
  // Captures past std::function's two-pointer buffer: it would allocate each call.
  ThreadPool pool(3);
  std::atomic<int64_t> sum{0};
  const std::array<int64_t, 6> w = {1, 2, 3, 4, 5, 6};
  const int64_t bias = 7;
  const auto body = [&sum, w, bias](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum.fetch_add(w[static_cast<size_t>(i % 6)] + bias);
  };
  pool.ParallelFor(600, 1e6, body);  // the pool's first job (its queue takes its capacity)
  const int64_t before = ThreadAllocations();
  for (int call = 0; call < 200; ++call) pool.ParallelFor(600, 1e6, body);
  EXPECT_EQ(ThreadAllocations() - before, 0);
  EXPECT_EQ(sum.load(), 201 * 100 * (21 + 6 * 7));
  // The counter counts: a vector's buffer is one allocation.
  const int64_t mark = ThreadAllocations();
  std::vector<int64_t> one(8);
  EXPECT_EQ(ThreadAllocations() - mark, 1);
}

TEST(ThreadPool, WorkersJoinedAreBoundedByChunks) {
  ThreadPool pool(8);
  // Cost 1e6 per item: every item is its own chunk.
  for (int64_t n : {2, 3, 5}) {
    for (int rep = 0; rep < 50; ++rep) {
      int64_t before = pool.worker_joins();
      std::vector<int> v = Visits(pool, n, 1e6);
      for (int hits : v) ASSERT_EQ(hits, 1);
      EXPECT_LE(pool.worker_joins() - before, n - 1) << "n " << n;
    }
  }
  // Small work on a large pool: only the helpers that pay for themselves
  // (64 items of 2000 units: sqrt(128000 / 20000) - 1, so one).
  for (int rep = 0; rep < 50; ++rep) {
    int64_t before_small = pool.worker_joins();
    std::vector<int> v = Visits(pool, 64, 2000.0);
    for (int hits : v) ASSERT_EQ(hits, 1);
    EXPECT_LE(pool.worker_joins() - before_small, 1);
  }
  // Work below the threshold never leaves the caller.
  int64_t before = pool.worker_joins();
  for (int rep = 0; rep < 50; ++rep) Visits(pool, 100, 1.0);
  EXPECT_EQ(pool.worker_joins(), before);
}

TEST(ThreadPool, ManyCallersAndNestedCalls) {
  ThreadPool pool(4);
  constexpr int kCallers = 6;
  constexpr int64_t kN = 257;
  std::vector<std::thread> callers;
  std::atomic<int> bad{0};
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 200; ++rep) {
        std::vector<std::atomic<int>> hits(kN);
        pool.ParallelFor(kN, 1e5, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) {
            // A nested call from inside a chunk (a kernel calling a kernel).
            std::atomic<int> inner{0};
            pool.ParallelFor(3, 1e6, [&](int64_t ib, int64_t ie) {
              inner.fetch_add(static_cast<int>(ie - ib));
            });
            if (inner.load() != 3) bad.fetch_add(1);
            hits[static_cast<size_t>(i)].fetch_add(1);
          }
        });
        for (auto& h : hits)
          if (h.load() != 1) bad.fetch_add(1);
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace kaiwu
