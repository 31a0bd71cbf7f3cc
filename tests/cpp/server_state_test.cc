// ActorStore: serials, one-request-at-a-time for recurrent actors, state kept
// between steps and dropped by Reset / Release, and the queued / running
// counts behind "every actor is waiting".
#include "runtime/server_state.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>

#include "server_test_util.h"

namespace kaiwu {
namespace {

// Two states: [2, batch, 3] float (outer 2, inner 3) and [batch, 5] int32.
std::vector<StateSpec> Specs() {
  std::vector<StateSpec> specs(2);
  specs[0].dtype = DType::kFloat32;
  specs[0].outer = 2;
  specs[0].inner = 3;
  specs[1].dtype = DType::kInt32;
  specs[1].outer = 1;
  specs[1].inner = 5;
  return specs;
}

void ExpectInputError(const std::function<void()>& fn, const std::string& part) {
  testing::ExpectErrorContaining(fn, StatusCode::kInput, part);
}

bool AllZero(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(t.data());
  for (size_t i = 0; i < t.bytes(); ++i)
    if (p[i]) return false;
  return true;
}

TEST(ServerState, ZeroStateHasOneZeroedTensorPerSpec) {
  const auto specs = Specs();
  auto st = ZeroState(specs, 4);
  ASSERT_EQ(st->size(), 2u);
  EXPECT_EQ((*st)[0].dtype(), DType::kFloat32);
  EXPECT_EQ((*st)[0].shape(), Shape({2, 4, 3}));
  EXPECT_EQ((*st)[1].dtype(), DType::kInt32);
  EXPECT_EQ((*st)[1].shape(), Shape({1, 4, 5}));
  EXPECT_TRUE(AllZero((*st)[0]));
  EXPECT_TRUE(AllZero((*st)[1]));
}

TEST(ServerState, SerialsTellAReconnectedActorFromTheReleasedOne) {
  const auto specs = Specs();
  ActorStore store(specs);
  const uint64_t s7 = store.Enqueue(7, 2);
  const uint64_t s9 = store.Enqueue(9, 1);
  EXPECT_NE(s7, s9);
  store.Start(7, s7, 2);
  store.Finish(7, s7);
  EXPECT_EQ(store.Enqueue(7, 2), s7);  // same actor, same serial
  EXPECT_TRUE(store.Release(7));
  EXPECT_FALSE(store.Release(7));
  const uint64_t again = store.Enqueue(7, 2);
  EXPECT_NE(again, s7);
  EXPECT_NE(again, s9);
  EXPECT_EQ(store.connected(), 2);
}

TEST(ServerState, RecurrentActorsStepOneRequestAtATimeWithTheirRowCount) {
  const auto specs = Specs();
  ActorStore store(specs);
  store.CheckSubmit(1, 3);  // unknown actor: fine
  const uint64_t s = store.Enqueue(1, 3);
  ExpectInputError([&] { store.CheckSubmit(1, 3); },
                   "actor 1 already has a request in flight; a recurrent actor steps one "
                   "request at a time");
  store.Start(1, s, 3);
  ExpectInputError([&] { store.CheckSubmit(1, 3); }, "already has a request in flight");
  store.Finish(1, s);
  store.CheckSubmit(1, 3);
  ExpectInputError([&] { store.CheckSubmit(1, 2); },
                   "actor 1 keeps state for 3 rows but sent 2; release (or reset) it before "
                   "changing its row count");
  store.Reset(1);  // no state kept: any row count
  store.CheckSubmit(1, 2);

  // Without recurrent state an actor may have many requests in flight.
  std::vector<StateSpec> none;
  ActorStore stateless(none);
  const uint64_t t = stateless.Enqueue(2, 1);
  stateless.Enqueue(2, 4);
  stateless.CheckSubmit(2, 5);
  EXPECT_EQ(stateless.Start(2, t, 1), nullptr);
}

TEST(ServerState, StateIsKeptBetweenStepsAndDroppedByResetAndRelease) {
  const auto specs = Specs();
  ActorStore store(specs);
  std::mt19937 rng(11);
  uint64_t s = store.Enqueue(5, 2);
  auto st = store.Start(5, s, 2);
  ASSERT_TRUE(st);
  EXPECT_TRUE(AllZero((*st)[0]));
  // The batch writes the next state into the actor's tensors.
  float* f = (*st)[0].As<float>();
  std::vector<float> want(12);
  for (int i = 0; i < 12; ++i) f[i] = want[i] = std::uniform_real_distribution<float>(-1, 1)(rng);
  store.Finish(5, s);

  store.Enqueue(5, 2);
  auto next = store.Start(5, s, 2);
  EXPECT_EQ(next, st);
  for (int i = 0; i < 12; ++i) EXPECT_EQ((*next)[0].As<float>()[i], want[i]);
  store.Finish(5, s);

  store.Reset(5);
  store.Enqueue(5, 2);
  auto fresh = store.Start(5, s, 2);
  EXPECT_NE(fresh, st);
  EXPECT_TRUE(AllZero((*fresh)[0]));
  store.Finish(5, s);

  // Released while queued: the request still runs, from zeros of its own.
  store.Enqueue(5, 2);
  EXPECT_TRUE(store.Release(5));
  auto orphan = store.Start(5, s, 2);
  ASSERT_TRUE(orphan);
  EXPECT_NE(orphan, fresh);
  EXPECT_TRUE(AllZero((*orphan)[1]));
  EXPECT_EQ(store.connected(), 0);
  EXPECT_EQ(store.queued_actors(), 0);
  EXPECT_EQ(store.running_actors(), 0);
}

TEST(ServerState, AllWaitingWhenNoConnectedActorIsIdle) {
  const auto specs = Specs();
  ActorStore store(specs);
  EXPECT_FALSE(store.AllWaiting());  // nobody queued
  const uint64_t a = store.Enqueue(1, 1);
  EXPECT_TRUE(store.AllWaiting());
  const uint64_t b = store.Enqueue(2, 1);
  store.Start(1, a, 1);  // 1 running, 2 queued
  EXPECT_EQ(store.queued_actors(), 1);
  EXPECT_EQ(store.running_actors(), 1);
  EXPECT_TRUE(store.AllWaiting());
  store.Start(2, b, 1);  // both running, none queued
  EXPECT_FALSE(store.AllWaiting());
  store.Finish(2, b);
  store.Enqueue(2, 1);
  EXPECT_TRUE(store.AllWaiting());
  store.Finish(1, a);  // 1 idle now
  EXPECT_FALSE(store.AllWaiting());
  EXPECT_TRUE(store.Release(1));  // fewer actors: 2 is all there is
  EXPECT_TRUE(store.AllWaiting());
  store.DropQueued();
  EXPECT_EQ(store.queued_actors(), 0);
  EXPECT_FALSE(store.AllWaiting());
  store.CheckSubmit(2, 1);  // nothing in flight any more
}

}  // namespace
}  // namespace kaiwu
