// Mixed precision for device sessions (precision="fp16" / "bf16"): the nodes
// whose math tolerates a 16-bit float and whose backend has a kernel for it
// read and write float16 (or bfloat16) tensors; everything else stays float32.
//
// - Compute ops (Conv, Gemm, MatMul, elementwise arithmetic and activations,
//   pooling, fused elementwise chains) go to half when all their float inputs
//   are float32 tensors and the backend has a (op, half dtype) kernel.
// - Data-movement ops (Reshape, Transpose, Concat, Slice, ...) go to half only
//   when one of their inputs already is half, so the graph casts once.
// - Softmax, LayerNormalization, ReduceMean/Max/Min, Sqrt and Erf compute in
//   float32 inside their kernels; they read and write half only when an input
//   already is half (results bounded by their inputs, so no new overflow).
// - Other normalisations and reductions, LogSoftmax, LSTM/GRU/RNN, Exp/Log/Pow,
//   nodes computed from weights alone or from shapes when planned, and every
//   node or op type named in keep_fp32 stay float32. LSTM and GRU keep float32
//   state, gate math and R, with their GEMMs on tensor cores (Node::tf32_gemms);
//   where a half node already made X and the backend has the op's half kernel
//   they read X and W (cast with the weights) in half and write Y in half; an
//   fp16 GRU with linear_before_reset and hidden <= 128, a multiple of 16, also
//   reads R in float16 (its tensor-core sequence kernels' operand type).
// - A Cast node is added where a float32 value enters a half node and where a
//   half value leaves for a float32 node or a graph output. Casts of weights
//   belong to the static weight program: weights are converted at load and at
//   every refit, which still takes float32 arrays.
// Graph inputs and outputs keep the model's dtypes.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "ops/op.h"

namespace kaiwu {

struct MixedPrecisionOptions {
  DType half = DType::kFloat16;          ///< kFloat16 or kBFloat16
  std::vector<std::string> keep_fp32;    ///< node names or op types kept in float32
  /// Whether the backend has a kernel for (op, dtype of its type input).
  std::function<bool(OpId, DType)> has_kernel;
};

struct MixedPrecisionReport {
  struct Entry {
    std::string node, op_type;
    bool half = false;
    std::string reason;  ///< why a float node stays float32 (empty when half)
  };
  std::vector<Entry> nodes;  ///< every node with a float32 input, in graph order
  int casts = 0;             ///< Cast nodes added
  int half_nodes() const;
};

/// Rewrites `g` in place (then g->Verify()); returns what ran in which precision.
MixedPrecisionReport ApplyMixedPrecision(Graph* g, const MixedPrecisionOptions& options);

}  // namespace kaiwu
