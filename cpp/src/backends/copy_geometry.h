// Host-side geometry of the strided copies, shared by the CPU kernels
// (cpu/tensor_util.cc, cpu/tensor_slice.cc) and the CUDA kernels
// (cuda/tensor_util.cu, cuda/tensor_strided.cu).
#pragma once

#include <cstdint>
#include <vector>

#include "backends/kernel.h"

namespace kaiwu {

/// The dims of a strided copy (out[i] = in[offset + sum_d i_d * in_strides[d]],
/// row-major output) with size-1 dims dropped and each dim merged into the one
/// before it when the two are contiguous in the input too. Fills *shape and
/// *strides (input strides, elements) with at least one dim; each backend
/// checks the count against its own limit.
void MergeCopyDims(const Shape& out_shape, const std::vector<int64_t>& in_strides,
                   std::vector<int64_t>* shape, std::vector<int64_t>* strides);

/// A Slice as a strided view of its input: the output shape, the input stride
/// of each output dim (scaled by the step) and the input offset of the first
/// element (0 when the output is empty).
struct SliceView {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

/// Reads a Slice node's starts, ends, axes and steps (inputs from opset 10,
/// attributes before), checks them and clamps them as ONNX does (negative
/// steps included). Errors name the node.
SliceView ComputeSliceView(const PrepareContext& ctx);

}  // namespace kaiwu
