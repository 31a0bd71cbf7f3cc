// Channels-last layout for device sessions in half precision (and, through
// the second overload, for float32 CPU sessions): tensor-core
// convolutions read and write NHWC, so a model exported in NCHW would pay a
// layout conversion on both sides of every conv. This pass rewrites each 2-D
// Conv (group 1, symmetric pads) and MaxPool on a 16-bit float tensor as
//   Transpose(NCHW->NHWC) -> NhwcConv / NhwcMaxPool -> Transpose(NHWC->NCHW)
// with the conv's weight transposed to [M, KH, KW, C] by a static node (so a
// refit re-derives it), then moves transposes down through elementwise ops
// (unary, Cast, binary ops whose other operands are one-element constants or
// transposed the same way, FusedElementwise) and cancels inverse pairs. What
// is left are the conversions at the edges of the conv stack, e.g. one
// Transpose before the Flatten of the head; a channels-last input
// (Transpose(0, 3, 1, 2) of an NHWC observation) loses its Transpose.
#pragma once

#include <functional>

#include "ir/graph.h"
#include "ops/op.h"

namespace kaiwu {

/// Rewrites `g` in place (then g->Verify()); `has_kernel(op, dtype)` says
/// which NHWC ops the backend runs. Returns the convs and pools converted.
int ConvertToNhwc(Graph* g, const std::function<bool(OpId, DType)>& has_kernel);
/// The same for the Conv / MaxPool nodes (with X of dtype t) that
/// `accepts(node, t)` takes, any dtype (the one above: 16-bit floats only).
/// CPU sessions convert their float32 convs (OptimizeForCpu).
int ConvertToNhwc(Graph* g, const std::function<bool(OpId, DType)>& has_kernel,
                  const std::function<bool(const Node&, DType)>& accepts);
/// Each 2-D integer conv (kaiwu QLinearFused, conv = 1) gets channels_last = 1
/// between the same transposes, its QPackWeights packing the weight transposed
/// to [M, KH, KW, C]; transposes then sink through per-tensor QuantizeLinear
/// as through the elementwise ops, and inverse pairs cancel (consecutive
/// integer convs read each other's NHWC output). A graph that would then run
/// more than two transposes per run more than before (float sections between
/// the convs) is left as it was. With cpu_session (the CPU kernel's form):
/// the packing is the Gemm blocks (attribute gemm_layout = 1, ops/quant.h
/// QPackedLayout), MaxPools reading a DequantizeLinear become NhwcMaxPool, and
/// transposes also sink through per-tensor DequantizeLinear and QLookup, so
/// float sections between integer convs run channels-last too. row_align > 0
/// (CPU sessions): the packed weights of each kernel row (KW * C bytes) are
/// padded with zeros to a multiple of row_align (attributes k_rows and
/// row_bytes, ops/quant.h), so that the kernel reads the product's rows in
/// place; convs with dilation along W, or with a last partial block of row
/// dots, keep the plain packing. Returns the convs converted.
int ConvertQLinearConvsToNhwc(Graph* g, bool cpu_session = false, int row_align = 0);

}  // namespace kaiwu
