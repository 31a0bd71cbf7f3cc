// The elementwise op family; each concept lives in its own elementwise_*.cc.
#include "backends/cpu/elementwise_util.h"

namespace kaiwu {
namespace cpu {

void RegisterElementwiseKernels(KernelRegistry& r) {
  RegisterArithmeticKernels(r);
  RegisterCompareKernels(r);
  RegisterUnaryKernels(r);
  RegisterActivationKernels(r);
  RegisterCastKernels(r);
  RegisterSelectKernels(r);
}

}  // namespace cpu
}  // namespace kaiwu
