#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace kaiwu {

struct ThreadPool::Job {
  const RangeFn* fn;
  int64_t n;
  int64_t chunk;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  int want = 0;            // helper slots still open; guarded by the pool's mu_
  int workers_inside = 0;  // guarded by mu; the caller waits for 0 before the job dies
  std::mutex mu;
  std::condition_variable cv;
};

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  queue_.reserve(16);
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

namespace {

// Polls `ready` for up to ~50 us (the gap between the ops of one run is
// usually shorter), pausing between polls; the caller sleeps afterwards if
// it is still false.
template <typename Ready>
void SpinUntil(const Ready& ready) {
  constexpr auto kSpin = std::chrono::microseconds(50);
  const auto until = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    if (std::chrono::steady_clock::now() >= until) return;
  }
}

}  // namespace

void ThreadPool::RunChunks(Job* job) {
  for (;;) {
    int64_t begin = job->next.fetch_add(job->chunk);
    if (begin >= job->n) return;
    int64_t end = std::min(job->n, begin + job->chunk);
    (*job->fn)(begin, end);
    job->done.fetch_add(end - begin);
  }
}

bool ThreadPool::TryTakeSlot() {
  int open = open_slots_.load(std::memory_order_acquire);
  while (open > 0) {
    if (open_slots_.compare_exchange_weak(open, open - 1, std::memory_order_acq_rel)) return true;
  }
  return false;
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    bool slot = false;
    polling_.fetch_add(1, std::memory_order_acq_rel);
    SpinUntil([&] { return slot = TryTakeSlot(); });
    polling_.fetch_sub(1, std::memory_order_acq_rel);
    if (!slot) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || open_slots_.load(std::memory_order_acquire) > 0; });
      if (stop_) return;
      continue;
    }
    Job* job = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (Job* queued : queue_) {
        if (queued->want > 0) {
          job = queued;
          break;
        }
      }
      if (job == nullptr) {
        // The slot's job finished without us and took its open slots along:
        // hand the one we hold back so the count stays exact.
        open_slots_.fetch_add(1, std::memory_order_acq_rel);
        continue;
      }
      if (--job->want == 0) queue_.erase(std::find(queue_.begin(), queue_.end(), job));
      std::lock_guard<std::mutex> job_lock(job->mu);
      ++job->workers_inside;
    }
    worker_joins_.fetch_add(1, std::memory_order_relaxed);
    RunChunks(job);
    std::lock_guard<std::mutex> job_lock(job->mu);
    --job->workers_inside;
    job->cv.notify_all();
  }
}

void ThreadPool::ParallelFor(int64_t n, double cost_per_item, RangeFn fn) {
  if (n <= 0) return;
  constexpr double kMinCostPerTask = 20000.0;  // ~ a few microseconds of work
  int64_t max_tasks = static_cast<int64_t>(std::max(1.0, n * cost_per_item / kMinCostPerTask));
  int64_t tasks = std::min<int64_t>({n, max_tasks, static_cast<int64_t>(num_threads_) * 4});
  if (num_threads_ == 1 || tasks <= 1) {
    fn(0, n);
    return;
  }
  Job job;
  job.fn = &fn;
  job.n = n;
  job.chunk = (n + tasks - 1) / tasks;
  // Helpers: no more than the chunks beyond the caller's first, and no more
  // than pay for themselves. Each helper admitted adds a roughly fixed serial
  // cost (~1.5 us measured on a 16-thread pool: taking its slot, joining and
  // leaving the job; about one minimum task's work), so for W units of work
  // the best count is about sqrt(W / kMinCostPerTask) - 1: a 40K-unit op on
  // 16 threads wakes one worker, a 5M-unit one all fifteen.
  const int chunks = static_cast<int>((n + job.chunk - 1) / job.chunk);
  const double total = static_cast<double>(n) * cost_per_item;
  const int paying = std::max(1, static_cast<int>(std::sqrt(total / kMinCostPerTask)) - 1);
  const int want = std::min({chunks - 1, static_cast<int>(workers_.size()), paying});
  {
    std::lock_guard<std::mutex> lock(mu_);
    job.want = want;
    queue_.push_back(&job);
    open_slots_.fetch_add(want, std::memory_order_acq_rel);
  }
  // Polling workers take slots within a microsecond; wake sleepers for the rest.
  const int wake = want - polling_.load(std::memory_order_acquire);
  if (wake >= static_cast<int>(workers_.size())) {
    cv_.notify_all();
  } else {
    for (int i = 0; i < wake; ++i) cv_.notify_one();
  }
  RunChunks(&job);
  {
    // No worker may join once the caller has taken every chunk.
    std::lock_guard<std::mutex> lock(mu_);
    if (job.want > 0) {
      open_slots_.fetch_sub(job.want, std::memory_order_acq_rel);
      job.want = 0;
      queue_.erase(std::find(queue_.begin(), queue_.end(), &job));
    }
  }
  // The chunks workers took are usually about to end: poll before sleeping.
  SpinUntil([&] { return job.done.load(std::memory_order_acquire) >= job.n; });
  std::unique_lock<std::mutex> lock(job.mu);
  job.cv.wait(lock, [&] { return job.workers_inside == 0; });
}

int ThreadPool::PhysicalCores() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, phys, core;
  while (std::getline(cpuinfo, line)) {
    auto value = [&] { return line.substr(line.find(':') + 1); };
    if (line.rfind("physical id", 0) == 0) phys = value();
    if (line.rfind("core id", 0) == 0) {
      core = value();
      cores.insert({phys, core});
    }
  }
  int hw = static_cast<int>(std::thread::hardware_concurrency());
  if (cores.empty()) return std::max(1, hw);
  return std::max(1, std::min<int>(static_cast<int>(cores.size()), std::max(1, hw)));
}

}  // namespace kaiwu
