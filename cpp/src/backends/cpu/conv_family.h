// Registration of the CPU conv family: RegisterConvKernels (conv.cc) also
// registers the pooling kernels and the channels-last ones.
#pragma once

#include "backends/kernel.h"

namespace kaiwu {
namespace cpu {

void RegisterPoolKernels(KernelRegistry& r);  // pool_kernels.cc
void RegisterNhwcKernels(KernelRegistry& r);  // conv_nhwc.cc: NhwcConv, NhwcMaxPool

}  // namespace cpu
}  // namespace kaiwu
