// Registration of the CUDA conv family: RegisterConvKernels (conv.cu) also
// registers the pooling (pool_kernels.cu) and normalisation (norm.cu) kernels.
#pragma once

#include "backends/kernel.h"

namespace kaiwu {
namespace cuda {

void RegisterPoolKernels(KernelRegistry& r);  // pool_kernels.cu
void RegisterNormKernels(KernelRegistry& r);  // norm.cu

}  // namespace cuda
}  // namespace kaiwu
