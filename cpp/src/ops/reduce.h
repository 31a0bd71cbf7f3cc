// The checked attributes of Reduce*, ArgMax and ArgMin (ops/reduce.cc), which
// the kernels of every backend read.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op_context.h"

namespace kaiwu {
namespace reduce {

/// Which Reduce* op a node is.
enum class ReduceKind { kSum, kMean, kMax, kMin, kProd, kL1, kL2, kSumSquare, kLogSum, kLogSumExp };

}  // namespace reduce

/// Most input dims a Reduce* node may have.
constexpr int kMaxReduceRank = 16;

/// Reduce*: the reduction, which input dims it reduces (its axes, input 1 or
/// the "axes" attribute, or every dim when none are given) and how many
/// elements each output combines. keepdims is already in the output shape.
struct ReduceParams : OpParams {
  reduce::ReduceKind kind = reduce::ReduceKind::kSum;
  std::vector<bool> reduced;  // per input dim
  /// No axes and noop_with_empty_axes: nothing is reduced, the output is the input.
  bool copy = false;
  int64_t count = 1;  // elements reduced into each output (0 for an empty reduced dim)
};

/// ArgMax / ArgMin: the axis scanned (normalised, its size > 0) and whether
/// ties pick the last index. keepdims is already in the output shape.
struct ArgReduceParams : OpParams {
  bool is_max = true;
  int64_t axis = 0;
  bool select_last_index = false;
};

}  // namespace kaiwu
