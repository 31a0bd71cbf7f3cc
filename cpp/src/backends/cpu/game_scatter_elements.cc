// ScatterElements(data, indices, updates; axis, reduction): a copy of data with
// out[i.. with i_axis = indices[i..]] = (or reduced with) updates[i..]. Indices
// are validated on the calling thread before anything is written. Updates apply
// in row-major order; threads split the coordinates before the axis, which two
// colliding updates always share, so duplicates resolve as in a serial loop.
#include <string>

#include "backends/cpu/game_util.h"
#include "backends/cpu/tensor_util.h"

namespace kaiwu {
namespace cpu {
namespace {

constexpr int kMaxRank = kMaxScatterElementsRank;  // checked by shape inference

class ScatterElementsKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const ScatterParams& p = ctx.Params<ScatterParams>();
    const TensorInfo& x = ctx.in(0);
    const TensorInfo& ind = ctx.in(1);
    axis_ = p.axis;
    reduction_ = p.reduction;
    shape_ = ind.shape;
    data_strides_ = RowMajorStrides(x.shape);
    dim_ = x.shape[axis_];
    count_ = ind.size();
    outer_ = NumElements(Shape(ind.shape.begin(), ind.shape.begin() + axis_));
    total_ = x.size();
    dtype_ = x.dtype;
    index64_ = ind.dtype == DType::kInt64;
    desc_ = ctx.node.Describe();
  }

  void Run(const KernelIO& io) const override {
    if (index64_) {
      Check(static_cast<const int64_t*>(io.inputs[1]));
    } else {
      Check(static_cast<const int32_t*>(io.inputs[1]));
    }
    if (io.outputs[0] != io.inputs[0])
      ParallelCopy(io.outputs[0], io.inputs[0], static_cast<size_t>(total_) * DTypeSize(dtype_),
                   io.pool);
    if (count_ == 0) return;
    if (index64_) {
      KAIWU_DISPATCH_ALL(dtype_, Apply<T, int64_t>(io));
    } else {
      KAIWU_DISPATCH_ALL(dtype_, Apply<T, int32_t>(io));
    }
  }

 private:
  template <typename I>
  void Check(const I* idx) const {
    for (int64_t i = 0; i < count_; ++i) CheckedIndex(idx[i], dim_, desc_, i);
  }

  template <typename T, typename I>
  void Apply(const KernelIO& io) const {
    const I* idx = static_cast<const I*>(io.inputs[1]);
    const T* upd = static_cast<const T*>(io.inputs[2]);
    T* y = static_cast<T*>(io.outputs[0]);
    const int64_t per_outer = count_ / outer_;
    io.pool->ParallelFor(outer_, static_cast<double>(per_outer) * 4.0, [&](int64_t b, int64_t e) {
      const int r = static_cast<int>(shape_.size());
      for (int64_t o = b; o < e; ++o) {
        // Data offset of the coordinates before the axis.
        int64_t base = 0, rem = o;
        for (int d = axis_ - 1; d >= 0; --d) {
          base += (rem % shape_[d]) * data_strides_[d];
          rem /= shape_[d];
        }
        int64_t coord[kMaxRank] = {0};  // odometer over dims axis_..r-1
        int64_t off = base;             // excluding the axis term
        for (int64_t p = o * per_outer; p < (o + 1) * per_outer; ++p) {
          int64_t k = idx[p] < 0 ? idx[p] + dim_ : idx[p];
          Reduce(reduction_, y[off + k * data_strides_[axis_]], upd[p]);
          for (int d = r - 1; d >= axis_; --d) {
            if (d != axis_) off += data_strides_[d];
            if (++coord[d] < shape_[d]) break;
            if (d != axis_) off -= coord[d] * data_strides_[d];
            coord[d] = 0;
          }
        }
      }
    });
  }

  Shape shape_;  // indices (= updates) shape
  std::vector<int64_t> data_strides_;
  int axis_ = 0;
  int64_t dim_ = 0, count_ = 0, outer_ = 1, total_ = 0;
  Reduction reduction_ = Reduction::kNone;
  DType dtype_ = DType::kFloat32;
  bool index64_ = true;
  std::string desc_;
};

}  // namespace

void RegisterGameScatterElementsKernels(KernelRegistry& r) {
  r.Register(OpId::kScatterElements,
             {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8, DType::kInt16,
              DType::kInt32, DType::kInt64, DType::kBool},
             &MakeKernel<ScatterElementsKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
