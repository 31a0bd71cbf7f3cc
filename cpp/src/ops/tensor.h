// The layout and indexing family (ops/tensor*.cc): the checked attributes its
// shape inference stores for the kernels, and host/device logic both backends
// share. Output shapes are in the inferred outputs; these hold what the
// shapes alone do not say.
#pragma once

#include <cstdint>
#include <vector>

#include "core/host_device.h"
#include "ops/op_registry.h"

namespace kaiwu {

/// Every dtype the engine stores. This family's kernels move elements by size,
/// so both backends register them for all of these (the op layer checks the
/// narrower rules: index dtypes, Dropout's float input).
#define KAIWU_ALL_DTYPES                                                                         \
  DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8, DType::kUInt8, \
      DType::kInt16, DType::kInt32, DType::kInt64, DType::kBool

/// Concat, Split, Gather, GatherElements: the axis, normalised to [0, rank).
struct AxisParams : OpParams {
  int64_t axis = 0;
};

/// Transpose: output dim d is input dim perm[d] (a checked permutation).
struct TransposeParams : OpParams {
  std::vector<int64_t> perm;
};

/// Tile: the repeats of each input dim (non-negative).
struct TileParams : OpParams {
  std::vector<int64_t> repeats;
};

/// Slice, per input dim: the first element read, clamped as ONNX does (0 on
/// dims not sliced), and the step (1 on dims not sliced, negative reads
/// backwards). The output shape holds the element counts.
struct SliceParams : OpParams {
  std::vector<int64_t> starts;
  std::vector<int64_t> steps;
};

/// GatherND: the number of leading batch dims shared by data and indices.
struct GatherNDParams : OpParams {
  int64_t batch_dims = 0;
};

/// OneHot: the output axis of the depth dim (normalised against the output
/// rank) and the depth.
struct OneHotParams : OpParams {
  int64_t axis = 0;
  int64_t depth = 1;
};

enum class PadMode : int { kConstant, kReflect, kEdge, kWrap };

/// Pad: the mode, the leading pad of every input dim (negative crops; the
/// output shape gives the trailing one) and where the constant comes from.
struct PadParams : OpParams {
  PadMode mode = PadMode::kConstant;
  std::vector<int64_t> begin;
  /// The constant is input 2, read when the step runs (opset 11+).
  bool has_value_input = false;
  /// The constant otherwise: the `value` attribute (before opset 11) in the
  /// input's dtype, or zero.
  unsigned char default_value[8] = {};
};

/// Pad's source coordinate along a dim of size `dim` for i = output coordinate
/// minus the leading pad, or -1 where the output takes the constant.
KAIWU_HOST_DEVICE inline int64_t PadSourceCoord(int64_t i, int64_t dim, PadMode mode) {
  if (i >= 0 && i < dim) return i;
  switch (mode) {
    case PadMode::kEdge: return i < 0 ? 0 : dim - 1;
    case PadMode::kWrap: return ((i % dim) + dim) % dim;
    case PadMode::kReflect: {
      if (dim == 1) return 0;
      const int64_t period = 2 * (dim - 1);
      const int64_t p = (i < 0 ? -i : i) % period;
      return p < dim ? p : period - p;
    }
    default: return -1;
  }
}

// The family's definitions, one function per file; RegisterTensorOps (tensor.cc)
// calls them all.
void RegisterTensorViewOps(OpRegistry& r);    // tensor_view.cc
void RegisterTensorGatherOps(OpRegistry& r);  // tensor_gather.cc
void RegisterTensorPadOps(OpRegistry& r);     // tensor_pad.cc

}  // namespace kaiwu
