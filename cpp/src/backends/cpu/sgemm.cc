#include <Eigen/Core>
#include <algorithm>

#include "backends/cpu/cpu_kernels.h"

namespace kaiwu {
namespace cpu {

namespace {
using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapC = Eigen::Map<RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;
using MapConst = Eigen::Map<const RowMajor, Eigen::Unaligned, Eigen::OuterStride<>>;

// One block of rows [r0, r1) and columns [c0, c1) of C.
void GemmBlock(bool ta, bool tb, int64_t r0, int64_t r1, int64_t c0, int64_t c1, int64_t k,
               float alpha, const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
               float* c, int64_t ldc) {
  int64_t rows = r1 - r0, cols = c1 - c0;
  MapC C(c + r0 * ldc + c0, rows, cols, Eigen::OuterStride<>(ldc));
  // op(A) rows r0..r1: A is [M,K] (lda) or, transposed, [K,M].
  auto run = [&](const auto& A, const auto& B) {
    if (beta == 0.f) {
      C.noalias() = alpha * (A * B);
    } else {
      if (beta != 1.f) C *= beta;
      C.noalias() += alpha * (A * B);
    }
  };
  if (!ta && !tb) {
    run(MapConst(a + r0 * lda, rows, k, Eigen::OuterStride<>(lda)),
        MapConst(b + c0, k, cols, Eigen::OuterStride<>(ldb)));
  } else if (!ta && tb) {
    run(MapConst(a + r0 * lda, rows, k, Eigen::OuterStride<>(lda)),
        MapConst(b + c0 * ldb, cols, k, Eigen::OuterStride<>(ldb)).transpose());
  } else if (ta && !tb) {
    run(MapConst(a + r0, k, rows, Eigen::OuterStride<>(lda)).transpose(),
        MapConst(b + c0, k, cols, Eigen::OuterStride<>(ldb)));
  } else {
    run(MapConst(a + r0, k, rows, Eigen::OuterStride<>(lda)).transpose(),
        MapConst(b + c0 * ldb, cols, k, Eigen::OuterStride<>(ldb)).transpose());
  }
}
}  // namespace

void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc, ThreadPool* pool) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.f ? 0.f : beta * c[i * ldc + j];
    return;
  }
  double cost = 2.0 * static_cast<double>(n) * static_cast<double>(k);
  if (pool == nullptr || pool->num_threads() == 1) {
    GemmBlock(trans_a, trans_b, 0, m, 0, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  // Split rows in blocks of 16 when there are enough; otherwise columns.
  if (m >= 16 * pool->num_threads()) {
    int64_t blocks = (m + 15) / 16;
    pool->ParallelFor(blocks, cost * 16, [&](int64_t b0, int64_t b1) {
      GemmBlock(trans_a, trans_b, b0 * 16, std::min(m, b1 * 16), 0, n, k, alpha, a, lda, b, ldb,
                beta, c, ldc);
    });
  } else {
    int64_t blocks = (n + 63) / 64;
    double col_cost = 2.0 * static_cast<double>(m) * static_cast<double>(k) * 64;
    pool->ParallelFor(blocks, col_cost, [&](int64_t b0, int64_t b1) {
      GemmBlock(trans_a, trans_b, 0, m, b0 * 64, std::min(n, b1 * 64), k, alpha, a, lda, b, ldb,
                beta, c, ldc);
    });
  }
}

}  // namespace cpu
}  // namespace kaiwu
