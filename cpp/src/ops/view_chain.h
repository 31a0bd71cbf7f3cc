// A chain of layout ops (Transpose, Reshape, Squeeze, Unsqueeze, Gather of one
// index) applied to a dense tensor, as one strided view of it: the shape the
// chain produces, each dim's element stride in the base tensor and the offset
// of element 0. FusedAttention reads its Q, K and V through such views
// (passes/fuse_attention.cc records the chains; the op layer composes them
// with the shapes of a plan).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kaiwu/tensor.h"

namespace kaiwu {

/// Record codes of a view recipe (a flat int list, one record after another).
enum class ViewStep : int64_t {
  kTranspose = 1,  // [1, rank, perm...]
  kReshape = 2,    // [2, target]: target names a 1-D int64 shape (0 copies a dim, -1 infers one)
  kSqueeze = 3,    // [3, count, axes...]
  kUnsqueeze = 4,  // [4, count, axes...]
  kGather = 5,     // [5, axis, index]: one index, the axis removed
};

struct StridedView {
  Shape shape;
  std::vector<int64_t> strides;  // elements, per dim of `shape`
  int64_t offset = 0;            // elements
};

/// Applies `recipe` to a contiguous tensor of shape `base`; `target(k)` gives
/// the shape of a Reshape record's target k. False when a record does not fit
/// the shape it meets, or when the result has a dim that one stride cannot
/// address (a Reshape merging dims that are not contiguous in the base).
bool ComposeView(const Shape& base, const std::vector<int64_t>& recipe,
                 const std::function<std::vector<int64_t>(int64_t)>& target, StridedView* out);

}  // namespace kaiwu
