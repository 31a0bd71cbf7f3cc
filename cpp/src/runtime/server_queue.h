// The inference server's request queue and batching policy: one FIFO per
// (weights, per-row feed shapes), since only such requests can share one
// Session::Run, and the rule for when a queue runs as a batch: when it holds
// a full batch, when every connected actor is waiting, or once it has waited
// max_wait_us. Not thread-safe: the server calls it under its one mutex.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/server_request.h"

namespace kaiwu {

class BatchQueue {
 public:
  using Clock = std::chrono::steady_clock;

  BatchQueue(int max_batch, int64_t max_wait_us, int64_t max_queue_rows)
      : max_batch_(max_batch), max_wait_us_(max_wait_us), max_queue_rows_(max_queue_rows) {}

  /// Whether `rows` more rows fit under max_queue_rows.
  bool HasSpace(int64_t rows) const { return queued_rows_ + rows <= max_queue_rows_; }

  /// Appends `req` (its weights and enqueue time set) to the queue of its
  /// weights and `row_key` (RowShapeKey of its feeds). Returns true when this
  /// can change an idle worker's decision: it is its queue's first request (a
  /// new deadline) or its queue now holds a full batch. Otherwise the
  /// workers' deadline stands and waking one would be wasted.
  bool Push(std::shared_ptr<ServerRequest> req, std::vector<int64_t> row_key);

  /// If some queue is ready, pops its oldest requests, up to max_batch rows,
  /// into *batch and returns true. A queue is ready when `all_waiting` (no
  /// actor is left to join), when it holds max_batch rows, or when
  /// max_wait_us has passed since its first request or since `free_since`
  /// (when the asking worker came free), whichever is later: requests that
  /// queued behind a running batch still give that batch's actors, about to
  /// step again, time to join them. Among ready queues the one with the
  /// oldest first request goes. Otherwise sets *deadline to the earliest time
  /// a queue becomes due (time_point::max() when all are empty), returns false.
  bool PopReady(Clock::time_point now, Clock::time_point free_since, bool all_waiting,
                Requests* batch, Clock::time_point* deadline);

  /// Empties every queue; returns the requests that were queued.
  Requests TakeAll();

  int64_t queued_rows() const { return queued_rows_; }
  int queued_requests() const;

 private:
  struct Queue {
    std::deque<std::shared_ptr<ServerRequest>> reqs;
    int64_t rows = 0;
  };
  int max_batch_;
  int64_t max_wait_us_, max_queue_rows_;
  std::map<std::pair<const WeightSet*, std::vector<int64_t>>, Queue> queues_;
  int64_t queued_rows_ = 0;
};

}  // namespace kaiwu
