// OneHot(indices, depth, values[off, on], axis). As the ONNX spec defines (and
// onnxruntime does), an index outside [-depth, depth - 1] yields an all-off
// row rather than an error; negative indices count from depth. Indices may be
// any int or float dtype (floats are truncated to int64, per the spec).
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backends/cpu/game_util.h"
#include "ops/tensor.h"

namespace kaiwu {
namespace cpu {
namespace {

class OneHotKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const OneHotParams& p = ctx.Params<OneHotParams>();
    const TensorInfo& ind = ctx.inputs[0];
    depth_ = p.depth;
    outer_ = NumElements(Shape(ind.shape.begin(), ind.shape.begin() + p.axis));
    inner_ = NumElements(Shape(ind.shape.begin() + p.axis, ind.shape.end()));
    index_dtype_ = ind.dtype;
    elem_ = DTypeSize(ctx.outputs[0].dtype);
  }

  void Run(const KernelIO& io) const override {
    switch (elem_) {
      case 1: ByIndex<uint8_t>(io); break;
      case 2: ByIndex<uint16_t>(io); break;
      case 4: ByIndex<uint32_t>(io); break;
      default: ByIndex<uint64_t>(io); break;
    }
  }

 private:
  template <typename U>
  void ByIndex(const KernelIO& io) const {
    switch (index_dtype_) {
      case DType::kInt64: RunTyped<U, int64_t>(io); break;
      case DType::kInt32: RunTyped<U, int32_t>(io); break;
      case DType::kFloat32: RunTyped<U, float>(io); break;
      case DType::kFloat64: RunTyped<U, double>(io); break;
      case DType::kInt8: RunTyped<U, int8_t>(io); break;
      case DType::kUInt8: RunTyped<U, uint8_t>(io); break;
      default: RunTyped<U, int16_t>(io); break;
    }
  }

  template <typename U, typename I>
  void RunTyped(const KernelIO& io) const {
    const I* idx = static_cast<const I*>(io.inputs[0]);
    const U* values = static_cast<const U*>(io.inputs[2]);
    U* y = static_cast<U*>(io.outputs[0]);
    const U off = values[0], on = values[1];
    io.pool->ParallelFor(outer_, static_cast<double>(depth_ * inner_) + 4.0,
                         [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        U* block = y + o * depth_ * inner_;
        std::fill(block, block + depth_ * inner_, off);
        const I* row = idx + o * inner_;
        for (int64_t i = 0; i < inner_; ++i) {
          if constexpr (std::is_floating_point_v<I>) {
            if (!(std::abs(row[i]) < static_cast<I>(depth_ + 1))) continue;  // also NaN
          }
          int64_t k = static_cast<int64_t>(row[i]);
          if (k < 0) k += depth_;
          if (k >= 0 && k < depth_) block[k * inner_ + i] = on;
        }
      }
    });
  }

  int64_t depth_ = 1, outer_ = 1, inner_ = 1;
  DType index_dtype_ = DType::kInt64;
  size_t elem_ = 4;
};

}  // namespace

void RegisterGameOneHotKernels(KernelRegistry& r) {
  r.Register(OpId::kOneHot, {KAIWU_ALL_DTYPES}, &MakeKernel<OneHotKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
