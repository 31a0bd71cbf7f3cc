// Slice: starts/ends/axes/steps inputs (opset 10+; attributes before), with
// ONNX clamping and negative steps; runs as a strided copy.
#include <algorithm>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"

namespace kaiwu {
namespace cpu {
namespace {

class SliceKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.in(0);
    const int64_t rank = x.rank();
    std::vector<int64_t> starts, ends, axes, steps;
    if (ctx.node.opset >= 10) {
      starts = ctx.ConstInts(1);
      ends = ctx.ConstInts(2);
      if (ctx.HasInput(3)) axes = ctx.ConstInts(3);
      if (ctx.HasInput(4)) steps = ctx.ConstInts(4);
    } else {
      starts = ctx.node.GetInts("starts");
      ends = ctx.node.GetInts("ends");
      axes = ctx.node.GetInts("axes");
    }
    const size_t n = starts.size();
    if (ends.size() != n) ctx.Error("starts and ends have different lengths");
    if (axes.empty()) {
      if (static_cast<int64_t>(n) > rank) ctx.Error("more starts than input dims");
      for (size_t i = 0; i < n; ++i) axes.push_back(static_cast<int64_t>(i));
    }
    if (steps.empty()) steps.assign(n, 1);
    if (axes.size() != n || steps.size() != n)
      ctx.Error("starts, ends, axes and steps must have the same length");

    std::vector<int64_t> in_strides = Strides(x.shape);
    Shape out = x.shape;
    std::vector<int64_t> strides = in_strides;
    std::vector<bool> seen(rank, false);
    int64_t offset = 0;
    for (size_t i = 0; i < n; ++i) {
      int64_t axis = NormalizeAxis(ctx, axes[i], rank);
      if (seen[axis]) ctx.Error("axis ", axes[i], " is repeated");
      seen[axis] = true;
      const int64_t dim = x.shape[axis], step = steps[i];
      if (step == 0) ctx.Error("steps must not be zero");
      int64_t start = starts[i], end = ends[i];
      if (start < 0) start += dim;
      if (end < 0) end += dim;
      int64_t count;
      if (dim == 0) {
        start = 0;
        count = 0;
      } else if (step > 0) {
        start = std::clamp<int64_t>(start, 0, dim);
        end = std::clamp<int64_t>(end, 0, dim);
        count = end > start ? (end - start - 1) / step + 1 : 0;
      } else {
        start = std::clamp<int64_t>(start, 0, dim - 1);
        end = std::clamp<int64_t>(end, -1, dim - 1);
        count = start > end ? (start - end - 1) / -step + 1 : 0;
      }
      out[axis] = count;
      if (count > 0) offset += start * in_strides[axis];
      strides[axis] = in_strides[axis] * step;
    }
    if (NumElements(out) == 0) offset = 0;
    copy_.Init(ctx, out, strides, offset, DTypeSize(x.dtype));
    ctx.SetOutput(0, x.dtype, std::move(out));
  }

  void Run(const KernelIO& io) const override { copy_.Run(io.inputs[0], io.outputs[0], io.pool); }

 private:
  StridedCopy copy_;
};

}  // namespace

void RegisterTensorSliceKernels(KernelRegistry& r) {
  r.Register("Slice", &MakeKernel<SliceKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
