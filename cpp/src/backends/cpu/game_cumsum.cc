// CumSum(X, axis; exclusive, reverse): running sums along an axis, in the
// input dtype, summed in order as onnxruntime does. With few inner columns each
// line keeps its sum in a register (a sum carried through memory is a store-
// to-load chain per element); otherwise work items are (outer index, block of
// inner columns) and a step adds a whole block row, vectorised.
#include <algorithm>

#include "backends/cpu/game_util.h"

namespace kaiwu {
namespace cpu {
namespace {

constexpr int64_t kBlock = 256;      // inner columns per work item
constexpr int64_t kLineInner = 8;    // below this many inner columns: per-line sums

class CumSumKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const CumSumParams& p = ctx.Params<CumSumParams>();
    const TensorInfo& x = ctx.in(0);
    dim_ = x.shape[p.axis];
    outer_ = NumElements(Shape(x.shape.begin(), x.shape.begin() + p.axis));
    inner_ = NumElements(Shape(x.shape.begin() + p.axis + 1, x.shape.end()));
    blocks_ = (inner_ + kBlock - 1) / kBlock;
    exclusive_ = p.exclusive;
    reverse_ = p.reverse;
    dtype_ = x.dtype;
  }

  void Run(const KernelIO& io) const override {
    if (outer_ * dim_ * inner_ == 0) return;
    switch (dtype_) {
      case DType::kFloat32: RunTyped<float>(io); break;
      case DType::kFloat64: RunTyped<double>(io); break;
      case DType::kInt32: RunTyped<int32_t>(io); break;
      default: RunTyped<int64_t>(io); break;
    }
  }

 private:
  template <typename T>
  void RunTyped(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    T* y = static_cast<T*>(io.outputs[0]);
    if (inner_ < kLineInner) {
      io.pool->ParallelFor(outer_ * inner_, 2.0 * dim_, [&](int64_t b, int64_t e) {
        for (int64_t line = b; line < e; ++line) {
          const int64_t o = line / inner_, j = line % inner_;
          const int64_t step = reverse_ ? -inner_ : inner_;
          const int64_t first = o * dim_ * inner_ + j + (reverse_ ? (dim_ - 1) * inner_ : 0);
          const T* xp = x + first;
          T* yp = y + first;
          T acc = T(0);
          for (int64_t s = 0; s < dim_; ++s, xp += step, yp += step) {
            if (exclusive_) {
              *yp = acc;
              acc += *xp;
            } else {
              acc += *xp;
              *yp = acc;
            }
          }
        }
      });
      return;
    }
    const double cost = static_cast<double>(dim_ * std::min(inner_, kBlock)) * 2.0;
    io.pool->ParallelFor(outer_ * blocks_, cost, [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        const int64_t o = item / blocks_, j0 = (item % blocks_) * kBlock;
        const int64_t j1 = std::min(inner_, j0 + kBlock);
        const T* xo = x + o * dim_ * inner_;
        T* yo = y + o * dim_ * inner_;
        for (int64_t s = 0; s < dim_; ++s) {
          const int64_t t = reverse_ ? dim_ - 1 - s : s;       // position written
          const int64_t prev = reverse_ ? t + 1 : t - 1;      // previous position
          T* yr = yo + t * inner_;
          if (s == 0) {
            for (int64_t j = j0; j < j1; ++j) yr[j] = exclusive_ ? T(0) : xo[t * inner_ + j];
          } else {
            const T* yp = yo + prev * inner_;
            const T* add = xo + (exclusive_ ? prev : t) * inner_;
            for (int64_t j = j0; j < j1; ++j) yr[j] = yp[j] + add[j];
          }
        }
      }
    });
  }

  int64_t dim_ = 0, outer_ = 1, inner_ = 1, blocks_ = 1;
  bool exclusive_ = false, reverse_ = false;
  DType dtype_ = DType::kFloat32;
};

}  // namespace

void RegisterGameCumSumKernels(KernelRegistry& r) {
  r.Register(OpId::kCumSum, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64},
             &MakeKernel<CumSumKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
