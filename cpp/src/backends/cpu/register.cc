#include "backends/cpu/cpu_kernels.h"

namespace kaiwu {

const KernelRegistry& CpuKernels() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    cpu::RegisterElementwiseKernels(r);
    cpu::RegisterLinalgKernels(r);
    cpu::RegisterConvKernels(r);
    cpu::RegisterNormKernels(r);
    cpu::RegisterReduceKernels(r);
    cpu::RegisterRnnKernels(r);
    cpu::RegisterTensorKernels(r);
    cpu::RegisterGameKernels(r);
    cpu::RegisterFusedKernels(r);
    return r;
  }();
  return registry;
}

namespace cpu {

int64_t NormalizeAxis(const PrepareContext& ctx, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1) || (rank == 0 && a != 0))
    ctx.Error("axis ", axis, " is out of range for rank ", rank);
  return a;
}

Shape BroadcastShapes(const PrepareContext& ctx, const Shape& a, const Shape& b) {
  size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      ctx.Error("shapes ", ShapeToString(a), " and ", ShapeToString(b), " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace cpu
}  // namespace kaiwu
