#include "core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <utility>

namespace kaiwu {

struct ThreadPool::Job {
  const std::function<void(int64_t, int64_t)>* fn;
  int64_t n;
  int64_t chunk;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  int workers_inside = 0;  // guarded by mu; the caller waits for 0 before the job dies
  std::mutex mu;
  std::condition_variable cv;
};

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
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

void ThreadPool::WorkerLoop() {
  for (;;) {
    Job* job = nullptr;
    SpinUntil([this] { return queued_.load(std::memory_order_acquire) > 0; });
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_ && queue_.empty()) return;
      job = queue_.front();
      // Leave the job queued while chunks remain so other workers join in.
      if (job->next.load() + job->chunk >= job->n) queue_.pop_front();
      queued_.store(static_cast<int>(queue_.size()), std::memory_order_release);
      std::lock_guard<std::mutex> job_lock(job->mu);
      ++job->workers_inside;
    }
    RunChunks(job);
    std::lock_guard<std::mutex> job_lock(job->mu);
    --job->workers_inside;
    job->cv.notify_all();
  }
}

void ThreadPool::ParallelFor(int64_t n, double cost_per_item,
                             const std::function<void(int64_t, int64_t)>& fn) {
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(&job);
    queued_.store(static_cast<int>(queue_.size()), std::memory_order_release);
  }
  cv_.notify_all();
  RunChunks(&job);
  {
    // Make sure no worker still references the job before it leaves scope.
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find(queue_.begin(), queue_.end(), &job);
    if (it != queue_.end()) queue_.erase(it);
    queued_.store(static_cast<int>(queue_.size()), std::memory_order_release);
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
