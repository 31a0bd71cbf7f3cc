// Host-side geometry of the strided copies, shared by the CPU kernels
// (cpu/tensor_util.cc, cpu/tensor_{transpose,slice,expand}.cc) and the CUDA
// kernels (cuda/tensor_util.cu, cuda/tensor_strided.cu): each op's checked
// attributes (ops/tensor.h) as input strides of one row-major output.
#pragma once

#include <cstdint>
#include <vector>

#include "kaiwu/tensor.h"
#include "ops/tensor.h"

namespace kaiwu {

/// The dims of a strided copy (out[i] = in[offset + sum_d i_d * in_strides[d]],
/// row-major output) with size-1 dims dropped and each dim merged into the one
/// before it when the two are contiguous in the input too. Fills *shape and
/// *strides (input strides, elements) with at least one dim; each backend
/// checks the count against its own limit.
void MergeCopyDims(const Shape& out_shape, const std::vector<int64_t>& in_strides,
                   std::vector<int64_t>* shape, std::vector<int64_t>* strides);

/// An op's output as a strided view of its input: the shape the copy walks,
/// the input stride (elements) of each of its dims and the input offset of the
/// first element (0 when the output is empty).
struct CopyView {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

/// Transpose: permuted strides.
CopyView TransposeCopyView(const Shape& in, const TransposeParams& p);
/// Slice of `in` to `out` (the inferred shape): strides scaled by the steps,
/// offset at the starts.
CopyView SliceCopyView(const Shape& in, const SliceParams& p, const Shape& out);
/// Expand of `in` to `out`: stride 0 on new and broadcast dims.
CopyView ExpandCopyView(const Shape& in, const Shape& out);
/// Tile, walked as (r0, d0, r1, d1, ...): input dim k with its stride, repeat
/// dim k with stride 0.
CopyView TileCopyView(const Shape& in, const TileParams& p);

}  // namespace kaiwu
