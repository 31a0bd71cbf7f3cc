// GatherND(data, indices, batch_dims): out[b.., i..] = data[b.., indices[b.., i.., :], ...].
// Every index tuple is validated (and turned into an element offset in scratch)
// on the calling thread before any output is written; the slices are then
// copied in parallel.
#include <cstring>
#include <string>

#include "backends/cpu/game_util.h"
#include "ops/tensor.h"

namespace kaiwu {
namespace cpu {
namespace {

class GatherNDKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.inputs[0];
    const TensorInfo& ind = ctx.inputs[1];
    const int q = ind.rank();
    const int64_t b = ctx.Params<GatherNDParams>().batch_dims;
    k_ = ind.shape[q - 1];
    dims_.assign(x.shape.begin() + b, x.shape.begin() + b + k_);
    const std::vector<int64_t> strides = RowMajorStrides(x.shape);
    strides_.assign(strides.begin() + b, strides.begin() + b + k_);
    slice_ = NumElements(Shape(x.shape.begin() + b + k_, x.shape.end()));
    count_ = NumElements(Shape(ind.shape.begin(), ind.shape.end() - 1));
    per_batch_ = NumElements(Shape(ind.shape.begin() + b, ind.shape.end() - 1));
    batch_stride_ = NumElements(Shape(x.shape.begin() + b, x.shape.end()));
    elem_ = DTypeSize(x.dtype);
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
    if (count_ == 0 || slice_ == 0) return;
    const char* src = static_cast<const char*>(io.inputs[0]);
    char* dst = static_cast<char*>(io.outputs[0]);
    const size_t bytes = static_cast<size_t>(slice_) * elem_;
    io.pool->ParallelFor(count_, static_cast<double>(slice_) + 4.0, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        std::memcpy(dst + i * bytes, src + offsets[i] * static_cast<int64_t>(elem_), bytes);
    });
  }

 private:
  template <typename I>
  void Offsets(const I* idx, int64_t* offsets) const {
    for (int64_t i = 0; i < count_; ++i) {
      int64_t off = (per_batch_ == 0 ? 0 : i / per_batch_) * batch_stride_;
      for (int64_t j = 0; j < k_; ++j)
        off += CheckedIndex(idx[i * k_ + j], dims_[j], desc_, i * k_ + j) * strides_[j];
      offsets[i] = off;
    }
  }

  int64_t k_ = 1, slice_ = 1, count_ = 0, per_batch_ = 1, batch_stride_ = 0;
  std::vector<int64_t> dims_, strides_;  // of the k indexed data dims
  size_t elem_ = 4;
  bool index64_ = true;
  std::string desc_;
};

}  // namespace

void RegisterGameGatherNDKernels(KernelRegistry& r) {
  r.Register(OpId::kGatherND, {KAIWU_ALL_DTYPES}, &MakeKernel<GatherNDKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
