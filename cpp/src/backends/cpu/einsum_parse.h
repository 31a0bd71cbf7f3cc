// Parsing of Einsum equations into per-operand label lists.
#pragma once

#include <string>
#include <vector>

#include "backends/kernel.h"

namespace kaiwu {
namespace cpu {

/// Labels are small ints: a letter is its ASCII code; the j-th dim covered by
/// an ellipsis (right-aligned across operands) is kEllipsisLabel + j.
constexpr int kEllipsisLabel = 128;

struct EinsumSpec {
  std::vector<std::vector<int>> inputs;  // labels per input, one per dim
  std::vector<int> output;               // labels of the output, one per dim
};

/// Parses `equation` for inputs of the given ranks. Explicit ("...->...") and
/// implicit output forms are accepted; a label repeated within one operand
/// (diagonals, traces) is refused with ctx.Error.
EinsumSpec ParseEinsum(const PrepareContext& ctx, const std::string& equation,
                       const std::vector<int>& ranks);

}  // namespace cpu
}  // namespace kaiwu
