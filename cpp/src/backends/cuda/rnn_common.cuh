// Shared parts of the CUDA recurrent kernels (LSTM, GRU): the geometry both
// layouts index by, read at Prepare from the shapes the CPU Prepare validated,
// the per-row time step (sequence_lens), and the state load/store kernels.
//
// Method (both ops, per direction): one GEMM computes X * W^T for every time
// step into scratch (rows in X's own order, so both layouts read it through
// XRow); each step runs one GEMM h * R^T into a [batch, gates * hidden]
// scratch and a fused gate kernel (one thread per batch row and hidden unit)
// that adds X * W^T and the biases, applies the gate math and writes the
// states and Y[t]. Weights, biases and sequence_lens are read on the device in
// Run, never at Prepare, so a refit reaches them.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/gemm_util.h"

namespace kaiwu {
namespace cuda {

struct RnnGeometry {
  int64_t seq = 0, batch = 0, input = 0, hidden = 0, dirs = 1;
  int layout = 0;        // 0: [seq, batch, ...]; 1: [batch, seq, ...]
  bool reverse = false;  // direction == "reverse" (single direction)
  bool has_clip = false;
  float clip = 0.f;

  /// Row of X (and of X * W^T) for time t, batch b.
  __host__ __device__ int64_t XRow(int64_t t, int64_t b) const {
    return layout == 0 ? t * batch + b : b * seq + t;
  }
  /// Offset of Y[t, dir, b, 0] (layout 0) or Y[b, t, dir, 0] (layout 1).
  __host__ __device__ int64_t YOffset(int64_t t, int64_t d, int64_t b) const {
    return (layout == 0 ? (t * dirs + d) * batch + b : (b * seq + t) * dirs + d) * hidden;
  }
  /// Offset of a state [dir, b] in initial_h/initial_c/Y_h/Y_c.
  __host__ __device__ int64_t StateOffset(int64_t d, int64_t b) const {
    return (layout == 0 ? d * batch + b : b * dirs + d) * hidden;
  }
  /// True when direction index d runs backwards in time.
  __host__ __device__ bool Backward(int64_t d) const { return reverse || d == 1; }
  __device__ float Clip(float v) const { return has_clip ? fminf(fmaxf(v, -clip), clip) : v; }
};

/// Reads the geometry of an LSTM (gates 4) or GRU (gates 3) after the CPU
/// Prepare validated its inputs; throws kUnsupported when `activations` is not
/// the default list `defaults` (per direction) or a GEMM size exceeds cuBLAS's int.
RnnGeometry PrepareRnnGeometry(const PrepareContext& ctx, int gates,
                               const std::vector<const char*>& defaults);

/// Time index that step s of direction d processes for batch row b, or -1 when
/// the row's sequence (sequence_lens[b], or seq without lens) has ended. A
/// length outside [0, seq] reports bad data and the row is treated as empty.
__device__ inline int64_t RnnStepTime(const RnnGeometry& g, const int32_t* lens, int64_t d,
                                      int64_t s, int64_t b, int* error_flag, int step) {
  int64_t len = g.seq;
  if (lens) {
    len = lens[b];
    if (len < 0 || len > g.seq) {
      ReportError(error_flag, step);
      return -1;
    }
  }
  if (s >= len) return -1;
  return g.Backward(d) ? len - 1 - s : s;
}

__device__ inline float SigmoidF(float v) { return 1.f / (1.f + expf(-v)); }

/// Loads direction d's initial states into the dense [batch, hidden] scratch
/// states: h from init_h (zeros when null), and c from init_c when c is not null.
void RnnLoadStates(const DeviceContext& dev, const RnnGeometry& g, int64_t d, const float* init_h,
                   float* h, const float* init_c, float* c);

/// Stores direction d's final states into Y_h / Y_c (each skipped when null).
void RnnStoreStates(const DeviceContext& dev, const RnnGeometry& g, int64_t d, const float* h,
                    float* y_h, const float* c, float* y_c);

/// Floats of a scratch region, rounded up to 256 bytes.
inline int64_t ScratchFloats(int64_t n) { return (n + 63) / 64 * 64; }

/// Scratch of a recurrent kernel with `gates` gates, each region rounded up to
/// 256 bytes: X * W^T for every time step, h * R^T for one step, then two dense
/// [batch, hidden] states (h and c for the LSTM, h and r . h for the GRU).
struct RnnScratch {
  int64_t xw_floats = 0, gates_floats = 0, state_floats = 0;

  RnnScratch() = default;
  RnnScratch(const RnnGeometry& g, int gates) {
    const int64_t G = gates * g.hidden;
    xw_floats = ScratchFloats(g.seq * g.batch * G);
    gates_floats = ScratchFloats(g.batch * G);
    state_floats = ScratchFloats(g.batch * g.hidden);
  }
  size_t bytes() const {
    return sizeof(float) * static_cast<size_t>(xw_floats + gates_floats + 2 * state_floats);
  }
  float* xw(void* scratch) const { return static_cast<float*>(scratch); }
  float* gates(void* scratch) const { return xw(scratch) + xw_floats; }
  /// State k (0 or 1).
  float* state(void* scratch, int k) const {
    return gates(scratch) + gates_floats + k * state_floats;
  }
};

/// Zeroes Y ([seq, dirs, batch, hidden] or its layout-1 order): with
/// sequence_lens, the steps past a row's length are never written.
inline void RnnZeroY(const DeviceContext& dev, const RnnGeometry& g, float* y, const char* what) {
  CheckCuda(cudaMemsetAsync(y, 0, sizeof(float) * g.seq * g.dirs * g.batch * g.hidden, dev.stream),
            what);
}

std::unique_ptr<Kernel> MakeLstmKernel(const Node& node);  // rnn_lstm.cu
std::unique_ptr<Kernel> MakeGruKernel(const Node& node);   // rnn_gru.cu

}  // namespace cuda
}  // namespace kaiwu
