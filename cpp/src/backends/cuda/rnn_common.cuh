// Shared parts of the CUDA recurrent kernels (LSTM, GRU): the geometry both
// layouts index by (the op layer's RnnDims, ops/rnn.h), the per-row time step
// (sequence_lens), and the state load/store kernels.
//
// Method (both ops, per direction): one GEMM computes X * W^T for every time
// step into float32 scratch (rows in X's own order, so both layouts read it
// through XRow; X and W float32, or both float16 / bfloat16 in half sessions,
// which also write Y in that type); each step runs one GEMM h * R^T into a
// [batch, gates * hidden] scratch and a fused gate kernel (one thread per batch row and hidden unit)
// that adds X * W^T and the biases, applies the gate math and writes the
// states and Y[t]. Weights, biases and sequence_lens are read on the device in
// Run, never at Prepare, so a refit reaches them.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/gemm_util.h"
#include "backends/cuda/half.cuh"
#include "ops/rnn.h"

namespace kaiwu {
namespace cuda {

/// The op's sizes, layout, direction and clip (RnnDims), with the clip of a
/// pre-activation on the device.
struct RnnGeometry : RnnDims {
  RnnGeometry() = default;
  explicit RnnGeometry(const RnnDims& d) : RnnDims(d) {}
  __device__ float Clip(float v) const { return has_clip ? fminf(fmaxf(v, -clip), clip) : v; }
};

/// The geometry of an LSTM (gates 4) or GRU (gates 3) from its params; throws
/// kUnsupported when `activations` is not the default list `defaults` (per
/// direction) or a GEMM size exceeds cuBLAS's int.
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

/// What the step kernels of both ops read; each op's argument struct adds its
/// own fields. Passed to kernels by value.
struct RnnStepArgs {
  RnnGeometry g;
  int64_t d = 0, s = 0;           // direction, step
  const int32_t* lens = nullptr;  // sequence_lens, or null
  float* gates = nullptr;         // [batch, gates * H]: h * R^T (the GRU also writes z, r)
  const float* xw = nullptr;      // [seq * batch, gates * H]: X * W^T, rows in X's order
  const float* bias = nullptr;    // [2 * gates * H]: Wb then Rb of direction d, or null
  float* h = nullptr;             // [batch, H] state, updated in place
  void* y = nullptr;              // Y (float32, or y_type), or null
  int y_type = 0;                 // 0: float32, 1: float16, 2: bfloat16 (X's type)
  int* error_flag = nullptr;
  int step = 0;
  // Folded state copies (RnnKernel::fold_states_): with load_init, step 0 reads
  // the previous h from initial_h (zeros when null) instead of the scratch h,
  // and writes the scratch h of every row; with store_final, the last step
  // (a sequence kernel: its end) writes Y_h, instead of load and store kernels
  // around the steps.
  bool load_init = false, store_final = false;
  const float* init_h = nullptr;  // initial_h, or null
  float* y_h = nullptr;           // Y_h, or null

