// The checked attributes and sizes of LSTM and GRU (ops/rnn.cc), which the
// kernels of every backend read: the sizes and layout index math (usable in
// device code), direction, clip, the gate activations, which optional inputs
// are present, and the op's own flags.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/host_device.h"
#include "ops/op_context.h"

namespace kaiwu {

/// The activation functions ONNX recurrent ops name in `activations`.
enum class RnnActKind {
  kSigmoid, kTanh, kRelu, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid,
  kElu, kSoftsign, kSoftplus,
};

/// One gate activation with its alpha and beta (the ONNX defaults when the
/// node gives none).
struct RnnActivation {
  RnnActKind kind = RnnActKind::kSigmoid;
  float alpha = 0.f;
  float beta = 0.f;
};

/// Sizes, layout, direction and clip of a recurrent op, and the index
/// arithmetic of both layouts.
struct RnnDims {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1;
  int layout = 0;        // 0: [seq, batch, ...]; 1: [batch, seq, ...]
  bool reverse = false;  // direction == "reverse" (single direction)
  bool has_clip = false;
  float clip = 0.f;

  /// Row of X (and of the precomputed X*W^T) for time t, batch b.
  KAIWU_HOST_DEVICE int64_t XRow(int64_t t, int64_t b) const {
    return layout == 0 ? t * batch + b : b * seq + t;
  }
  /// Offset of Y[t, dir, b, 0] (layout 0) or Y[b, t, dir, 0] (layout 1).
  KAIWU_HOST_DEVICE int64_t YOffset(int64_t t, int64_t d, int64_t b) const {
    return (layout == 0 ? (t * dirs + d) * batch + b : (b * seq + t) * dirs + d) * hidden;
  }
  /// Offset of a state [dir, b] in initial_h/initial_c/Y_h/Y_c.
  KAIWU_HOST_DEVICE int64_t StateOffset(int64_t d, int64_t b) const {
    return (layout == 0 ? d * batch + b : b * dirs + d) * hidden;
  }
  /// True when direction index d runs backwards in time.
  KAIWU_HOST_DEVICE bool Backward(int64_t d) const { return reverse || d == 1; }
};

/// LSTM (gates 4: i, o, f, c) and GRU (gates 3: z, r, h). Inputs: X (0), W (1),
/// R (2), B (3), sequence_lens (4), initial_h (5); LSTM also initial_c (6) and
/// P (7). Outputs: Y (0), Y_h (1); LSTM also Y_c (2).
struct RnnParams : OpParams {
  int gates = 4;
  RnnDims dims;
  bool has_bias = false, has_lens = false, has_init_h = false;
  bool has_init_c = false, has_peep = false;  // LSTM
  bool input_forget = false;                  // LSTM
  bool linear_before_reset = false;           // GRU
  /// Made by passes/prepack_gemm.cc ("_kaiwu_packed", CPU sessions): W and R
  /// packed per direction in 16-column panels of their transposes, [dirs,
  /// ceil(gates hidden / 16), input or hidden, 16], as inputs 8 and 9 (LSTM)
  /// or 6 and 7 (GRU).
  bool packed = false;
  /// gates - 1 activations per direction (f, g for the GRU; f, g, h for the
  /// LSTM), direction-major.
  std::vector<RnnActivation> activations;
  /// The activations' names as the node spells them (the defaults when it
  /// gives none), in the same order, for messages.
  std::vector<std::string> activation_names;
};

}  // namespace kaiwu
