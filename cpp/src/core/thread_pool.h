// A fixed pool of worker threads with a blocking ParallelFor that many callers
// may use at once (several Python threads running one session share a pool).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kaiwu {

class ThreadPool {
 public:
  /// `num_threads` counts the caller: 1 means no worker threads at all.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  /// Calls fn(begin, end) over disjoint ranges covering [0, n). `cost_per_item`
  /// is a rough count of scalar operations per item; small totals run inline
  /// on the caller, since waking workers costs more than the work.
  void ParallelFor(int64_t n, double cost_per_item,
                   const std::function<void(int64_t, int64_t)>& fn);

  /// Number of physical cores (falls back to hardware_concurrency).
  static int PhysicalCores();

  /// Times a worker thread has joined a ParallelFor since construction (a
  /// counter for tests: a call split into k tasks admits at most k - 1).
  int64_t worker_joins() const { return worker_joins_.load(std::memory_order_relaxed); }

 private:
  struct Job;
  void WorkerLoop();
  bool TryTakeSlot();
  static void RunChunks(Job* job);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job*> queue_;  // jobs with helper slots still open
  bool stop_ = false;
  // Helper slots open over queue_'s jobs, less the slots workers have taken
  // but not yet claimed from a job (so it may dip below zero for a moment).
  // Idle workers poll it for a short while before sleeping on cv_, since
  // waking a sleeping thread costs tens of microseconds, as much as the ops of
  // a batch-1 policy take; a worker takes a slot with one compare-exchange, so
  // only as many workers as a job asks for touch mu_ and the job.
  std::atomic<int> open_slots_{0};
  // Workers polling now: a caller wakes sleeping ones (a futex call each) only
  // for the slots these cannot take.
  std::atomic<int> polling_{0};
  std::atomic<int64_t> worker_joins_{0};
};

}  // namespace kaiwu
