// The checked attributes of the quantization ops (shape inference in
// ops/quant.cc): QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
// MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv, and the optimizer's
// fused integer node (kaiwu QLinearFused, with its static packing node
// QPackWeights). Kernels of every backend read them.
#pragma once

#include <cmath>
#include <cstdint>

#include "ops/conv_geometry.h"
#include "ops/fused_activation.h"
#include "ops/op_context.h"

namespace kaiwu {

/// Which scale (and zero point) each element of a QuantizeLinear /
/// DequantizeLinear input uses. The input is viewed as [outer, axis_len, inner]
/// around `axis`; per tensor: one scale; per axis: scale[a]; blocked (opset 21
/// block_size): scale[o, a / block, i], the scale shaped like the input with
/// ceil(axis_len / block) along the axis.
struct QuantAxisParams : OpParams {
  enum class Mode { kPerTensor, kPerAxis, kBlocked };
  Mode mode = Mode::kPerTensor;
  int64_t outer = 1, axis_len = 1, inner = 1, block = 1;
  bool has_zero_point = false;
  DType quant_dtype = DType::kUInt8;  // Q: output dtype; DQ: input dtype
};

/// Round half to even (the ONNX rounding of QuantizeLinear and the requantize
/// epilogues), under the default floating-point rounding mode.
inline float RoundHalfEven(float v) { return std::nearbyint(v); }

/// The representable range of a quantized dtype (int8, uint8, int16, int32).
void QuantRange(DType dtype, float* lo, float* hi);

/// MatMulInteger and QLinearMatMul: numpy matmul of 2-D (or batched) operands;
/// zero points and scales scalar, or per row of A (size m) / per column of B
/// and Y (size n).
struct QMatMulParams : OpParams {
  int64_t m = 0, k = 0, n = 0;
  Shape a_batch, b_batch, batch;
  bool a_per_row = false, b_per_col = false, y_per_col = false;  // vs scalar
  bool has_a_zp = false, has_b_zp = false;
  DType a_dtype = DType::kUInt8, b_dtype = DType::kUInt8, y_dtype = DType::kInt32;
};

/// ConvInteger and QLinearConv: Conv's geometry over quantized operands; the
/// weight zero point and scale scalar or one per output channel.
struct QConvParams : OpParams {
  SpatialGeometry geo;
  int64_t group = 1, n = 0, c = 0, m = 0;
  bool w_per_channel = false;  // w_zero_point / w_scale has m elements
  bool has_x_zp = false, has_w_zp = false, has_bias = false;
  DType x_dtype = DType::kUInt8, w_dtype = DType::kInt8, y_dtype = DType::kInt32;
};

/// kaiwu QLinearFused: an integer Conv or Gemm made by the optimizer
/// (passes/fuse_qdq.cc) from DQ(x), DQ(w) -> Conv/Gemm/MatMul (+bias,
/// +activation, +residual Add) -> Q. Inputs: x (uint8), the packed weights
/// from QPackWeights, and optionally a float residual added before the
/// activation. Output: quantized (the Q's dtype) or float32 when no Q follows.
/// Attribute channels_last (2-D convs, set by passes/layout_nhwc.cc for device
/// sessions): x, the residual and the output are [N, H, W, C] and the packed
/// weights' k runs (kernel row, kernel column, channel), packed from the
/// weight transposed to [M, KH, KW, C]. Attribute row_bytes (CPU, channels-last
/// convs, passes/layout_nhwc.h): the packed k runs (kernel row, byte < row_bytes),
/// each row's KW * C weights padded with zeros, like its QPackWeights' packing.
struct QFusedParams : OpParams {
  bool conv = false;
  bool channels_last = false;  // conv only
  SpatialGeometry geo;     // conv only
  int64_t group = 1;       // conv only (1: the fused path takes no grouped conv)
  int64_t rows = 0;        // Gemm: rows of X (product of X's leading dims)
  int64_t k = 0, n = 0;    // reduction length, output channels
  int64_t row_bytes = 0;   // conv: packed bytes per kernel row, or 0 (k packed as it is)
  int64_t k_packed = 0;    // the packed k: k, or kernel rows * row_bytes
  bool has_residual = false;
  DType y_dtype = DType::kUInt8;  // kUInt8, kInt8 or kFloat32
  FusedActivation act;
};

/// kaiwu QPackWeights: computes the packed operand of QLinearFused from the
/// quantized weight, its scales and zero points, the input's and the output's
/// scale and zero point, and the bias (see backends/cpu/quant_pack.h for the
/// layout). Static: evaluated at load and after each refit.
struct QPackParams : OpParams {
  int64_t k = 0, n = 0;      // weight as [n, k] (trans) or [k, n]
  // Attributes k_rows and row_bytes (trans only): k is k_rows runs of k / k_rows
  // weights (a channels-last conv's kernel rows), each packed into row_bytes
  // bytes with zeros after it; k_packed = k_rows * row_bytes (else k).
  int64_t k_rows = 1, row_bytes = 0, k_packed = 0;
  bool trans = true;         // weight is [n, k...] (Conv, Gemm transB=1)
  bool w_per_channel = false, bias_is_int32 = false, has_bias = false;
  bool has_y = false;        // y_scale / y_zero_point present (quantized output)
  DType w_dtype = DType::kInt8, x_dtype = DType::kUInt8, y_dtype = DType::kUInt8;
  int64_t packed_bytes = 0;
};

/// The byte layout of QPackWeights' output, read by QLinearFused. n output
/// channels padded to np (a multiple of 16), k (the packed k: with row_bytes,
/// kernel rows * row_bytes) padded to kp (a multiple of 4):
///   [0, 64)        header: int32 any_w_zero_point, int32 x_zero_point (in the
///                  uint8 domain: an int8 x is read as x + 128), float
///                  1 / y_scale, int32 y_zero_point, int32 pairs_fit_int16
///                  (|w[k]| + |w[k+1]| <= 128 for all even k: quant_gemm.h),
///                  int32 no_min (no weight is -128: QMicroTileShiftedAvx2),
///                  int32 gemm_blocks (the weights below are in the Gemm blocks),
///                  int32 row_bytes (0: k packed as it is)
///   weights        int8, np * kp bytes: Gemm: blocks of 16 channels, each
///                  [kp / 4][16][4] (4 consecutive k of one channel per int32
///                  lane), except a last block of at most kQDotTail channels
///                  (dot_tail(): value heads, n = 1), whose channels are rows
///                  [t][kp] at the block's start (row dots, not 16-lane tiles);
///                  Conv: row-major [np][kp], but the Gemm blocks with
///                  QPackWeights attribute gemm_layout = 1 (channels-last
///                  convs on the CPU, whose product's rows are pixels)
///   corr  int32[np]  -x_zp * sum_k w[c] + k * x_zp * w_zp[c]
///   mult  float[np]  x_scale * w_scale[c]
///   bias  float[np]  the float bias (0 without one)
///   wzp   int32[np]  w_zero_point[c]
///   wsum  int32[np]  sum_k w[c]
struct QPackedLayout {
  int64_t k = 0, n = 0, kp = 0, np = 0;
  QPackedLayout(int64_t k_, int64_t n_) : k(k_), n(n_), kp((k_ + 3) / 4 * 4), np((n_ + 15) / 16 * 16) {}
  static constexpr int64_t kHeader = 64;
  int64_t weights() const { return kHeader; }
  int64_t corr() const { return kHeader + np * kp; }
  int64_t mult() const { return corr() + 4 * np; }
  int64_t bias() const { return mult() + 4 * np; }
  int64_t wzp() const { return bias() + 4 * np; }
  int64_t wsum() const { return wzp() + 4 * np; }
  int64_t bytes() const { return wsum() + 4 * np; }
  /// Gemm: the channels of the last block stored as rows, or 0 (see above).
  static constexpr int64_t kQDotTail = 8;
  int64_t dot_tail() const { return n % 16 <= kQDotTail ? n % 16 : 0; }
};

}  // namespace kaiwu
