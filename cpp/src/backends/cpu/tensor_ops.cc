// The shape and data-movement family: each concept lives in its own
// tensor_*.cc file and registers itself through tensor_util.h.
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"

namespace kaiwu {
namespace cpu {

void RegisterTensorKernels(KernelRegistry& r) {
  RegisterTensorViewKernels(r);       // Reshape Flatten Squeeze Unsqueeze Identity Dropout
  RegisterTensorTransposeKernels(r);  // Transpose
  RegisterTensorExpandKernels(r);     // Expand Tile
  RegisterTensorConcatKernels(r);     // Concat Split
  RegisterTensorSliceKernels(r);      // Slice
  RegisterTensorGatherKernels(r);     // Gather GatherElements
  RegisterTensorPadKernels(r);        // Pad
}

}  // namespace cpu
}  // namespace kaiwu
