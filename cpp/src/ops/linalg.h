// The checked attributes of Gemm, MatMul and Einsum (shape inference in
// ops/linalg.cc), which the kernels of every backend read.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "ops/einsum_parse.h"
#include "ops/fused_activation.h"
#include "ops/op_context.h"

namespace kaiwu {

/// Gemm: Y = act(alpha * op(A) * op(B) + beta * C), op(A) [m, k], op(B) [k, n].
struct GemmParams : OpParams {
  bool trans_a = false, trans_b = false;
  float alpha = 1.f, beta = 1.f;
  int64_t m = 0, n = 0, k = 0;
  bool has_c = false;  // input C is present
  /// C's element strides over [m, n]: 0 along a dim that C broadcasts.
  int64_t c_row_stride = 0, c_col_stride = 0;
  FusedActivation act;  // float32 only
};

/// MatMul with numpy semantics: 1-D operands promoted to matrices (the added
/// dim is not in the output), leading batch dims broadcast.
struct MatMulParams : OpParams {
  int64_t m = 0, k = 0, n = 0;  // one product, after promotion
  Shape a_batch, b_batch;       // A's and B's batch dims (all but the last two)
  Shape batch;                  // their broadcast: the output's batch dims
  FusedActivation act;          // float32 only
  /// B given as [.., N, K] (the node's "_kaiwu_trans_b", set by
  /// passes/fold_transpose_into_matmul.cc for device sessions): Y = A * B^T.
  bool trans_b = false;
};

/// FusedMlp (domain "kaiwu", made by passes/fuse_mlp.cc for half-precision
/// device sessions): a small network of dense layers over one input X [.., K0]
/// (its leading dims flattened into M rows), layer l computing Y_l[.., N_l] =
/// act_l(In_l * W_l (^T) + B_l) where In_l is X or an earlier layer's Y; the
/// node's outputs are the layers' Ys that leave it, with X's leading dims.
/// Inputs: X (float32 or the weights' type), then W_l and B_l per layer (B_l
/// optional). Attributes: layer_inputs (-1: X, else a layer index), layer_trans_b,
/// layer_acts / layer_act_params (the fused-activation names and 2 params per
/// layer), output_layers (the layer of each output) and output_dtypes (ONNX
/// codes: float32 or the weights' type); optional max_rows: where M exceeds it
/// a backend may run the layers as separate GEMMs (0 or absent: no limit).
struct FusedMlpParams : OpParams {
  struct Layer {
    int input = -1;  // -1: X
    bool trans_b = true;
    bool has_bias = false;
    int64_t k = 0, n = 0;
    FusedActivation act;
  };
  std::vector<Layer> layers;
  std::vector<int> output_layers;
  int64_t m = 0;
  int64_t max_rows = 0;
};

/// FusedAttention (domain "kaiwu", made by passes/fuse_attention.cc for CPU and
/// device sessions): Y = MatMul(Softmax(scale * MatMul(Q, K) [+ Mask], axis -1), V), the ONNX
/// ops' semantics (batch dims broadcast, the mask broadcast to the scores) for
/// Q, K and V of rank >= 2. Inputs: Q [.., N, D], K [.., D, M] (or [.., M, D]
/// with k_trans = 1, a MatMul's _kaiwu_trans_b), V [.., M, DV], optional Mask;
/// one type T for all; attribute scale (float, default 1), times the optional
/// inputs 4 and 5 (one-element factors of Q and K, any float type, known when
/// the plan is made: values computed from shapes); attribute y_perm (ints,
/// optional, last axis last): the output is Y transposed by it; optional inputs
/// 6, 7, 8 with ints attributes q_view, k_view, v_view: the tensors Q, K and V
/// are made from by layout ops, and the recipe of those ops (their Reshape
/// targets further inputs), read in place where the plan's shapes allow (the
/// node then leaves inputs 0-2 unread). The params give,
/// for each input, its element strides over Y's batch dims (0 where it is
/// broadcast) and over the query row, key and inner dims, so a kernel reads
/// every input in place.
struct FusedAttentionParams : OpParams {
  static constexpr int kMaxBatchDims = 6;
  Shape batch;                 // Y's batch dims (at most kMaxBatchDims)
  int64_t n = 0, m = 0, d = 0, dv = 0;
  bool has_mask = false;
  float scale = 1.f;
  // Strides in elements; [k] for batch dim k.
  std::vector<int64_t> q_batch, k_batch, v_batch, mask_batch;
  int64_t q_row = 0, q_inner = 1;     // Q[.., i, t]
  int64_t k_key = 0, k_inner = 0;     // K's element (t, j)
  int64_t v_key = 0;                  // V[.., j, c] = v_key * j + c
  int64_t mask_row = 0, mask_key = 0; // Mask's element (i, j)
  // Y's element (batch index, i, c) at sum(index[k] * y_batch[k]) + i * y_row + c:
  // dense, or the layout of a Transpose folded into the node (attribute y_perm,
  // which keeps the last axis last; the output is then Y transposed by it).
  std::vector<int64_t> y_batch;
  int64_t y_row = 0;
  // Where Q, K and V are read: node inputs 0, 1, 2, or 6, 7, 8 (the tensors
  // their layout ops start from, through the q_view / k_view / v_view recipes
  // of ops/view_chain.h, when the plan's shapes let one stride a dim address
  // them), and the element each starts at.
  int q_input = 0, k_input = 1, v_input = 2;
  int64_t q_offset = 0, k_offset = 0, v_offset = 0;
};

/// PackedGemm (domain "kaiwu", made by passes/prepack_gemm.cc for CPU
/// sessions): Y[.., n] = act(A[.., k] * B + bias) with B packed in column
/// panels [ceil(n / 16), k, 16]; m is the product of A's leading dims.
struct PackedGemmParams : OpParams {
  int64_t m = 0, n = 0, k = 0;
  bool has_bias = false;
  FusedActivation act;
};

/// An Einsum input laid out by label: its distinct labels in memory order and
/// each label's element stride (0 where the input broadcasts a size-1 dim; a
/// label repeated within the input, a diagonal, has the sum of its dims' strides).
struct EinsumOperand {
  std::vector<int> labels;
  std::map<int, int64_t> strides;
  bool strided = false;  // not a dense layout: a broadcast dim or a diagonal
};

struct EinsumParams : OpParams {
  EinsumSpec spec;
  std::map<int, int64_t> sizes;         // label -> extent (size-1 dims broadcast)
  std::vector<EinsumOperand> operands;  // one per input
};

}  // namespace kaiwu
