// QuantizeLinear, DequantizeLinear (per tensor and per axis; int8 / uint8,
// and int32 for DequantizeLinear) and kaiwu QLookup (a byte table) on the
// device, elementwise. The rounding is the CPU kernels' (quant_linear.cc):
// saturate(round_half_even(x / scale) + zero_point), NaN to the low end.
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/quant_util.cuh"
#include "ops/quant.h"

namespace kaiwu {
namespace cuda {
namespace {

// Element i of [outer, axis_len, inner] uses scale[(i / inner) % axis_len]
// (per axis) or scale[0] (per tensor: axis_len = 1).
template <typename Q>
__global__ void QuantizeKernel(const float* __restrict__ x, const float* __restrict__ scale,
                               const Q* __restrict__ zp, Q* __restrict__ y, int64_t total,
                               int64_t inner, int64_t axis_len, float lo, float hi) {
  KAIWU_CUDA_LOOP(i, total) {
    const int64_t a = axis_len == 1 ? 0 : (i / inner) % axis_len;
    const float z = zp ? static_cast<float>(zp[a]) : 0.f;
    y[i] = static_cast<Q>(static_cast<int>(QuantizeValue(x[i] / scale[a], z, lo, hi)));
  }
}

template <typename Q>
__global__ void DequantizeKernel(const Q* __restrict__ x, const float* __restrict__ scale,
                                 const Q* __restrict__ zp, float* __restrict__ y, int64_t total,
                                 int64_t inner, int64_t axis_len) {
  KAIWU_CUDA_LOOP(i, total) {
    const int64_t a = axis_len == 1 ? 0 : (i / inner) % axis_len;
    const int32_t z = zp ? static_cast<int32_t>(zp[a]) : 0;
    y[i] = static_cast<float>(static_cast<int32_t>(x[i]) - z) * scale[a];
  }
}

// Checks the axis mode and the quantized dtype; returns axis_len (1 per tensor).
int64_t CheckAxis(const PrepareContext& ctx, const QuantAxisParams& p, bool dequantize) {
  const DType q = p.quant_dtype;
  const bool ok = q == DType::kInt8 || q == DType::kUInt8 || (dequantize && q == DType::kInt32);
  if (!ok) Unsupported(ctx, std::string("quantized dtype ") + DTypeName(q));
  if (p.mode == QuantAxisParams::Mode::kBlocked) Unsupported(ctx, "a blocked scale (block_size)");
  return p.mode == QuantAxisParams::Mode::kPerAxis ? p.axis_len : 1;
}

class QuantizeLinearKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    p_ = ctx.Params<QuantAxisParams>();
    axis_len_ = CheckAxis(ctx, p_, false);
    total_ = ctx.in(0).size();
    QuantRange(p_.quant_dtype, &lo_, &hi_);
  }
  void Run(const KernelIO& io) const override {
    if (total_ == 0) return;
    const DeviceContext& dev = Dev(io);
    const float* x = static_cast<const float*>(io.inputs[0]);
    const float* s = static_cast<const float*>(io.inputs[1]);
    const void* z = p_.has_zero_point ? io.inputs[2] : nullptr;
    if (p_.quant_dtype == DType::kInt8)
      QuantizeKernel<int8_t><<<GridFor(total_), kBlock, 0, dev.stream>>>(
          x, s, static_cast<const int8_t*>(z), static_cast<int8_t*>(io.outputs[0]), total_, p_.inner,
          axis_len_, lo_, hi_);
    else
      QuantizeKernel<uint8_t><<<GridFor(total_), kBlock, 0, dev.stream>>>(
          x, s, static_cast<const uint8_t*>(z), static_cast<uint8_t*>(io.outputs[0]), total_, p_.inner,
          axis_len_, lo_, hi_);
    CheckLaunch("QuantizeLinear kernel");
  }

