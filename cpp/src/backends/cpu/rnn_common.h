// Shared parts of the recurrent kernels (LSTM, GRU): input validation and
// shapes, activation functions, and the index arithmetic of both layouts.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/kernel.h"

namespace kaiwu {
namespace cpu {

enum class ActKind {
  kSigmoid, kTanh, kRelu, kAffine, kLeakyRelu, kThresholdedRelu, kScaledTanh, kHardSigmoid,
  kElu, kSoftsign, kSoftplus,
};

struct Activation {
  ActKind kind = ActKind::kSigmoid;
  float alpha = 0.f;
  float beta = 0.f;
};

/// Applies `a` in place to n contiguous floats (vectorised).
void ApplyActivation(const Activation& a, float* x, int64_t n);

/// Clamps n floats to [-clip, clip].
void ClipInPlace(float* x, int64_t n, float clip);

/// Sizes and attributes common to LSTM and GRU, validated by PrepareRnn.
struct RnnDims {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1;
  int layout = 0;      // 0: [seq, batch, ...]; 1: [batch, seq, ...]
  bool reverse = false;  // direction == "reverse" (single direction)
  bool has_clip = false;
  float clip = 0.f;
  bool has_bias = false, has_lens = false, has_init_h = false;

  /// Row of X (and of the precomputed X*W^T) for time t, batch b.
  int64_t XRow(int64_t t, int64_t b) const { return layout == 0 ? t * batch + b : b * seq + t; }
  /// Offset of Y[t, dir, b, 0] (layout 0) or Y[b, t, dir, 0] (layout 1).
  int64_t YOffset(int64_t t, int64_t d, int64_t b) const {
    return (layout == 0 ? (t * dirs + d) * batch + b : (b * seq + t) * dirs + d) * hidden;
  }
  /// Offset of a state [dir, b] in initial_h/initial_c/Y_h/Y_c.
  int64_t StateOffset(int64_t d, int64_t b) const {
    return (layout == 0 ? d * batch + b : b * dirs + d) * hidden;
  }
  /// True when direction index d runs backwards in time.
  bool Backward(int64_t d) const { return reverse || d == 1; }
};

/// Validates X (0), W (1), R (2), B (3), sequence_lens (4), initial_h (5) for an
/// RNN with `gates` gates, reads direction/hidden_size/layout/clip and sets
/// outputs Y (0) and Y_h (1).
RnnDims PrepareRnn(PrepareContext& ctx, int gates);

/// Parses `activations`, `activation_alpha` and `activation_beta`: returns
/// defaults.size() activations per direction, direction-major.
std::vector<Activation> ParseActivations(const PrepareContext& ctx,
                                         const std::vector<std::string>& defaults, int64_t dirs);

/// Reads sequence_lens into `lens` (seq when absent) and checks each is in
/// [0, seq]; throws kRuntime otherwise. Call on the calling thread.
void ReadSequenceLens(const Node& node, const RnnDims& dims, const void* lens_input,
                      int32_t* lens);

/// Scratch of a recurrent kernel with `gates` gates, each region a multiple of
/// 16 floats: X*W^T for every step, one step's gates, two [batch, hidden]
/// states (h and c for the LSTM, h and r.h for the GRU), one direction's
/// 4 * hidden bias row, then the batch's sequence lengths.
struct RnnScratch {
  int64_t xw = 0, gates = 0, state = 0, bias = 0, batch = 0;  // floats (lengths: int32s)

  RnnScratch() = default;
  RnnScratch(const RnnDims& d, int gates);
  size_t bytes() const;
};

/// A run's inputs and outputs common to LSTM and GRU (null when absent), its
/// scratch regions, and its sequence lengths, read and checked.
struct RnnRun {
  const float *x = nullptr, *w = nullptr, *r = nullptr, *b = nullptr, *init_h = nullptr;
  float *y = nullptr, *y_h = nullptr;
  float* xw = nullptr;
  float* gates = nullptr;
  float* state[2] = {nullptr, nullptr};
  float* bias = nullptr;
  int32_t* lens = nullptr;
};

/// Lays out the scratch of a run, reads sequence_lens (input 4), and zeroes Y
/// (output 0, when produced) if some sequence is shorter than seq: those steps
/// are never written.
RnnRun BeginRnnRun(const Node& node, const RnnDims& dims, const RnnScratch& scratch, const KernelIO& io,
                   int num_outputs);

std::unique_ptr<Kernel> MakeLstmKernel(const Node& node);  // rnn_lstm.cc
std::unique_ptr<Kernel> MakeGruKernel(const Node& node);   // rnn_gru.cc

}  // namespace cpu
}  // namespace kaiwu
