// ScatterND(data, indices, updates; reduction none/add/mul/max/min): a copy of
// data with the slices data[indices[i, :], ...] replaced by (or reduced with)
// updates[i, ...]. All index tuples are validated into scratch offsets before
// anything is written. Updates apply in index order (so with duplicates the
// last one wins for 'none'); threads split the slice columns, never the
// updates, so the result does not depend on the thread count.
#include <cstring>
#include <string>

#include "backends/cpu/game_util.h"
#include "backends/cpu/tensor_util.h"

namespace kaiwu {
namespace cpu {
namespace {

class ScatterNDKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.in(0);
    const TensorInfo& ind = ctx.in(1);
    reduction_ = ctx.Params<ScatterParams>().reduction;
    k_ = ind.shape[ind.rank() - 1];
    dims_.assign(x.shape.begin(), x.shape.begin() + k_);
    const std::vector<int64_t> strides = RowMajorStrides(x.shape);
    strides_.assign(strides.begin(), strides.begin() + k_);
    slice_ = NumElements(Shape(x.shape.begin() + k_, x.shape.end()));
    count_ = NumElements(Shape(ind.shape.begin(), ind.shape.end() - 1));
    total_ = x.size();
    dtype_ = x.dtype;
    index64_ = ind.dtype == DType::kInt64;
    desc_ = ctx.node.Describe();
    ctx.scratch_bytes = static_cast<size_t>(count_) * sizeof(int64_t);
  }

  void Run(const KernelIO& io) const override {
    int64_t* offsets = static_cast<int64_t*>(io.scratch);
    if (index64_) {
      Offsets(static_cast<const int64_t*>(io.inputs[1]), offsets);
    } else {
      Offsets(static_cast<const int32_t*>(io.inputs[1]), offsets);
    }
    if (io.outputs[0] != io.inputs[0])
      ParallelCopy(io.outputs[0], io.inputs[0], static_cast<size_t>(total_) * DTypeSize(dtype_),
                   io.pool);
    if (count_ == 0 || slice_ == 0) return;
    KAIWU_DISPATCH_ALL(dtype_, Apply<T>(io, offsets));
  }

 private:
  template <typename I>
  void Offsets(const I* idx, int64_t* offsets) const {
    for (int64_t i = 0; i < count_; ++i) {
      int64_t off = 0;
      for (int64_t j = 0; j < k_; ++j)
        off += CheckedIndex(idx[i * k_ + j], dims_[j], desc_, i * k_ + j) * strides_[j];
      offsets[i] = off;
    }
  }

  template <typename T>
  void Apply(const KernelIO& io, const int64_t* offsets) const {
    const T* upd = static_cast<const T*>(io.inputs[2]);
    T* y = static_cast<T*>(io.outputs[0]);
    io.pool->ParallelFor(slice_, static_cast<double>(count_) * 2.0, [&](int64_t j0, int64_t j1) {
      for (int64_t i = 0; i < count_; ++i) {
        T* dst = y + offsets[i];
        const T* src = upd + i * slice_;
        if (reduction_ == Reduction::kNone) {
          std::memcpy(dst + j0, src + j0, static_cast<size_t>(j1 - j0) * sizeof(T));
        } else {
          for (int64_t j = j0; j < j1; ++j) Reduce(reduction_, dst[j], src[j]);
        }
      }
    });
  }

  int64_t k_ = 1, slice_ = 1, count_ = 0, total_ = 0;
  std::vector<int64_t> dims_, strides_;
  Reduction reduction_ = Reduction::kNone;
  DType dtype_ = DType::kFloat32;
  bool index64_ = true;
  std::string desc_;
};

}  // namespace

void RegisterGameScatterNDKernels(KernelRegistry& r) {
  r.Register(OpId::kScatterND,
             {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8, DType::kInt16,
              DType::kInt32, DType::kInt64, DType::kBool},
             &MakeKernel<ScatterNDKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
