// BatchQueue: one FIFO per (weights, row shapes), the wake-up rule of Push,
// and when PopReady lets a queue run (full, everyone waiting, deadline).
#include "runtime/server_queue.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "runtime/weight_set.h"

namespace kaiwu {
namespace {

using Clock = BatchQueue::Clock;
using std::chrono::microseconds;

// Queues tell weight sets apart by address only.
std::shared_ptr<const WeightSet> FakeWeights(int id) {
  static const std::vector<std::shared_ptr<const WeightSet>> sets = {
      std::make_shared<WeightSet>(), std::make_shared<WeightSet>(), std::make_shared<WeightSet>()};
  return sets[id];
}

std::shared_ptr<ServerRequest> Req(int64_t actor, int64_t rows, Clock::time_point at,
                                   int weights = 0) {
  auto r = std::make_shared<ServerRequest>();
  r->actor = actor;
  r->rows = rows;
  r->enqueued = at;
  r->weights = FakeWeights(weights);
  return r;
}

const std::vector<int64_t> kObs = {3, -1}, kOther = {4, -1};

TEST(ServerQueue, PushWakesOnFirstRequestOfAQueueAndOnAFullBatch) {
  BatchQueue q(/*max_batch=*/8, /*max_wait_us=*/100, /*max_queue_rows=*/64);
  const auto t = Clock::now();
  EXPECT_TRUE(q.Push(Req(1, 3, t), kObs));     // new deadline
  EXPECT_FALSE(q.Push(Req(2, 3, t), kObs));    // 6 rows: nothing changes
  EXPECT_TRUE(q.Push(Req(3, 1, t), kOther));   // other row shapes: own queue
  EXPECT_TRUE(q.Push(Req(4, 1, t, 1), kObs));  // other weights: own queue
  EXPECT_TRUE(q.Push(Req(5, 2, t), kObs));     // 8 rows: a full batch
  EXPECT_EQ(q.queued_rows(), 10);
  EXPECT_EQ(q.queued_requests(), 5);
}

TEST(ServerQueue, HasSpaceCountsQueuedRows) {
  BatchQueue q(4, 100, 10);
  const auto t = Clock::now();
  EXPECT_TRUE(q.HasSpace(10));
  EXPECT_FALSE(q.HasSpace(11));
  q.Push(Req(1, 4, t), kObs);
  q.Push(Req(2, 3, t), kObs);
  EXPECT_TRUE(q.HasSpace(3));
  EXPECT_FALSE(q.HasSpace(4));
  Requests batch;
  Clock::time_point deadline;
  ASSERT_TRUE(q.PopReady(t, t, /*all_waiting=*/true, &batch, &deadline));
  EXPECT_EQ(q.queued_rows(), 3);
  EXPECT_TRUE(q.HasSpace(7));
}

TEST(ServerQueue, WaitsUntilTheDeadlineOfTheFirstRequest) {
  BatchQueue q(8, 500, 64);
  const auto t = Clock::now();
  q.Push(Req(1, 2, t), kObs);
  q.Push(Req(2, 2, t + microseconds(300)), kObs);
  Requests batch;
  Clock::time_point deadline;
  EXPECT_FALSE(q.PopReady(t + microseconds(499), t, false, &batch, &deadline));
  EXPECT_EQ(deadline, t + microseconds(500));
  EXPECT_TRUE(batch.empty());
  // A worker that came free later gives the queue max_wait_us from then.
  EXPECT_FALSE(q.PopReady(t + microseconds(600), t + microseconds(200), false, &batch, &deadline));
  EXPECT_EQ(deadline, t + microseconds(700));
  ASSERT_TRUE(q.PopReady(t + microseconds(500), t, false, &batch, &deadline));
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0]->actor, 1);
  EXPECT_EQ(batch[1]->actor, 2);
  EXPECT_EQ(q.queued_requests(), 0);
  batch.clear();
  EXPECT_FALSE(q.PopReady(t, t, true, &batch, &deadline));  // nothing queued
  EXPECT_EQ(deadline, Clock::time_point::max());
}

