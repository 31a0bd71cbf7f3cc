// Expand (numpy broadcast to a shape) and Tile (repeat along each axis): both
// are strided copies whose broadcast dims read with stride 0.
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"

namespace kaiwu {
namespace cpu {
namespace {

class ExpandKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.in(0);
    std::vector<int64_t> target = ctx.ConstInts(1);
    Shape out = BroadcastShapes(ctx, x.shape, target);
    size_t lead = out.size() - x.shape.size();
    std::vector<int64_t> in_strides = Strides(x.shape);
    std::vector<int64_t> strides(out.size(), 0);
    for (size_t d = lead; d < out.size(); ++d)
      strides[d] = x.shape[d - lead] == 1 ? 0 : in_strides[d - lead];
    copy_.Init(ctx, out, strides, 0, DTypeSize(x.dtype));
    ctx.SetOutput(0, x.dtype, std::move(out));
  }
  void Run(const KernelIO& io) const override { copy_.Run(io.inputs[0], io.outputs[0], io.pool); }

 private:
  StridedCopy copy_;
};

// Tile's output, viewed as (r0, d0, r1, d1, ...), reads input dim k with its
// stride and repeat dim k with stride 0.
class TileKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.in(0);
    std::vector<int64_t> repeats = ctx.ConstInts(1);
    if (static_cast<int>(repeats.size()) != x.rank())
      ctx.Error("repeats has ", repeats.size(), " entries for an input of rank ", x.rank());
    std::vector<int64_t> in_strides = Strides(x.shape);
    Shape view, out;
    std::vector<int64_t> strides;
    for (int d = 0; d < x.rank(); ++d) {
      if (repeats[d] < 0) ctx.Error("repeats must be non-negative, got ", repeats[d]);
      view.push_back(repeats[d]);
      strides.push_back(0);
      view.push_back(x.shape[d]);
      strides.push_back(in_strides[d]);
      out.push_back(repeats[d] * x.shape[d]);
    }
    copy_.Init(ctx, view, strides, 0, DTypeSize(x.dtype));
    ctx.SetOutput(0, x.dtype, std::move(out));
  }
  void Run(const KernelIO& io) const override { copy_.Run(io.inputs[0], io.outputs[0], io.pool); }

 private:
  StridedCopy copy_;
};

}  // namespace

void RegisterTensorExpandKernels(KernelRegistry& r) {
  r.Register(OpId::kExpand, kAnyDType, &MakeKernel<ExpandKernel>);
  r.Register(OpId::kTile, kAnyDType, &MakeKernel<TileKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
