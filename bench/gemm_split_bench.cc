// How the prepacked-B GEMM (backends/cpu/sgemm_packed.h) splits across
// threads: row blocks of whole tiles against single column panels, each over
// the whole product on a pool of `threads`, the split SgemmPackedB itself
// picks (rows when there are two tiles of rows a thread, else column groups
// as wide as the register tile, crossed with row blocks when few), and one
// thread alone, on the shapes the policies' dense layers have (M = batch
// rows). The four are alternated in rounds in one process; best wall time of
// the rounds, with GFLOP/s.
// Build (after the library, e.g. build/dev):
//   g++ -O2 -std=c++17 -Icpp/src -Icpp/include bench/gemm_split_bench.cc  (continued:)
//       build/dev/libkaiwu_core.a -lpthread -o /tmp/gemm_split_bench
// Run:   /tmp/gemm_split_bench [threads] [rounds] [M N K ...]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "backends/cpu/activation.h"
#include "backends/cpu/sgemm_packed.h"
#include "backends/cpu/sgemm_packed_isa.h"
#include "core/thread_pool.h"

using namespace kaiwu;
using namespace kaiwu::cpu;

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Run(ThreadPool& pool, int rounds, int64_t m, int64_t n, int64_t k) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<float> a(m * k), b(k * n), c(m * n), bias(n, 0.f);
  for (float& x : a) x = u(rng);
  for (float& x : b) x = u(rng);
  const int64_t panels = (n + kPackedPanel - 1) / kPackedPanel;
  std::vector<float> packed(panels * kPackedPanel * k);
  PackB(false, k, n, b.data(), packed.data());
  const Activation act;
  const PackedIsa isa = ActivePackedIsa();
  const PackedProblem p{m, n, k, a.data(), k, packed.data(), bias.data(), &act, c.data(), n};
  const int64_t unit = PackedTileRows(isa), units = (m + unit - 1) / unit;
  const auto rows = [&] {
    pool.ParallelFor(units, 1e9, [&](int64_t u0, int64_t u1) {
      PackedBlock(isa, p, u0 * unit, std::min(m, u1 * unit), 0, panels);
    });
  };
  const auto cols = [&] {
    pool.ParallelFor(panels, 1e9, [&](int64_t q0, int64_t q1) { PackedBlock(isa, p, 0, m, q0, q1); });
  };
  const auto chosen = [&] {
    SgemmPackedB(isa, m, n, k, a.data(), k, packed.data(), bias.data(), act, c.data(), n, &pool);
  };
  const auto one = [&] { PackedBlock(isa, p, 0, m, 0, panels); };
  double best[4] = {1e30, 1e30, 1e30, 1e30};
  const int reps = std::max<int64_t>(1, static_cast<int64_t>(2e8 / (2.0 * m * n * k) + 1));
  for (int r = 0; r < rounds; ++r) {
    for (int w = 0; w < 4; ++w) {
      const double t0 = Now();
      for (int i = 0; i < reps; ++i) (w == 0 ? rows() : w == 1 ? cols() : w == 2 ? chosen() : one());
      best[w] = std::min(best[w], (Now() - t0) / reps);
    }
  }
  const double f = 2.0 * m * n * k * 1e-9;
  std::printf(
      "%6ld x %5ld x %5ld  rows %8.0f us (%6.1f GFLOP/s)  cols %8.0f us (%6.1f)  SgemmPackedB %8.0f us "
      "(%6.1f)  1 thread %8.0f us (%6.1f)\n",
      static_cast<long>(m), static_cast<long>(n), static_cast<long>(k), best[0] * 1e6, f / best[0],
      best[1] * 1e6, f / best[1], best[2] * 1e6, f / best[2], best[3] * 1e6, f / best[3]);
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 9;
  std::vector<int64_t> shapes;
  for (int i = 3; i + 2 < argc; i += 3)
    for (int j = 0; j < 3; ++j) shapes.push_back(std::atoll(argv[i + j]));
  if (shapes.empty())
    shapes = {1024, 256, 256, 1024, 256, 64, 256, 256, 256, 512, 256, 256,
              8192, 128, 48, 1024, 512, 3136, 256, 512, 3136, 4096, 64, 16};
  ThreadPool pool(threads);
  std::printf("%s, %d threads, best of %d rounds\n", PackedIsaName(ActivePackedIsa()), threads, rounds);
  for (size_t s = 0; s + 2 < shapes.size(); s += 3) Run(pool, rounds, shapes[s], shapes[s + 1], shapes[s + 2]);
  return 0;
}
