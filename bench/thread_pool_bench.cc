// ParallelFor latency of the engine's ThreadPool: back-to-back calls over k
// items of ~`work_ns` each, as the ops of a small-batch run issue them.
// Build: g++ -O2 -std=c++17 -pthread -Icpp/src bench/thread_pool_bench.cc
//        cpp/src/core/thread_pool.cc -o /tmp/pool_bench
// Run:   /tmp/pool_bench [threads] [work_ns]
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "core/thread_pool.h"

namespace {

volatile double sink;

void Spin(int64_t ns) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::nanoseconds(ns);
  double x = 1.0;
  while (std::chrono::steady_clock::now() < until) x = x * 1.0000001 + 1e-9;
  sink = x;
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 16;
  const int64_t work_ns = argc > 2 ? std::atoll(argv[2]) : 2000;
  kaiwu::ThreadPool pool(threads);
  std::printf("threads %d, chunk work %lld ns\n", threads, static_cast<long long>(work_ns));
  std::printf("| items | us per ParallelFor | one thread us |\n|---:|---:|---:|\n");
  for (int items : {2, 4, 8, 16, 64}) {
    const int reps = 20000 / items + 200;
    auto body = [&](int64_t b, int64_t e) { Spin((e - b) * work_ns); };
    // Cost units as the GEMM kernels count them (flops): ~20 per ns on one core.
    const double cost = 20.0 * static_cast<double>(work_ns);
    for (int i = 0; i < 100; ++i) pool.ParallelFor(items, cost, body);  // warm
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; ++i) pool.ParallelFor(items, cost, body);
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
    std::printf("| %d | %.2f | %.2f |\n", items, us, items * work_ns / 1000.0);
  }
  return 0;
}
