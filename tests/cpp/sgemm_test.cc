#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

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

// Few rows of A (the skinny kernels up to 16 rows, Eigen past them), A * B and
// A * B^T, against a float64 reference: every shape with alpha, beta, pool or
// none. Strides are padded and the padding holds NaN, so a kernel that reads
// past a row (k or column tails) poisons the result; C's padding must come
// back untouched. With beta == 0, C starts as NaN and must not be read.
TEST(Sgemm, FewRowsMatchReference) {
  std::mt19937 rng(11);
  // Never zero, so that every term of a dot product counts.
  std::uniform_real_distribution<float> mag(0.25f, 1.f);
  std::bernoulli_distribution neg(0.5);
  auto random = [&] { return neg(rng) ? -mag(rng) : mag(rng); };
  const float kNaN = std::numeric_limits<float>::quiet_NaN();
  const float kEps = std::numeric_limits<float>::epsilon();
  ThreadPool pool(3);
  for (int64_t m = 1; m <= 20; ++m)
    for (int64_t n : {1, 3, 15, 16, 17, 33, 64, 255, 256, 1024})
      for (int64_t k : {1, 7, 16, 17, 64, 255, 2048})
        for (bool tb : {false, true}) {
          if (n * k > 256 * 2048) continue;  // 1024 x 2048: no new case, a slow reference
          const int64_t lda = k + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
          std::vector<float> a(m * lda, kNaN), b((tb ? n : k) * ldb, kNaN);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t p = 0; p < k; ++p) a[i * lda + p] = random();
          for (int64_t j = 0; j < n; ++j)
            for (int64_t p = 0; p < k; ++p) b[tb ? j * ldb + p : p * ldb + j] = random();
          // A * op(B) and the sum of the terms' magnitudes (for the error bound).
          std::vector<double> ab(m * n), mag_ab(m * n);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double acc = 0, acc_mag = 0;
              for (int64_t p = 0; p < k; ++p) {
                double t = double(a[i * lda + p]) * b[tb ? j * ldb + p : p * ldb + j];
                acc += t;
                acc_mag += std::abs(t);
              }
              ab[i * n + j] = acc;
              mag_ab[i * n + j] = acc_mag;
            }
          for (ThreadPool* tp : {static_cast<ThreadPool*>(nullptr), &pool})
            for (float alpha : {1.f, 0.5f})
              for (float beta : {0.f, 1.f, 0.7f}) {
                std::vector<float> c(m * ldc, kNaN);
                for (int64_t i = 0; i < m; ++i)
                  for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? kNaN : random();
                const std::vector<float> c0 = c;
                cpu::Sgemm(false, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta,
                           c.data(), ldc, tp);
                for (int64_t i = 0; i < m; ++i) {
                  for (int64_t j = 0; j < n; ++j) {
                    const double old = beta == 0.f ? 0.0 : double(beta) * c0[i * ldc + j];
                    const double want = alpha * ab[i * n + j] + old;
                    // Float32 rounding of k products and sums (and of beta * C).
                    const double tol =
                        kEps * (k + 2) * (alpha * mag_ab[i * n + j] + std::abs(old));
                    ASSERT_NEAR(c[i * ldc + j], want, tol)
                        << "m" << m << " n" << n << " k" << k << " trans_b " << tb
                        << " alpha " << alpha << " beta " << beta << " pool " << (tp != nullptr)
                        << " at " << i << "," << j;
                  }
                  for (int64_t j = n; j < ldc; ++j)
                    ASSERT_TRUE(std::isnan(c[i * ldc + j]))
                        << "wrote C padding: m" << m << " n" << n << " k" << k << " at " << i
                        << "," << j;
                }
              }
        }
}

}  // namespace
}  // namespace kaiwu
