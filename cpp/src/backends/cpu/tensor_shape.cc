// Ops whose outputs come from shapes or plan-time constants: Shape, Size,
// ConstantOfShape, Range.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"

namespace kaiwu {
namespace cpu {
namespace {

// Shape (start/end from opset 15): computed from the input's shape alone.
class ShapeKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const Shape& in = ctx.in(0).shape;
    int64_t rank = static_cast<int64_t>(in.size());
    auto clamp = [rank](int64_t v) {
      if (v < 0) v += rank;
      return std::min(std::max<int64_t>(v, 0), rank);
    };
    int64_t start = clamp(ctx.node.GetInt("start", 0));
    int64_t end = clamp(ctx.node.GetInt("end", rank));
    dims_.assign(in.begin() + start, in.begin() + std::max(start, end));
    ctx.shape_only = true;
    ctx.SetOutput(0, DType::kInt64, {static_cast<int64_t>(dims_.size())});
  }
  void Run(const KernelIO& io) const override {
    if (!dims_.empty()) std::memcpy(io.outputs[0], dims_.data(), dims_.size() * sizeof(int64_t));
  }

 private:
  std::vector<int64_t> dims_;
};

class SizeKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    size_ = ctx.in(0).size();
    ctx.shape_only = true;
    ctx.SetOutput(0, DType::kInt64, {});
  }
  void Run(const KernelIO& io) const override { *static_cast<int64_t*>(io.outputs[0]) = size_; }

 private:
  int64_t size_ = 0;
};

// ConstantOfShape: input 0 is the shape; attribute `value` a one-element tensor.
class ConstantOfShapeKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    Shape shape = ctx.ConstInts(0);
    if (ctx.in(0).rank() > 1) ctx.Error("the shape input must be 1-D");
    dtype_ = DType::kFloat32;
    std::memset(value_, 0, sizeof(value_));
    if (ctx.node.Has("value")) {
      const std::shared_ptr<Tensor>& t = ctx.node.attrs.at("value").t;
      if (!t || t->size() != 1) ctx.Error("attribute 'value' must be a one-element tensor");
      dtype_ = t->dtype();
      if (DTypeSize(dtype_) == 0 || DTypeSize(dtype_) > sizeof(value_))
        ctx.Error("unsupported value dtype ", DTypeName(dtype_));
      std::memcpy(value_, t->data(), DTypeSize(dtype_));
    }
    count_ = NumElements(shape);
    ctx.SetOutput(0, dtype_, std::move(shape));
  }
  void Run(const KernelIO& io) const override {
    FillElements(io.outputs[0], value_, count_, DTypeSize(dtype_));
  }

 private:
  DType dtype_ = DType::kFloat32;
  unsigned char value_[8];
  int64_t count_ = 0;
};

// Range: start, limit and delta are scalars known when the plan is built.
class RangeKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    dtype_ = ctx.in(0).dtype;
    ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt16, DType::kInt32,
                        DType::kInt64});
    for (int i = 0; i < 3; ++i) {
      const TensorInfo& t = ctx.in(i);
      if (t.dtype != dtype_) ctx.Error("inputs must share one dtype");
      if (t.size() != 1) ctx.Error("input ", i, " must be a scalar, got ", ShapeToString(t.shape));
      if (!t.data) ctx.Error("input ", i, " must be known when the plan is built");
    }
    int64_t n = 0;
    KAIWU_DISPATCH_ALL(dtype_, {
      T start = *ctx.inputs[0].As<T>(), limit = *ctx.inputs[1].As<T>();
      T delta = *ctx.inputs[2].As<T>();
      if (delta == T(0)) ctx.Error("delta must not be zero");
      T diff = static_cast<T>(limit - start);
      double steps = std::ceil(static_cast<double>(diff) / static_cast<double>(delta));
      if (!std::isfinite(steps) || steps > 1e12) ctx.Error("range is too long or not finite");
      n = std::max<int64_t>(0, static_cast<int64_t>(steps));
      start_f_ = static_cast<double>(start);
      delta_f_ = static_cast<double>(delta);
      start_i_ = static_cast<int64_t>(start);
      delta_i_ = static_cast<int64_t>(delta);
    });
    count_ = n;
    ctx.SetOutput(0, dtype_, {n});
  }

  void Run(const KernelIO& io) const override {
    switch (dtype_) {
      case DType::kFloat32: Fill<float>(io.outputs[0], float(start_f_), float(delta_f_)); break;
      case DType::kFloat64: Fill<double>(io.outputs[0], start_f_, delta_f_); break;
      case DType::kInt16: Fill<int16_t>(io.outputs[0], int16_t(start_i_), int16_t(delta_i_)); break;
      case DType::kInt32: Fill<int32_t>(io.outputs[0], int32_t(start_i_), int32_t(delta_i_)); break;
      default: Fill<int64_t>(io.outputs[0], start_i_, delta_i_); break;
    }
  }

 private:
  template <typename T>
  void Fill(void* out, T start, T delta) const {
    T* o = static_cast<T*>(out);
    for (int64_t i = 0; i < count_; ++i) o[i] = static_cast<T>(start + static_cast<T>(i) * delta);
  }

  DType dtype_ = DType::kFloat32;
  double start_f_ = 0, delta_f_ = 1;
  int64_t start_i_ = 0, delta_i_ = 1;
  int64_t count_ = 0;
};

}  // namespace

void RegisterTensorShapeKernels(KernelRegistry& r) {
  r.Register("Shape", &MakeKernel<ShapeKernel>);
  r.Register("Size", &MakeKernel<SizeKernel>);
  r.Register("ConstantOfShape", &MakeKernel<ConstantOfShapeKernel>);
  r.Register("Range", &MakeKernel<RangeKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
