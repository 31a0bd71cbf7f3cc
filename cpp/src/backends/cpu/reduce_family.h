// Registration of the reduce family's op groups, called from
// RegisterReduceKernels (reduce.cc).
#pragma once

#include "backends/kernel.h"

namespace kaiwu {
namespace cpu {

void RegisterSoftmaxKernels(KernelRegistry& r);    // softmax_kernels.cc
void RegisterArgReduceKernels(KernelRegistry& r);  // reduce_arg.cc

}  // namespace cpu
}  // namespace kaiwu
