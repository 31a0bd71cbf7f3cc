#include "runtime/server_queue.h"

#include <algorithm>

namespace kaiwu {

bool BatchQueue::Push(std::shared_ptr<ServerRequest> req, std::vector<int64_t> row_key) {
  const int64_t rows = req->rows;
  queued_rows_ += rows;
  Queue& q = queues_[{req->weights.get(), std::move(row_key)}];
  const bool first = q.reqs.empty();
  q.reqs.push_back(std::move(req));
  q.rows += rows;
  return first || q.rows >= max_batch_;
}

bool BatchQueue::PopReady(Clock::time_point now, Clock::time_point free_since, bool all_waiting,
                          Requests* batch, Clock::time_point* deadline) {
  auto best = queues_.end();
  *deadline = Clock::time_point::max();
  for (auto it = queues_.begin(); it != queues_.end(); ++it) {
    if (it->second.reqs.empty()) continue;
    auto first = it->second.reqs.front()->enqueued;
    auto due = std::max(first, free_since) + std::chrono::microseconds(max_wait_us_);
    bool ready = all_waiting || it->second.rows >= max_batch_ || due <= now;
    if (ready && (best == queues_.end() || first < best->second.reqs.front()->enqueued)) best = it;
    *deadline = std::min(*deadline, due);
  }
  if (best == queues_.end()) return false;
  Queue& q = best->second;
  int64_t rows = 0;
  while (!q.reqs.empty() && rows + q.reqs.front()->rows <= max_batch_) {
    rows += q.reqs.front()->rows;
    batch->push_back(std::move(q.reqs.front()));
    q.reqs.pop_front();
  }
  q.rows -= rows;
  queued_rows_ -= rows;
  if (q.reqs.empty()) queues_.erase(best);
  return true;
}

Requests BatchQueue::TakeAll() {
  Requests all;
  for (auto& [k, q] : queues_)
    for (auto& r : q.reqs) all.push_back(std::move(r));
  queues_.clear();
  queued_rows_ = 0;
  return all;
}

int BatchQueue::queued_requests() const {
  int n = 0;
  for (const auto& [k, q] : queues_) n += static_cast<int>(q.reqs.size());
  return n;
}

}  // namespace kaiwu
