// Transpose: a strided copy with permuted input strides. StridedCopy merges
// dims that stay adjacent, so NCHW<->NHWC and 2-D transposes become batched
// 2-D transposes run in cache-sized tiles, parallel over batch and row tiles.
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"

namespace kaiwu {
namespace cpu {
namespace {

class TransposeKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.in(0);
    int64_t rank = x.rank();
    std::vector<int64_t> perm = ctx.node.GetInts("perm");
    if (!ctx.node.Has("perm")) {
      for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
    }
    if (static_cast<int64_t>(perm.size()) != rank)
      ctx.Error("perm has ", perm.size(), " entries for an input of rank ", rank);
    std::vector<bool> seen(rank, false);
    for (int64_t p : perm) {
      if (p < 0 || p >= rank || seen[p]) ctx.Error("perm is not a permutation of 0..", rank - 1);
      seen[p] = true;
    }
    std::vector<int64_t> in_strides = Strides(x.shape);
    Shape out(rank);
    std::vector<int64_t> strides(rank);
    for (int64_t d = 0; d < rank; ++d) {
      out[d] = x.shape[perm[d]];
      strides[d] = in_strides[perm[d]];
    }
    copy_.Init(ctx, out, strides, 0, DTypeSize(x.dtype));
    ctx.SetOutput(0, x.dtype, std::move(out));
  }
  void Run(const KernelIO& io) const override { copy_.Run(io.inputs[0], io.outputs[0], io.pool); }

 private:
  StridedCopy copy_;
};

}  // namespace

void RegisterTensorTransposeKernels(KernelRegistry& r) {
  r.Register(OpId::kTranspose, kAnyDType, &MakeKernel<TransposeKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
