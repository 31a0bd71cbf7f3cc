// Softmax, LogSoftmax and Hardmax over one axis (opset 13+); before opset 13 the
// input is coerced to 2-D at `axis` (default 1) and the op runs over the
// flattened trailing part. The input is viewed as [outer, n, inner]: with
// inner == 1 each row is contiguous; otherwise the axis is strided and the
// math runs on contiguous inner vectors, in column chunks.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/reduce_family.h"
#include "ops/unary.h"

namespace kaiwu {
namespace cpu {
namespace {

enum class SoftmaxKind { kSoftmax, kLogSoftmax, kHardmax };
constexpr int64_t kColumnChunk = 256;

template <typename T>
using ConstArr = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using Arr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

// One contiguous row of n elements.
template <typename T>
void RowOp(SoftmaxKind kind, const T* x, T* y, int64_t n) {
  ConstArr<T> in(x, n);
  Arr<T> out(y, n);
  if (kind == SoftmaxKind::kHardmax) {
    Eigen::Index best = 0;
    in.maxCoeff(&best);
    // maxCoeff's index is the first maximum for ties; keep it explicit.
    for (Eigen::Index j = 0; j < best; ++j)
      if (x[j] == x[best]) { best = j; break; }
    out.setZero();
    y[best] = T(1);
    return;
  }
  T m = in.maxCoeff();
  if (kind == SoftmaxKind::kSoftmax) {
    out = (in - m).exp();
    out *= T(1) / out.sum();
  } else {
    T lse = std::log((in - m).exp().sum());
    out = (in - m) - lse;  // x - m is exact-ish; adding m to lse first would round
  }
}

// n strided rows of `len` contiguous elements each (row stride `stride`).
template <typename T>
void ColumnOp(SoftmaxKind kind, const T* x, T* y, int64_t n, int64_t stride, int64_t len,
              T* tmp) {
  Arr<T> m(tmp, len), s(tmp + len, len);
  m = ConstArr<T>(x, len);
  for (int64_t i = 1; i < n; ++i) m = m.max(ConstArr<T>(x + i * stride, len));
  if (kind == SoftmaxKind::kHardmax) {
    s.setZero();  // 1 once the first maximum was seen
    for (int64_t i = 0; i < n; ++i) {
      const T* xi = x + i * stride;
      T* yi = y + i * stride;
      for (int64_t j = 0; j < len; ++j) {
        bool hit = s[j] == T(0) && xi[j] == m[j];
        yi[j] = hit ? T(1) : T(0);
        if (hit) s[j] = T(1);
      }
    }
    return;
  }
  s.setZero();
  for (int64_t i = 0; i < n; ++i) {
    Arr<T> yi(y + i * stride, len);
    yi = (ConstArr<T>(x + i * stride, len) - m).exp();
    s += yi;
  }
  if (kind == SoftmaxKind::kSoftmax) {
    s = s.inverse();
    for (int64_t i = 0; i < n; ++i) Arr<T>(y + i * stride, len) *= s;
  } else {
    s = s.log();
    for (int64_t i = 0; i < n; ++i)
      Arr<T>(y + i * stride, len) = (ConstArr<T>(x + i * stride, len) - m) - s;
  }
}

class SoftmaxKernel : public Kernel {
 public:
  explicit SoftmaxKernel(SoftmaxKind kind) : kind_(kind) {}

  void Prepare(PrepareContext& ctx) override {
    const SoftmaxParams& p = ctx.Params<SoftmaxParams>();
    dtype_ = ctx.in(0).dtype;
    outer_ = p.outer;
    n_ = p.n;
    inner_ = p.inner;
    if (inner_ > 1)
      ctx.scratch_bytes = static_cast<size_t>(outer_ * ((inner_ + kColumnChunk - 1) / kColumnChunk) *
                                              2 * kColumnChunk) * DTypeSize(dtype_);
  }

  void Run(const KernelIO& io) const override {
    if (dtype_ == DType::kFloat32) RunT<float>(io);
    else RunT<double>(io);
  }

 private:
  template <typename T>
  void RunT(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    T* y = static_cast<T*>(io.outputs[0]);
    if (outer_ * n_ * inner_ == 0) return;
    if (inner_ == 1) {
      io.pool->ParallelFor(outer_, 8.0 * n_, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) RowOp(kind_, x + o * n_, y + o * n_, n_);
      });
      return;
    }
    const int64_t chunks = (inner_ + kColumnChunk - 1) / kColumnChunk;
    T* scratch = static_cast<T*>(io.scratch);
    io.pool->ParallelFor(outer_ * chunks, 8.0 * n_ * std::min(inner_, kColumnChunk),
                         [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        int64_t o = item / chunks, c0 = (item % chunks) * kColumnChunk;
        int64_t len = std::min(kColumnChunk, inner_ - c0);
        int64_t off = o * n_ * inner_ + c0;
        ColumnOp(kind_, x + off, y + off, n_, inner_, len, scratch + item * 2 * kColumnChunk);
      }
    });
  }

  SoftmaxKind kind_;
  DType dtype_ = DType::kUndefined;
  int64_t outer_ = 1, n_ = 1, inner_ = 1;
};

template <SoftmaxKind K>
std::unique_ptr<Kernel> MakeSoftmax(const Node&) {
  return std::make_unique<SoftmaxKernel>(K);
}

}  // namespace

void RegisterSoftmaxKernels(KernelRegistry& r) {
  const std::initializer_list<DType> floats = {DType::kFloat32, DType::kFloat64};
  r.Register(OpId::kSoftmax, floats, &MakeSoftmax<SoftmaxKind::kSoftmax>);
  r.Register(OpId::kLogSoftmax, floats, &MakeSoftmax<SoftmaxKind::kLogSoftmax>);
  r.Register(OpId::kHardmax, floats, &MakeSoftmax<SoftmaxKind::kHardmax>);
}

}  // namespace cpu
}  // namespace kaiwu
