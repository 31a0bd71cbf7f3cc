#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/quant_kernels.h"

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
    cpu::RegisterQuantKernels(r);
    return r;
  }();
  return registry;
}

}  // namespace kaiwu
