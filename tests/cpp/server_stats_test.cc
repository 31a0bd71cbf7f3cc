// StatsRecorder: counters, batch-size histogram, mean run time, wait
// percentiles over the ring of recent waits, and reset.
#include "runtime/server_stats.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace kaiwu {
namespace {

using Clock = StatsRecorder::Clock;

// The percentile the recorder reports: the element at round(p * (n - 1)).
double Percentile(std::vector<float> w, double p) {
  std::sort(w.begin(), w.end());
  return w[static_cast<size_t>(p * (w.size() - 1) + 0.5)];
}

TEST(ServerStats, CountsBatchesRequestsAndWaitPercentiles) {
  StatsRecorder st(/*max_batch=*/16);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> wait(0.0f, 2000.0f);
  std::vector<float> waits;
  std::vector<uint64_t> hist(17, 0);
  uint64_t requests = 0, rows = 0, failed = 0, sliced = 0;
  double run_us = 0;
  for (int b = 0; b < 200; ++b) {
    int64_t batch_rows = 0;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < n; ++i) {
      const int64_t r = 1 + rng() % 4;
      const bool bad = rng() % 10 == 0;
      waits.push_back(wait(rng));
      st.RecordRequest(r, bad, waits.back());
      ++requests;
      rows += r;
      failed += bad;
      batch_rows += r;
    }
    const double us = std::uniform_real_distribution<double>(10, 500)(rng);
    const bool s = rng() % 3 == 0;
    st.RecordBatch(batch_rows, us, s);
    run_us += us;
    sliced += s;
    ++hist[batch_rows];
  }
  ServerStats got;
  got.connected = 42;  // fields it does not own stay as they are
  st.Fill(Clock::now(), &got);
  EXPECT_EQ(got.connected, 42);
  EXPECT_EQ(got.requests, requests);
  EXPECT_EQ(got.rows, rows);
  EXPECT_EQ(got.failed, failed);
  EXPECT_EQ(got.batches, 200u);
  EXPECT_EQ(got.sliced_batches, sliced);
  EXPECT_EQ(got.batch_hist, hist);
  EXPECT_NEAR(got.run_mean_us, run_us / 200, 1e-9);
  EXPECT_EQ(got.wait_p50_us, Percentile(waits, 0.5));
  EXPECT_EQ(got.wait_p99_us, Percentile(waits, 0.99));
  EXPECT_GT(got.wait_p99_us, got.wait_p50_us);

  const auto t0 = Clock::now();
  st.Reset(t0);
  ServerStats zero;
  st.Fill(t0 + std::chrono::milliseconds(250), &zero);
  EXPECT_DOUBLE_EQ(zero.elapsed_s, 0.25);
  EXPECT_EQ(zero.requests, 0u);
  EXPECT_EQ(zero.rows, 0u);
  EXPECT_EQ(zero.batches, 0u);
  EXPECT_EQ(zero.batch_hist, std::vector<uint64_t>(17, 0));
  EXPECT_EQ(zero.wait_p99_us, 0.0);
  EXPECT_EQ(zero.run_mean_us, 0.0);
  st.RecordRequest(2, false, 7.5f);
  st.Fill(t0, &zero);
  EXPECT_EQ(zero.wait_p50_us, 7.5);  // the ring starts over
  EXPECT_EQ(zero.wait_p99_us, 7.5);
}

TEST(ServerStats, BatchesLargerThanMaxBatchCountInTheLastBin) {
  StatsRecorder st(4);
  st.RecordBatch(4, 1, false);
  st.RecordBatch(9, 1, false);
  st.RecordBatch(1, 1, true);
  ServerStats s;
  st.Fill(Clock::now(), &s);
  EXPECT_EQ(s.batch_hist, (std::vector<uint64_t>{0, 1, 0, 0, 2}));
}

TEST(ServerStats, StageTimesAreMeansPerBatch) {
  StatsRecorder st(8);
  st.RecordBatch(4, 100, false);
  st.RecordStages(10, 70, 5, 4000, true);
  st.RecordFinish(8);
  st.RecordBatch(2, 60, false);
  st.RecordStages(30, 20, 3, 2000, false);
  st.RecordFinish(2);
  ServerStats s;
  st.Fill(Clock::now(), &s);
  EXPECT_DOUBLE_EQ(s.gather_mean_us, 20);
  EXPECT_DOUBLE_EQ(s.session_mean_us, 45);
  EXPECT_DOUBLE_EQ(s.scatter_mean_us, 4);
  EXPECT_DOUBLE_EQ(s.finish_mean_us, 5);
  EXPECT_EQ(s.gathered_bytes, 6000u);
  EXPECT_EQ(s.parallel_gathers, 1u);
  st.Reset(Clock::now());
  ServerStats z;
  st.Fill(Clock::now(), &z);
  EXPECT_EQ(z.gather_mean_us, 0.0);
  EXPECT_EQ(z.finish_mean_us, 0.0);
  EXPECT_EQ(z.gathered_bytes, 0u);
  EXPECT_EQ(z.parallel_gathers, 0u);
}

TEST(ServerStats, WaitPercentilesCoverOnlyTheMostRecentWaits) {
  StatsRecorder st(8);
  std::mt19937 rng(9);
  std::vector<float> ring;
  for (size_t i = 0; i < StatsRecorder::kWaitRing; ++i) {
    ring.push_back(1000.0f + static_cast<float>(rng() % 1000));
    st.RecordRequest(1, false, ring.back());
  }
  // 40000 newer waits overwrite the oldest ones, slot by slot.
  for (size_t i = 0; i < 40000; ++i) {
    ring[i] = static_cast<float>(rng() % 100);
    st.RecordRequest(1, false, ring[i]);
  }
  ServerStats s;
  st.Fill(Clock::now(), &s);
  EXPECT_EQ(s.requests, StatsRecorder::kWaitRing + 40000);
  EXPECT_EQ(s.wait_p50_us, Percentile(ring, 0.5));
  EXPECT_LT(s.wait_p50_us, 100.0);
  EXPECT_EQ(s.wait_p99_us, Percentile(ring, 0.99));
  EXPECT_GE(s.wait_p99_us, 1000.0);
}

}  // namespace
}  // namespace kaiwu
