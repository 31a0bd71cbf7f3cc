#include "backends/cpu/linalg_util.h"

#include <algorithm>
#include <cstring>

namespace kaiwu {
namespace cpu {

void BatchedGemm::Run(const float* a, const float* b, float* c, ThreadPool* pool) const {
  if (batch == 0 || m == 0 || n == 0) return;
  auto a_at = [&](int64_t i) { return a + (a_off.empty() ? i * a_stride : a_off[i]); };
  auto b_at = [&](int64_t i) { return b + (b_off.empty() ? i * b_stride : b_off[i]); };
  const int64_t lda = trans_a ? m : k, ldb = trans_b ? k : n;
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  if (batch == 1) {
    Sgemm(trans_a, trans_b, m, n, k, 1.f, a_at(0), lda, b_at(0), ldb, 0.f, c, n, pool);
    return;
  }
  if (m == 1 && n == 1) {  // batched dot products: skip the GEMM call overhead
    pool->ParallelFor(batch, 2.0 * k, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i) {
        const float* x = a_at(i);
        const float* y = b_at(i);
        float acc = 0.f;
        for (int64_t p = 0; p < k; ++p) acc += x[p] * y[p];
        c[i] = acc;
      }
    });
    return;
  }
  int threads = pool ? pool->num_threads() : 1;
  if (batch >= threads || flops < 1e5) {
    pool->ParallelFor(batch, flops + 100.0, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i)
        Sgemm(trans_a, trans_b, m, n, k, 1.f, a_at(i), lda, b_at(i), ldb, 0.f, c + i * m * n, n,
              nullptr);
    });
  } else {
    for (int64_t i = 0; i < batch; ++i)
      Sgemm(trans_a, trans_b, m, n, k, 1.f, a_at(i), lda, b_at(i), ldb, 0.f, c + i * m * n, n,
            pool);
  }
}

StridedGather::StridedGather(const std::vector<int64_t>& dims,
                             const std::vector<int64_t>& strides) {
  for (int64_t d : dims) size_ *= d;
  // Drop size-1 dims, then merge a dim into its inner neighbour when contiguous.
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    if (!dims_.empty() && strides_.back() == strides[i] * dims[i]) {
      dims_.back() *= dims[i];
      strides_.back() = strides[i];
    } else {
      dims_.push_back(dims[i]);
      strides_.push_back(strides[i]);
    }
  }
  if (dims_.empty()) {
    dims_.push_back(1);
    strides_.push_back(1);
  }
  if (dims_.size() > 16) Fail(StatusCode::kUnsupported, "strided copy of rank > 16");
}

bool StridedGather::contiguous() const { return dims_.size() == 1 && strides_[0] == 1; }

void StridedGather::Run(const float* src, float* dst, ThreadPool* pool) const {
  if (size_ == 0) return;
  if (contiguous()) {
    std::memcpy(dst, src, static_cast<size_t>(size_) * sizeof(float));
    return;
  }
  const int rank = static_cast<int>(dims_.size());
  const int64_t inner = dims_[rank - 1], inner_stride = strides_[rank - 1];
  const int64_t rows = size_ / inner;
  pool->ParallelFor(rows, static_cast<double>(inner), [&](int64_t r0, int64_t r1) {
    // Odometer over the outer dims, started at row r0.
    int64_t idx[16] = {0};
    int64_t rem = r0, offset = 0;
    for (int d = rank - 2; d >= 0; --d) {
      idx[d] = rem % dims_[d];
      rem /= dims_[d];
      offset += idx[d] * strides_[d];
    }
    float* out = dst + r0 * inner;
    for (int64_t r = r0; r < r1; ++r) {
      const float* in = src + offset;
      if (inner_stride == 1) {
        for (int64_t j = 0; j < inner; ++j) out[j] = in[j];
      } else {
        for (int64_t j = 0; j < inner; ++j) out[j] = in[j * inner_stride];
      }
      out += inner;
      for (int d = rank - 2; d >= 0; --d) {
        offset += strides_[d];
        if (++idx[d] < dims_[d]) break;
        offset -= idx[d] * strides_[d];
        idx[d] = 0;
      }
    }
  });
}

}  // namespace cpu
}  // namespace kaiwu
