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

/// out[rows, n] (row stride ldc) = a[rows, k] * W^T for W's rows [0, n) (W
/// [n', k] row-major, n <= n'): from its packed panels (sgemm_packed.h, made by
/// passes/prepack_gemm.cc) when `packed` is given, else from W itself.
void RnnGemm(int64_t rows, int64_t n, int64_t k, const float* a, const float* w,
             const float* packed, float* out, int64_t ldc, ThreadPool* pool);

std::unique_ptr<Kernel> MakeLstmKernel(const Node& node);  // rnn_lstm.cc
std::unique_ptr<Kernel> MakeGruKernel(const Node& node);   // rnn_gru.cc

}  // namespace cpu
}  // namespace kaiwu
