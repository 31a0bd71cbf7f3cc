// Small dense networks as one node, for device sessions in half precision: a
// policy's MLP body and heads are GEMMs of a few hundred columns on a few
// rows, where each layer's GEMM and bias/activation launches, and the casts at
// the network's edges, cost more than the math. This pass groups Gemm nodes
// (transA 0, alpha 1, beta 1, static weights and a static [N] bias, an
// optional fused activation, a 16-bit 2-D input) that read one graph value X
// or each other's outputs into one FusedMlp node (ops/linalg.h), which the
// CUDA backend runs in one launch. A Cast from float32 feeding only the group
// is folded into it (X read as float32), and so is a Cast to float32 that is
// the only reader of a layer's output (the output written as float32).
// With `wide`, layers over X of any rank join too: a MatMul of a static [K, N]
// read by an Add of a static [N] bias, and a Gemm between fuse_matmul_add's
// flattening Reshapes (X [.., K] -> [-1, K] -> Gemm -> [.., N]); a group of
// these may be one layer, and its node gets max_rows = kFusedMlpWideMaxRows
// (more rows run as cuBLAS GEMMs with a bias epilogue, still one node).
// KAIWU_FUSED_MLP=0 turns it off in a session, KAIWU_FUSED_MLP_RANK3=0 only
// `wide` (A/B: bench/notes/cuda.md).
#pragma once

#include <functional>

#include "ir/graph.h"
#include "ops/op.h"

namespace kaiwu {

/// Limits of a group, so that the CUDA kernel's shared memory holds it: every
/// layer's K and N; one layer's weights as staged ([round8(N)][round16(K) + 8]
/// elements); all layers' weights; the row buffers (X and every layer output a
/// later layer reads, each round16(width) + 8 elements). These are the CUDA
/// one-block kernel's; the cluster kernel (backends/cuda/fused_mlp_cluster.cuh)
/// holds a share of every layer's weights per block and runs only where those
/// fit, else the one-block kernel does, so they stay the limits of the group.
constexpr int64_t kFusedMlpMaxWidth = 1024;
constexpr int64_t kFusedMlpMaxStage = 80 * 1024;
constexpr int64_t kFusedMlpMaxWeights = int64_t{1} << 20;
constexpr int64_t kFusedMlpMaxRowElems = 1920;
/// Rows up to which the wide groups run the fused kernel: gru_seq at 256 rows ran 430k rows/s
/// fused against 372k on GEMMs, at 2048 rows 2.65M against 3.06M (bench/notes/cuda.md).
constexpr int64_t kFusedMlpWideMaxRows = 256;
/// The same for a group of one wide layer: the fused kernel's fixed cost (weights staged
/// before the first product, ~7 us a launch) is more than one cuBLAS GEMM with its bias
/// epilogue past a few rows: unit_transformer's eight single layers (32 rows at batch 1)
/// ran 0.76x PyTorch fused and 0.98x as GEMMs (bench/notes/cuda.md).
constexpr int64_t kFusedMlpWideSingleMaxRows = 16;

/// Rewrites `g` in place (then g->Verify()); `has_kernel(op, dtype)` says
/// whether the backend runs FusedMlp. Returns the FusedMlp nodes made.
int FuseMlp(Graph* g, const std::function<bool(OpId, DType)>& has_kernel, bool wide = true);

}  // namespace kaiwu
