// Registration of the CPU conv family: RegisterConvKernels (conv.cc) also
// registers the pooling kernels.
#pragma once

#include "backends/kernel.h"

namespace kaiwu {
namespace cpu {

void RegisterPoolKernels(KernelRegistry& r);  // pool_kernels.cc

}  // namespace cpu
}  // namespace kaiwu
