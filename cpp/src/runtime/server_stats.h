// The inference server's running counters: requests, rows, batches (sliced
// or whole), failures, a histogram of batch sizes, mean run time, and queue
// waits kept in a fixed ring of the most recent 65536 for p50 / p99.
// Recording never allocates once constructed. Not thread-safe: the server
// records and reads under its one mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "runtime/server_request.h"

namespace kaiwu {

class StatsRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kWaitRing = size_t{1} << 16;

  /// Batch sizes are counted up to `max_batch` rows (larger: in the last bin).
  explicit StatsRecorder(int max_batch);

  /// One batch of `rows` rows (padding excluded) that ran for `run_us`.
  void RecordBatch(int64_t rows, double run_us, bool sliced);
  /// Stage times of one batch (us), the feed bytes it gathered and whether
  /// it gathered them on several threads (with RecordBatch).
  void RecordStages(double gather_us, double session_us, double scatter_us,
                    uint64_t gathered_bytes, bool parallel_gather);
  /// Time spent finishing one batch's requests (us): recorded after they
  /// are finished, so a snapshot may not hold the latest batch's yet.
  void RecordFinish(double finish_us) { finish_us_ += finish_us; }
  /// One request of `rows` rows that waited `wait_us` in the queue.
  void RecordRequest(int64_t rows, bool failed, float wait_us);
  /// Zeroes everything; elapsed time counts from `now`.
  void Reset(Clock::time_point now);
  /// Writes elapsed_s, counters, batch_hist, wait percentiles and
  /// run_mean_us into `s` (other fields untouched).
  void Fill(Clock::time_point now, ServerStats* s) const;

 private:
  Clock::time_point start_;
  uint64_t requests_ = 0, rows_ = 0, batches_ = 0, failed_ = 0, sliced_ = 0;
  double run_us_ = 0;
  double gather_us_ = 0, session_us_ = 0, scatter_us_ = 0, finish_us_ = 0;
  uint64_t gathered_bytes_ = 0, parallel_gathers_ = 0;
  std::vector<uint64_t> hist_;
  std::vector<float> wait_;  ///< ring of recent queue waits (us)
  size_t wait_pos_ = 0;
};

}  // namespace kaiwu