 private:
  QuantAxisParams p_;
  int64_t axis_len_ = 1, total_ = 0;
  float lo_ = 0.f, hi_ = 255.f;
};

class DequantizeLinearKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    p_ = ctx.Params<QuantAxisParams>();
    axis_len_ = CheckAxis(ctx, p_, true);
    total_ = ctx.in(0).size();
  }
  void Run(const KernelIO& io) const override {
    if (total_ == 0) return;
    switch (p_.quant_dtype) {
      case DType::kInt8: Launch<int8_t>(io); break;
      case DType::kInt32: Launch<int32_t>(io); break;
      default: Launch<uint8_t>(io); break;
    }
  }

 private:
  template <typename Q>
  void Launch(const KernelIO& io) const {
    const DeviceContext& dev = Dev(io);
    DequantizeKernel<Q><<<GridFor(total_), kBlock, 0, dev.stream>>>(
        static_cast<const Q*>(io.inputs[0]), static_cast<const float*>(io.inputs[1]),
        p_.has_zero_point ? static_cast<const Q*>(io.inputs[2]) : nullptr,
        static_cast<float*>(io.outputs[0]), total_, p_.inner, axis_len_);
    CheckLaunch("DequantizeLinear kernel");
  }
  QuantAxisParams p_;
  int64_t axis_len_ = 1, total_ = 0;
};

__device__ inline uint32_t LookupWord(const uint8_t* t, uint32_t v) {
  return static_cast<uint32_t>(t[v & 0xff]) | static_cast<uint32_t>(t[(v >> 8) & 0xff]) << 8 |
         static_cast<uint32_t>(t[(v >> 16) & 0xff]) << 16 | static_cast<uint32_t>(t[v >> 24]) << 24;
}

// y[i] = table[x[i]], 16 bytes a thread when both buffers are 16-byte aligned
// (else one); the table in shared memory.
__global__ void LookupKernel(const uint8_t* __restrict__ x, const uint8_t* __restrict__ table,
                             uint8_t* __restrict__ y, int64_t total, bool vec) {
  __shared__ uint8_t t[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) t[i] = table[i];
  __syncthreads();
  const int64_t nv = vec ? total / 16 : 0;
  const uint4* xv = reinterpret_cast<const uint4*>(x);
  uint4* yv = reinterpret_cast<uint4*>(y);
  KAIWU_CUDA_LOOP(i, nv) {
    const uint4 v = xv[i];
    yv[i] = make_uint4(LookupWord(t, v.x), LookupWord(t, v.y), LookupWord(t, v.z), LookupWord(t, v.w));
  }
  KAIWU_CUDA_LOOP(j, total - nv * 16) y[nv * 16 + j] = t[x[nv * 16 + j]];
}

class QLookupKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override { total_ = ctx.in(0).size(); }
  void Run(const KernelIO& io) const override {
    if (total_ == 0) return;
    const DeviceContext& dev = Dev(io);
    const uint8_t* x = static_cast<const uint8_t*>(io.inputs[0]);
    uint8_t* y = static_cast<uint8_t*>(io.outputs[0]);
    const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0;
    LookupKernel<<<GridFor(vec ? (total_ + 15) / 16 : total_), kBlock, 0, dev.stream>>>(
        x, static_cast<const uint8_t*>(io.inputs[1]), y, total_, vec);
    CheckLaunch("QLookup kernel");
  }

 private:
  int64_t total_ = 0;
};

}  // namespace

void RegisterQuantKernels(KernelRegistry& r) {
  r.Register(OpId::kQuantizeLinear, {DType::kFloat32}, &MakeKernel<QuantizeLinearKernel>);
  r.Register(OpId::kDequantizeLinear, {DType::kInt8, DType::kUInt8, DType::kInt32},
             &MakeKernel<DequantizeLinearKernel>);
  r.Register(OpId::kQLookup, {DType::kUInt8, DType::kInt8}, &MakeKernel<QLookupKernel>);
  RegisterQuantFusedKernel(r);
}

}  // namespace cuda
}  // namespace kaiwu
