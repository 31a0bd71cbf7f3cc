// Shared parts of the CPU recurrent kernels (LSTM, GRU): activation functions,
// sequence lengths and the scratch layout. Shapes, attributes and the index
// arithmetic of both layouts are the op layer's (ops/rnn.h).
#pragma once

#include <cstdint>
#include <memory>

#include "backends/kernel.h"
#include "ops/rnn.h"

namespace kaiwu {
namespace cpu {

/// Applies `a` in place to n contiguous floats (vectorised).
void ApplyActivation(const RnnActivation& a, float* x, int64_t n);

/// Clamps n floats to [-clip, clip].
void ClipInPlace(float* x, int64_t n, float clip);

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
RnnRun BeginRnnRun(const Node& node, const RnnParams& params, const RnnScratch& scratch,
                   const KernelIO& io, int num_outputs);

std::unique_ptr<Kernel> MakeLstmKernel(const Node& node);  // rnn_lstm.cc
std::unique_ptr<Kernel> MakeGruKernel(const Node& node);   // rnn_gru.cc

}  // namespace cpu
}  // namespace kaiwu
