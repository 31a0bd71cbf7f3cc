// A fixed pool of worker threads with a blocking ParallelFor that many callers
// may use at once (several Python threads running one session share a pool).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace kaiwu {

/// A non-owning reference to a callable void(int64_t begin, int64_t end):
/// what ParallelFor runs. Unlike std::function it never allocates, whatever
/// a lambda captures, so a kernel's Run stays allocation-free. The callable
/// must outlive the reference (ParallelFor blocks until it is done).
class RangeFn {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, RangeFn>>>
  RangeFn(const F& f)  // NOLINT(google-explicit-constructor): lambdas convert at the call
      : obj_(&f), call_([](const void* o, int64_t b, int64_t e) {
          (*static_cast<const F*>(o))(b, e);
        }) {}
  void operator()(int64_t begin, int64_t end) const { call_(obj_, begin, end); }

 private:
  const void* obj_;
  void (*call_)(const void*, int64_t, int64_t);
};

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
  void ParallelFor(int64_t n, double cost_per_item, RangeFn fn);

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
  // Jobs with helper slots still open, oldest first. A vector: it keeps its
  // capacity, where a deque cycling one element allocates a node every 64.
  std::vector<Job*> queue_;
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
