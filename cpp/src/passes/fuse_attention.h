// Attention as one node (CPU and device sessions): MatMul(Q, K) -> [Mul / Div
// by a constant scalar] -> [Add(mask)] -> Softmax(axis -1) -> MatMul(., V), each
// intermediate read by the next node only, becomes FusedAttention
// (ops/linalg.h): one CUDA launch, or one pass a row on the CPU, with the
// scores never written to memory (torch's nn.MultiheadAttention export; a
// policy's attention over units). It fires only where Q, K and V are known to
// have rank >= 2 (FusedAttention's contract; the export carries no shapes, so
// ranks are read from their producers: a Transpose's perm, a Reshape to a
// constant shape, elementwise ops over known ranks) and the backend has the
// kernel for their dtype (the values' dtype where they carry one, else float32).
// Sessions run it on the CPU unless KAIWU_FUSED_ATTENTION=0, on a device in
// float16 / bfloat16 nodes unless KAIWU_FUSED_ATTENTION=0 and in float32 nodes
// only with KAIWU_FUSED_ATTENTION=1 (runtime/session.cc).
#pragma once

#include <functional>

#include "ir/graph.h"
#include "ops/op.h"

namespace kaiwu {

/// Rewrites `g` in place (then g->Verify()); `has_kernel(op, dtype)` says
/// whether the backend runs FusedAttention. Returns the nodes made.
/// views: also record the layout ops that make Q, K and V (Transpose, Reshape,
/// Squeeze, Unsqueeze, Gather of one constant index) as recipes over the tensor
/// they start from (inputs 6-8, attributes q_view / k_view / v_view); the node
/// reads through them where a plan's shapes allow, and the plan drops the ops'
/// steps nothing else reads (CPU sessions by default, device sessions with
/// KAIWU_ATTENTION_VIEWS=1: runtime/session.cc).
int FuseAttention(Graph* g, const std::function<bool(OpId, DType)>& has_kernel, bool views = true);

}  // namespace kaiwu
