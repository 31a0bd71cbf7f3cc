// Checks a CUDA float16/bfloat16 kernel against the CPU float32 kernel of the
// same op: the float32 inputs are rounded to the 16-bit type on the host, the
// CUDA kernel runs on those 16-bit tensors, the CPU kernel on the same rounded
// values widened back to float32, and the CUDA outputs, widened, must be
// within `rtol` relative (+ `atol`) of the CPU's. A kernel that loads 16-bit
// values, computes in float and rounds once when storing is within half an
// ulp of the CPU result plus the float32 libm / summation-order difference:
// kHalfRtol (float16: 1e-3, about one ulp of its 11-bit significand) and
// kBFloat16Rtol (8e-3, about one ulp of bfloat16's 8 bits) hold that.
#pragma once

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/half.h"
#include "cuda_harness.h"

namespace kaiwu {
namespace testing {

constexpr float kHalfRtol = 1e-3f, kBFloat16Rtol = 8e-3f;

inline float HalfRtol(DType dt) { return dt == DType::kFloat16 ? kHalfRtol : kBFloat16Rtol; }

/// float32 -> float16 / bfloat16 on the host (round to nearest even).
inline Tensor Narrow(const Tensor& f, DType dt) {
  Tensor h(dt, f.shape());
  uint16_t* out = static_cast<uint16_t*>(h.data());
  for (int64_t i = 0; i < f.size(); ++i) {
    const float v = f.As<float>()[i];
    out[i] = dt == DType::kFloat16 ? FloatToHalf(v) : FloatToBFloat16(v);
  }
  return h;
}

/// float16 / bfloat16 -> float32 (exact).
inline Tensor Widen(const Tensor& h) {
  Tensor f(DType::kFloat32, h.shape());
  const uint16_t* in = static_cast<const uint16_t*>(h.data());
  for (int64_t i = 0; i < h.size(); ++i)
    f.As<float>()[i] = h.dtype() == DType::kFloat16 ? HalfToFloat(in[i]) : BFloat16ToFloat(in[i]);
  return f;
}

/// The float32 inputs rounded to dt and widened back: what the CPU reference sees.
inline Tensor Rounded(const Tensor& f, DType dt) { return Widen(Narrow(f, dt)); }

/// Runs `node` on CUDA with every float32 input narrowed to `dt` (other inputs
/// and those in `keep_f32` as given) and on the CPU in float32 on the rounded
/// values; compares every output (16-bit ones widened; float32 ones directly;
/// bool / int ones exactly). Returns the CUDA outputs widened.
inline std::vector<Tensor> CheckHalf(const Node& node, const std::vector<Tensor>& inputs, DType dt,
                                     float rtol, float atol,
                                     const std::vector<int>& const_inputs = {},
                                     const std::vector<int>& keep_f32 = {}) {
  std::vector<Tensor> cpu_in, cuda_in;
  std::string what = node.op_type + " " + DTypeName(dt);
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    bool keep = false;
    for (int k : keep_f32) keep = keep || k == static_cast<int>(i);
    const bool f32 = t.dtype() == DType::kFloat32 && !keep;
    cuda_in.push_back(f32 ? Narrow(t, dt) : t);
    cpu_in.push_back(f32 ? Rounded(t, dt) : t);
    if (t.dtype() != DType::kUndefined) what += " " + ShapeToString(t.shape());
  }
  const std::vector<Tensor> want = RunNode(node, cpu_in);
  const std::vector<Tensor> got = RunNodeCuda(node, cuda_in, const_inputs);
  std::vector<Tensor> widened;
  EXPECT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < want.size() && k < got.size(); ++k) {
    if (want[k].dtype() != DType::kFloat32) {
      ExpectTensorsClose(got[k], want[k], 0, 0, what + " output " + std::to_string(k));
      widened.push_back(got[k]);
      continue;
    }
    if (got[k].dtype() == DType::kFloat32) {  // an output float32 by definition
      ExpectTensorsClose(got[k], want[k], rtol, atol, what + " output " + std::to_string(k));
      widened.push_back(got[k]);
      continue;
    }
    EXPECT_EQ(got[k].dtype(), dt) << what << " output " << k;
    if (got[k].dtype() != dt) return {};
    widened.push_back(Widen(got[k]));
    // Equal infinities (float16 overflow included) compare as equal values.
    Tensor g = widened.back(), w = want[k];
    for (int64_t i = 0; i < w.size(); ++i) {
      float& gv = g.As<float>()[i];
      float& wv = w.As<float>()[i];
      if (std::isinf(gv) && gv == wv) gv = wv = 0.f;
      // float16 overflow: a finite float32 result past its range is infinity there.
      if (dt == DType::kFloat16 && std::isinf(gv) && std::fabs(wv) >= 65504.f &&
          std::signbit(gv) == std::signbit(wv))
        gv = wv = 0.f;
    }
    ExpectTensorsClose(g, w, rtol, atol, what + " output " + std::to_string(k));
  }
  return widened;
}

inline std::vector<Tensor> CheckHalf(const Node& node, const std::vector<Tensor>& inputs,
                                     DType dt) {
  return CheckHalf(node, inputs, dt, HalfRtol(dt), 1e-6f);
}

}  // namespace testing
}  // namespace kaiwu