  /// Writes element `at` of Y (not null) in Y's type.
  __device__ void StoreY(int64_t at, float v) const {
    if (y_type == 1) static_cast<__half*>(y)[at] = __float2half_rn(v);
    else if (y_type == 2) static_cast<__nv_bfloat16*>(y)[at] = __float2bfloat16_rn(v);
    else static_cast<float*>(y)[at] = v;
  }
  /// Time index of this step for batch row b, or -1 (see RnnStepTime).
  __device__ int64_t Time(int64_t b) const { return RnnStepTime(g, lens, d, s, b, error_flag, step); }
  /// initial_h of direction d, row b, unit j (0 without initial_h).
  __device__ float InitH(int64_t b, int64_t j) const {
    return init_h ? init_h[g.StateOffset(d, b) + j] : 0.f;
  }
  /// True in the step that reads the initial states itself.
  __device__ bool FromInit() const { return load_init && s == 0; }
  /// h before this step of element i = b * H + j of the dense state.
  __device__ float PrevH(int64_t i, int64_t b, int64_t j) const { return FromInit() ? InitH(b, j) : h[i]; }
  /// True in the step that writes the final states itself.
  __device__ bool ToFinal() const { return store_final && s == g.seq - 1; }
  /// A sequence kernel's start and end: row b's unit j of the state it keeps.
  __device__ float StartH(int64_t b, int64_t j) const { return load_init ? InitH(b, j) : h[b * g.hidden + j]; }
  __device__ void EndH(int64_t b, int64_t j, float v) const {
    if (!store_final) h[b * g.hidden + j] = v;
    else if (y_h) y_h[g.StateOffset(d, b) + j] = v;
  }
};

/// The part of the LSTM and GRU kernels that is the same for both: the
/// geometry, which optional inputs are present, the scratch, and the binding
/// of a run's pointers.
class RnnKernel : public CudaKernel {
 protected:
  /// Reads the geometry (see PrepareRnnGeometry) and the inputs present; sets
  /// the scratch. Returns the op's params.
  const RnnParams& PrepareRnn(PrepareContext& ctx, int gates,
                              const std::vector<const char*>& defaults) {
    const RnnParams& p = ctx.Params<RnnParams>();
    g_ = PrepareRnnGeometry(ctx, gates, defaults);
    present_ = {true, true, true, p.has_bias, p.has_lens, p.has_init_h, p.has_init_c, p.has_peep};
    num_outputs_ = static_cast<int>(ctx.outputs.size());
    tf32_ = ctx.node.tf32_gemms;
    x_type_ = ctx.in(0).dtype;
    gates_ = gates;
    // KAIWU_RNN_FOLD_STATES=0: separate state load / store kernels (A/B).
    const char* fold = std::getenv("KAIWU_RNN_FOLD_STATES");
    fold_states_ = !(fold && std::string(fold) == "0");
    scratch_ = RnnScratch(g_, gates);
    ctx.scratch_bytes = scratch_.bytes();
    return p;
  }
  /// Input i's device data, or null when the node omits it.
  const float* Input(const KernelIO& io, int i) const {
    return i < static_cast<int>(present_.size()) && present_[i] ? static_cast<const float*>(io.inputs[i])
                                                                 : nullptr;
  }
  /// X * W^T of direction d for every time step into xw ([seq * batch, gates *
  /// hidden], float32): an SGEMM (TF32 with tf32_) for float32 X and W, else a
  /// 16-bit GEMM with float32 output and accumulation on tensor cores.
  void ProjectInput(const DeviceContext& dev, const KernelIO& io, int64_t d, float* xw) const {
    const int64_t G = gates_ * g_.hidden, I = g_.input, rows = g_.seq * g_.batch;
    if (x_type_ == DType::kFloat32) {
      RowMajorSgemm(dev, false, true, rows, G, I, 1.f, Input(io, 0), I, Input(io, 1) + d * G * I, I,
                    xw, G, tf32_);
      return;
    }
    const auto* w = static_cast<const uint16_t*>(io.inputs[1]) + d * G * I;
    RowMajorGemmHalfIn(dev, x_type_ == DType::kBFloat16, rows, G, I, io.inputs[0], I, w, I, xw, G);
  }
  /// Output k's device data, or null when the node does not produce it.
  float* Output(const KernelIO& io, int k) const {
    return k < num_outputs_ ? static_cast<float*>(io.outputs[k]) : nullptr;
  }
  /// Step 0 of the per-step path reads the initial states and the last step
  /// writes the final ones (fold_states_, a sequence of at least one step and
  /// initial_h present, since step 0's GEMM reads it). Sets args' flags and
  /// returns whether they are folded; the caller loads and stores otherwise.
  bool FoldStepStates(const KernelIO& io, RnnStepArgs* a) const {
    const bool fold = fold_states_ && g_.seq > 0 && Input(io, 5);
    a->load_init = a->store_final = fold;
    return fold;
  }
  /// Direction d's initial_h as a [batch, H] GEMM operand: its offset and row stride.
  int64_t InitOffset(int64_t d) const { return g_.StateOffset(d, 0); }
  int64_t InitStride() const { return g_.layout == 0 ? g_.hidden : g_.dirs * g_.hidden; }
  /// Fills the shared step arguments of a run (h is scratch state 0) and zeroes
  /// Y when sequence_lens leaves steps of it unwritten.
  void BindRun(const KernelIO& io, RnnStepArgs* a, const char* what) const {
    a->init_h = Input(io, 5);
    a->y_h = Output(io, 1);
    const DeviceContext& dev = Dev(io);
    a->g = g_;
    a->lens = present_.size() > 4 && present_[4] ? static_cast<const int32_t*>(io.inputs[4]) : nullptr;
    a->gates = scratch_.gates(io.scratch);
    a->xw = scratch_.xw(io.scratch);
    a->h = scratch_.state(io.scratch, 0);
    a->y = num_outputs_ > 0 ? io.outputs[0] : nullptr;
    a->y_type = x_type_ == DType::kFloat16 ? 1 : x_type_ == DType::kBFloat16 ? 2 : 0;
    a->error_flag = dev.error_flag;
    a->step = dev.step;
    const size_t y_element = x_type_ == DType::kFloat32 ? sizeof(float) : sizeof(uint16_t);
    if (a->y && a->lens)
      CheckCuda(cudaMemsetAsync(a->y, 0, y_element * g_.seq * g_.dirs * g_.batch * g_.hidden,
                                dev.stream),
                what);
  }

  RnnGeometry g_;
  RnnScratch scratch_;
  bool tf32_ = false;  // GEMMs on TF32 tensor cores (Node::tf32_gemms)
  DType x_type_ = DType::kFloat32;  // X's and W's type; Y's too
  int gates_ = 0;
  bool fold_states_ = true;  // kernels read initial_h/c and write Y_h/Y_c themselves

 private:
  std::vector<bool> present_;  // per input, from the params (X, W, R always)
  int num_outputs_ = 0;
};

std::unique_ptr<Kernel> MakeLstmKernel(const Node& node);  // rnn_lstm.cu
std::unique_ptr<Kernel> MakeGruKernel(const Node& node);   // rnn_gru.cu

}  // namespace cuda
}  // namespace kaiwu
