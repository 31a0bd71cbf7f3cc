// The rewrite rules. Each returns how many times it fired; the graph stays
// valid (Verify-able) after each call.
#pragma once

#include "ir/graph.h"

namespace kaiwu {

/// Identity and inference-mode Dropout: readers use the input directly.
int EliminateIdentity(Graph* g);
/// Conv followed by BatchNormalization becomes one Conv whose weight and bias
/// are computed from the originals by static nodes (recomputed on refit).
int FoldConvBatchNorm(Graph* g);
/// Conv/Gemm/MatMul followed by an activation (Relu, LeakyRelu, Tanh, Sigmoid,
/// Clip with constant bounds, HardSigmoid, HardSwish): the kernel applies it.
int FuseActivation(Graph* g);

}  // namespace kaiwu
