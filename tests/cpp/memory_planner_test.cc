#include "plan/memory_planner.h"

#include <gtest/gtest.h>

#include <random>

namespace kaiwu {
namespace {

TEST(MemoryPlanner, ChainReusesFreedBuffer) {
  // a -> b -> c: a dies when b is written... a is read at step 1, c written at step 2.
  std::vector<BufferRequest> r = {{100, 0, 1}, {200, 1, 2}, {100, 2, 3}};
  MemoryPlan p = PlanMemory(r);
  // Largest first: b at 0 (256 bytes aligned); a overlaps b in time -> 256;
  // c overlaps b but not a -> reuses a's slot at 256.
  EXPECT_EQ(p.offsets, (std::vector<size_t>{256, 0, 256}));
  EXPECT_EQ(p.total_bytes, 384u);
}

TEST(MemoryPlanner, DisjointLifetimesShareOffsetZero) {
  std::vector<BufferRequest> r = {{64, 0, 0}, {64, 1, 1}, {64, 2, 2}};
  MemoryPlan p = PlanMemory(r);
  EXPECT_EQ(p.offsets, (std::vector<size_t>{0, 0, 0}));
  EXPECT_EQ(p.total_bytes, 64u);
}

TEST(MemoryPlanner, FillsGapBetweenLiveBuffers) {
  // x [0,64) and z [128,192) live throughout; y (50 bytes) fits in the gap at 64.
  std::vector<BufferRequest> r = {{64, 0, 5}, {64, 0, 5}, {64, 0, 5}, {50, 2, 3}};
  r[1].last_use = 1;  // the middle one dies early, leaving a gap
  MemoryPlan p = PlanMemory(r);
  EXPECT_EQ(p.offsets[0], 0u);
  EXPECT_EQ(p.offsets[1], 64u);
  EXPECT_EQ(p.offsets[2], 128u);
  EXPECT_EQ(p.offsets[3], 64u);
  EXPECT_EQ(p.total_bytes, 192u);
}

TEST(MemoryPlanner, RandomPlansNeverOverlapLiveBuffers) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<BufferRequest> r(30);
    for (auto& b : r) {
      b.bytes = rng() % 5000;
      b.first_use = rng() % 20;
      b.last_use = b.first_use + rng() % 6;
    }
    MemoryPlan p = PlanMemory(r);
    for (size_t i = 0; i < r.size(); ++i) {
      EXPECT_EQ(p.offsets[i] % 64, 0u);
      EXPECT_LE(p.offsets[i] + r[i].bytes, p.total_bytes);
      for (size_t j = i + 1; j < r.size(); ++j) {
        bool time = r[i].first_use <= r[j].last_use && r[j].first_use <= r[i].last_use;
        bool space = p.offsets[i] < p.offsets[j] + r[j].bytes && p.offsets[j] < p.offsets[i] + r[i].bytes;
        EXPECT_FALSE(time && space && r[i].bytes && r[j].bytes) << i << " " << j;
      }
    }
  }
}

}  // namespace
}  // namespace kaiwu
