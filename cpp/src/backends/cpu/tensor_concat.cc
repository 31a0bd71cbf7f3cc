// Concat and Split: along `axis` every tensor is (outer, rows_i * inner);
// both copy one contiguous block per (outer index, tensor).
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"
#include "ops/tensor.h"

namespace kaiwu {
namespace cpu {
namespace {

// outer = prod(shape[:axis]), inner = prod(shape[axis+1:]).
void OuterInner(const Shape& shape, int64_t axis, int64_t* outer, int64_t* inner) {
  *outer = 1;
  *inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis) *outer *= shape[d];
    if (d > axis) *inner *= shape[d];
  }
}

class ConcatKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const int64_t axis = ctx.Params<AxisParams>().axis;
    const Shape& out = ctx.outputs[0].shape;
    const size_t elem = DTypeSize(ctx.outputs[0].dtype);
    row_bytes_.clear();
    for (const TensorInfo& t : ctx.inputs) {
      int64_t outer, inner;
      OuterInner(t.shape, axis, &outer, &inner);
      row_bytes_.push_back(static_cast<size_t>(t.shape[axis] * inner) * elem);
    }
    OuterInner(out, axis, &outer_, &out_row_bytes_);
    out_row_bytes_ = static_cast<int64_t>(out[axis] * out_row_bytes_ * elem);
  }

  void Run(const KernelIO& io) const override {
    char* out = static_cast<char*>(io.outputs[0]);
    if (outer_ == 1) {  // axis 0 (or leading ones): one block per input
      size_t pos = 0;
      for (size_t i = 0; i < row_bytes_.size(); ++i) {
        ParallelCopy(out + pos, io.inputs[i], row_bytes_[i], io.pool);
        pos += row_bytes_[i];
      }
      return;
    }
    io.pool->ParallelFor(outer_, out_row_bytes_ / 4.0 + 4.0 * row_bytes_.size(),
                         [this, &io](int64_t b, int64_t e) {
      char* out = static_cast<char*>(io.outputs[0]);
      for (int64_t o = b; o < e; ++o) {
        char* dst = out + o * out_row_bytes_;
        for (size_t i = 0; i < row_bytes_.size(); ++i) {
          std::memcpy(dst, static_cast<const char*>(io.inputs[i]) + o * row_bytes_[i],
                      row_bytes_[i]);
          dst += row_bytes_[i];
        }
      }
    });
  }

 private:
  std::vector<size_t> row_bytes_;  // per input: bytes per outer index
  int64_t outer_ = 1;
  int64_t out_row_bytes_ = 0;
};

// Split: the op layer chose the sizes (the outputs' extents along the axis).
class SplitKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.inputs[0];
    const int64_t axis = ctx.Params<AxisParams>().axis;
    int64_t inner;
    OuterInner(x.shape, axis, &outer_, &inner);
    const size_t elem = DTypeSize(x.dtype);
    in_row_bytes_ = static_cast<size_t>(x.shape[axis] * inner) * elem;
    row_bytes_.clear();
    for (const TensorInfo& o : ctx.outputs)
      row_bytes_.push_back(static_cast<size_t>(o.shape[axis] * inner) * elem);
  }

  void Run(const KernelIO& io) const override {
    const char* in = static_cast<const char*>(io.inputs[0]);
    if (outer_ == 1) {
      size_t pos = 0;
      for (size_t i = 0; i < row_bytes_.size(); ++i) {
        if (io.outputs[i]) ParallelCopy(io.outputs[i], in + pos, row_bytes_[i], io.pool);
        pos += row_bytes_[i];
      }
      return;
    }
    io.pool->ParallelFor(outer_, in_row_bytes_ / 4.0 + 4.0 * row_bytes_.size(),
                         [this, &io](int64_t b, int64_t e) {
      const char* in = static_cast<const char*>(io.inputs[0]);
      for (int64_t o = b; o < e; ++o) {
        const char* src = in + o * in_row_bytes_;
        for (size_t i = 0; i < row_bytes_.size(); ++i) {
          if (io.outputs[i])
            std::memcpy(static_cast<char*>(io.outputs[i]) + o * row_bytes_[i], src, row_bytes_[i]);
          src += row_bytes_[i];
        }
      }
    });
  }

 private:
  std::vector<size_t> row_bytes_;  // per output: bytes per outer index
  size_t in_row_bytes_ = 0;
  int64_t outer_ = 1;
};

}  // namespace

void RegisterTensorConcatKernels(KernelRegistry& r) {
  r.Register(OpId::kConcat, {KAIWU_ALL_DTYPES}, &MakeKernel<ConcatKernel>);
  r.Register(OpId::kSplit, {KAIWU_ALL_DTYPES}, &MakeKernel<SplitKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
