// The game-policy op family's meaning, shared by every backend: the checked
// attributes of ScatterElements, ScatterND, TopK and CumSum (Resize's are in
// ops/resize.h), the scatter reduction modes, and the reduction modes.
#pragma once

#include <cstdint>
#include <vector>

#include "ops/op_context.h"

namespace kaiwu {

/// The `reduction` attribute of ScatterND / ScatterElements.
enum class Reduction { kNone, kAdd, kMul, kMax, kMin };
/// Reads `reduction` ("none" by default); an unknown value is a model error.
Reduction ParseReduction(const OpContext& ctx);
/// The attribute value of `r` ("none", "add", ...).
const char* ReductionName(Reduction r);

/// Most dims ScatterElements' data (and indices) may have.
constexpr int kMaxScatterElementsRank = 16;

/// ScatterElements and ScatterND: data, indices (int64 / int32), updates.
struct ScatterParams : OpParams {
  Reduction reduction = Reduction::kNone;
  int axis = 0;  // ScatterElements: the indexed axis, normalised
};

/// TopK(X, K): the k best along `axis` (normalised), largest or smallest first.
struct TopKParams : OpParams {
  int axis = 0;
  int64_t k = 0;
  bool largest = true;
};

/// CumSum(X, axis): running sums along `axis` (normalised).
struct CumSumParams : OpParams {
  int axis = 0;
  bool exclusive = false;
  bool reverse = false;
};

}  // namespace kaiwu
