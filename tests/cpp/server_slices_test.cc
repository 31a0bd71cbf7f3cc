// Batch sizes: padding buckets, the cut of a batch into slices, and the slice
// count chosen from the measured cost of a row.
#include "runtime/server_slices.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace kaiwu {
namespace {

TEST(ServerSlices, PaddedRowsRoundsUpToABucketBelowMaxBatch) {
  const std::vector<int64_t> buckets = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256};
  for (int64_t rows = 1; rows <= 256; ++rows) {
    const int64_t want = *std::lower_bound(buckets.begin(), buckets.end(), rows);
    EXPECT_EQ(PaddedRows(rows, 256, Padding::kCoarse), want) << rows;
    EXPECT_EQ(PaddedRows(rows, 100, Padding::kCoarse), std::min<int64_t>(want, 100)) << rows;
    EXPECT_EQ(PaddedRows(rows, 256, Padding::kNone), rows);
  }
}

TEST(ServerSlices, PlanCutsRowsIntoEvenSlices) {
  SliceLayout l = SliceLayout::Plan(10, 3, 64, Padding::kNone);
  EXPECT_EQ(l.count, 3);
  EXPECT_EQ(l.size, 4);
  EXPECT_EQ(l.total(), 12);
  EXPECT_EQ(l.Rows(0), 4);
  EXPECT_EQ(l.Rows(2), 2);  // the last slice is short without padding
  l = SliceLayout::Plan(10, 3, 64, Padding::kCoarse);
  EXPECT_EQ(l.count, 3);
  EXPECT_EQ(l.Rows(2), 4);                 // padded
  l = SliceLayout::Plan(10, 1, 64, Padding::kCoarse);  // whole: one padded run
  EXPECT_EQ(l.count, 1);
  EXPECT_EQ(l.size, 12);
  l = SliceLayout::Plan(10, 1, 64, Padding::kNone);
  EXPECT_EQ(l.size, 10);
  l = SliceLayout::Plan(13, 4, 64, Padding::kCoarse);  // 4 slices of 4, the last with one real row
  EXPECT_EQ(l.size, 4);
  EXPECT_EQ(l.count, 4);
  l = SliceLayout::Plan(20, 4, 64, Padding::kCoarse);  // 5 rows pad to 8: 3 slices of 8 suffice
  EXPECT_EQ(l.size, 8);
  EXPECT_EQ(l.count, 3);
}

TEST(ServerSlices, FineBucketsPadUnderAnEighth) {
  // Every size to 16, then eight buckets an octave: 18, 20, ..., 32, 36, ...
  EXPECT_EQ(PaddedRows(16, 1024, Padding::kFine), 16);
  EXPECT_EQ(PaddedRows(17, 1024, Padding::kFine), 18);
  EXPECT_EQ(PaddedRows(32, 1024, Padding::kFine), 32);
  EXPECT_EQ(PaddedRows(33, 1024, Padding::kFine), 36);
  EXPECT_EQ(PaddedRows(37, 1024, Padding::kFine), 40);
  EXPECT_EQ(PaddedRows(65, 1024, Padding::kFine), 72);
  EXPECT_EQ(PaddedRows(1000, 1024, Padding::kFine), 1024);
  EXPECT_EQ(PaddedRows(37, 38, Padding::kFine), 38);  // capped at max_batch
  std::vector<int64_t> sizes;
  for (int64_t rows = 1; rows <= 1024; ++rows) {
    const int64_t b = PaddedRows(rows, 1024, Padding::kFine);
    EXPECT_GE(b, rows);
    EXPECT_LT(static_cast<double>(b - rows), rows / 8.0) << rows;
    EXPECT_EQ(PaddedRows(b, 1024, Padding::kFine), b) << rows;  // a bucket is its own bucket
    if (sizes.empty() || sizes.back() != b) sizes.push_back(b);
  }
  EXPECT_EQ(sizes.size(), 64u);  // one session's plan cache holds 64
}

TEST(ServerSlices, RandomPlansCoverEveryRowWithNoEmptySlice) {
  std::mt19937 rng(1);
  for (int i = 0; i < 3000; ++i) {
    const int max_batch = 1 + static_cast<int>(rng() % 256);
    const int64_t rows = 1 + rng() % max_batch;
    const int64_t k = 1 + rng() % 16;
    const Padding padding = static_cast<Padding>(rng() % 3);
    const bool pad = padding != Padding::kNone;
    const SliceLayout l = SliceLayout::Plan(rows, k, max_batch, padding);
    EXPECT_EQ(l.rows, rows);
    EXPECT_LE(l.count, k);
    EXPECT_GE(l.total(), rows);
    EXPECT_LT((l.count - 1) * l.size, rows);  // the last slice has a real row
    int64_t sum = 0;
    for (int64_t s = 0; s < l.count; ++s) sum += l.Rows(s);
    EXPECT_EQ(sum, pad ? l.total() : rows);
    if (pad) EXPECT_EQ(l.size, PaddedRows(l.size, max_batch, padding));
  }
}

TEST(ServerSlices, TunerKeepsEachSliceAboveMinSliceUs) {
  SliceTuner one(1, 30);
  EXPECT_EQ(one.Slices(100), 1);  // no slice pool
  SliceTuner t(4, 30);
  EXPECT_EQ(t.Slices(1), 1);
  EXPECT_EQ(t.Slices(3), 3);  // unmeasured: one slice per thread
  EXPECT_EQ(t.Slices(9), 4);
  t.Record(/*thread_us=*/20, /*rows=*/8);  // 2.5 us a row
  EXPECT_DOUBLE_EQ(t.row_us(), 2.5);
  EXPECT_EQ(t.Slices(8), 1);   // 20 us in all: one slice
  EXPECT_EQ(t.Slices(24), 2);  // 60 us: two slices of 30
  EXPECT_EQ(t.Slices(48), 4);
  EXPECT_EQ(t.Slices(480), 4);  // never more than threads
  t.Record(80, 8);              // 10 us a row, averaged in at 0.1
  EXPECT_DOUBLE_EQ(t.row_us(), 0.9 * 2.5 + 0.1 * 10);
  SliceTuner any(4, 0);
  any.Record(1, 100);
  EXPECT_EQ(any.Slices(8), 4);  // min_slice_us 0: one slice per thread
}

}  // namespace
}  // namespace kaiwu
