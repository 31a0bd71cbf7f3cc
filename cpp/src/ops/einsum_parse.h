// Parsing of Einsum equations into per-operand label lists (the op layer's
// shape inference of Einsum, ops/linalg.cc).
#pragma once

#include <string>
#include <vector>

#include "ops/op_context.h"

namespace kaiwu {

/// Labels are small ints: a letter is its ASCII code; the j-th dim covered by
/// an ellipsis (right-aligned across operands) is kEllipsisLabel + j.
constexpr int kEllipsisLabel = 128;

struct EinsumSpec {
  std::vector<std::vector<int>> inputs;  // labels per input, one per dim
  std::vector<int> output;               // labels of the output, one per dim
};

/// Parses `equation` for inputs of the given ranks. Explicit ("...->...") and
/// implicit output forms are accepted. A label may repeat within an input
/// operand (a diagonal, or a trace when summed); the output's labels are unique.
EinsumSpec ParseEinsum(const OpContext& ctx, const std::string& equation,
                       const std::vector<int>& ranks);

}  // namespace kaiwu
