#include <gtest/gtest.h>

#include <random>

#include "backends/cpu/cpu_kernels.h"

namespace kaiwu {
namespace {

// Sgemm in all four transpose modes, 1 and 3 threads, against a float64 loop.
TEST(Sgemm, MatchesNaiveReference) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    for (int mode = 0; mode < 4; ++mode) {
      bool ta = mode & 1, tb = mode & 2;
      for (auto [m, n, k] : {std::tuple<int, int, int>{1, 1, 1}, {5, 7, 3}, {70, 130, 33}, {2, 300, 17}}) {
        std::vector<float> a(m * k), b(k * n), c(m * n);
        for (auto& x : a) x = dist(rng);
        for (auto& x : b) x = dist(rng);
        for (auto& x : c) x = dist(rng);
        std::vector<float> c0 = c;
        float alpha = 0.5f, beta = 2.f;
        cpu::Sgemm(ta, tb, m, n, k, alpha, a.data(), ta ? m : k, b.data(), tb ? k : n, beta,
                   c.data(), n, &pool);
        for (int i = 0; i < m; ++i)
          for (int j = 0; j < n; ++j) {
            double acc = 0;
            for (int p = 0; p < k; ++p)
              acc += double(ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
            double want = alpha * acc + beta * c0[i * n + j];
            ASSERT_NEAR(c[i * n + j], want, 1e-4 * (1 + std::abs(want)))
                << "mode " << mode << " m" << m << " n" << n << " k" << k;
          }
      }
    }
  }
}

}  // namespace
}  // namespace kaiwu