TEST(ServerQueue, FullBatchOrEveryoneWaitingRunsAtOnce) {
  BatchQueue q(4, 1000000, 64);
  const auto t = Clock::now();
  Requests batch;
  Clock::time_point deadline;
  q.Push(Req(1, 1, t), kObs);
  EXPECT_FALSE(q.PopReady(t, t, false, &batch, &deadline));
  EXPECT_TRUE(q.PopReady(t, t, true, &batch, &deadline));
  EXPECT_EQ(batch.size(), 1u);
  batch.clear();
  q.Push(Req(2, 3, t), kObs);
  q.Push(Req(3, 2, t), kObs);  // 5 rows >= max_batch 4: ready; 3 rows go, 2 stay
  ASSERT_TRUE(q.PopReady(t, t, false, &batch, &deadline));
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0]->actor, 2);
  EXPECT_EQ(q.queued_rows(), 2);
  batch.clear();
  EXPECT_FALSE(q.PopReady(t, t, false, &batch, &deadline));
}

TEST(ServerQueue, TheReadyQueueWithTheOldestRequestGoesFirst) {
  BatchQueue q(4, 100, 64);
  const auto t = Clock::now();
  q.Push(Req(1, 1, t + microseconds(50)), kObs);
  q.Push(Req(2, 1, t + microseconds(10)), kOther);
  q.Push(Req(3, 1, t + microseconds(30), 1), kObs);
  q.Push(Req(4, 1, t + microseconds(60)), kObs);
  Requests batch;
  Clock::time_point deadline;
  // At t+135 the kOther queue (due t+110) and the weights-1 queue (due t+130)
  // are ready, the first queue (due t+150) is not; kOther's request is older.
  ASSERT_TRUE(q.PopReady(t + microseconds(135), t, false, &batch, &deadline));
  ASSERT_EQ(batch.size(), 1u);
  EXPECT_EQ(batch[0]->actor, 2);
  batch.clear();
  ASSERT_TRUE(q.PopReady(t + microseconds(135), t, false, &batch, &deadline));
  EXPECT_EQ(batch[0]->actor, 3);
  batch.clear();
  EXPECT_FALSE(q.PopReady(t + microseconds(135), t, false, &batch, &deadline));
  EXPECT_EQ(deadline, t + microseconds(150));
  ASSERT_TRUE(q.PopReady(t + microseconds(135), t, true, &batch, &deadline));
  ASSERT_EQ(batch.size(), 2u);
  EXPECT_EQ(batch[0]->actor, 1);
  EXPECT_EQ(batch[1]->actor, 4);
}

TEST(ServerQueue, RandomRequestsLeaveInOrderInBatchesOfAtMostMaxBatch) {
  std::mt19937 rng(7);
  const int kMaxBatch = 16;
  BatchQueue q(kMaxBatch, 0, 1 << 20);
  const auto t = Clock::now();
  std::map<int, std::vector<int64_t>> pushed;  // by queue (weights id), actor ids in order
  int64_t rows = 0;
  for (int64_t a = 0; a < 300; ++a) {
    const int w = static_cast<int>(rng() % 3);
    const int64_t n = 1 + rng() % kMaxBatch;
    q.Push(Req(a, n, t + microseconds(a), w), kObs);
    pushed[w].push_back(a);
    rows += n;
  }
  EXPECT_EQ(q.queued_rows(), rows);
  std::map<int, std::vector<int64_t>> popped;
  std::map<const WeightSet*, int> id;
  for (int w = 0; w < 3; ++w) id[FakeWeights(w).get()] = w;
  Requests batch;
  Clock::time_point deadline;
  while (q.PopReady(t + microseconds(1000), t, false, &batch, &deadline)) {
    int64_t n = 0;
    for (const auto& r : batch) {
      n += r->rows;
      EXPECT_EQ(r->weights, batch[0]->weights);
      popped[id[r->weights.get()]].push_back(r->actor);
    }
    EXPECT_LE(n, kMaxBatch);
    EXPECT_GE(n, 1);
    batch.clear();
  }
  EXPECT_EQ(popped, pushed);
  EXPECT_EQ(q.queued_rows(), 0);
}

TEST(ServerQueue, TakeAllEmptiesEveryQueue) {
  BatchQueue q(8, 100, 64);
  const auto t = Clock::now();
  q.Push(Req(1, 2, t), kObs);
  q.Push(Req(2, 3, t), kOther);
  q.Push(Req(3, 1, t), kObs);
  Requests all = q.TakeAll();
  EXPECT_EQ(all.size(), 3u);
  EXPECT_EQ(q.queued_rows(), 0);
  EXPECT_EQ(q.queued_requests(), 0);
  Requests batch;
  Clock::time_point deadline;
  EXPECT_FALSE(q.PopReady(t + microseconds(1000), t, true, &batch, &deadline));
}

}  // namespace
}  // namespace kaiwu
