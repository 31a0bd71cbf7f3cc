// BatchNormalization (inference, one thread per element), InstanceNormalization
// and LayerNormalization (one block per normalised plane or row, one warp per
// row of at most 1024 elements: two-pass mean
// and variance in float, as the CPU's ComputeRowStats). X and Y float32, or
// float16/bfloat16 with the parameters (scale, bias, mean, var) in X's dtype or
// float32; every statistic and the affine step in float, Y rounded once, and
// LayerNormalization's Mean / InvStdDev outputs float32.
#include <cstdint>
#include <type_traits>

#include "backends/cuda/conv_family.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/half_util.cuh"
#include "backends/cuda/norm_reduce.cuh"
#include "backends/linalg_index.h"
#include "ops/norm.h"

namespace kaiwu {
namespace cuda {
namespace {

// y = x * a + b with a = scale / sqrt(var + epsilon), b = bias - mean * a of
// channel (i / plane) % C.
// T: X and Y's storage; P: the parameters'.
template <typename T, typename P>
__global__ void BatchNormElements(int64_t total, int64_t C, int64_t plane, float epsilon,
                                  const T* __restrict__ x, const P* __restrict__ scale,
                                  const P* __restrict__ bias, const P* __restrict__ mean,
                                  const P* __restrict__ var, T* __restrict__ y) {
  KAIWU_CUDA_LOOP(i, total) {
    const int64_t c = (i / plane) % C;
    const float a = Load(scale[c]) / sqrtf(Load(var[c]) + epsilon);
    const float b = Load(bias[c]) - Load(mean[c]) * a;
    y[i] = Store<T>(Load(x[i]) * a + b);
  }
}

struct RowStats {
  float mean, inv_std;  // inv_std = 1 / sqrt(variance + epsilon)
};

// Mean and inverse standard deviation of x[0, n), n > 0 (two-pass), over the
// block (thread `lane` = threadIdx.x of blockDim.x) or, kWarp, over the calling
// warp (lane = threadIdx.x % 32).
template <bool kWarp, typename T>
__device__ RowStats RowStatsOver(const T* __restrict__ x, int64_t n, float epsilon, int lane) {
  const int threads = kWarp ? 32 : static_cast<int>(blockDim.x);
  const auto sum_all = [](float v) {
    return kWarp ? CombineAcrossThreads(v, SumOp(), static_cast<float*>(nullptr), 32) : BlockReduce(v, SumOp());
  };
  float sum = 0.f;
  for (int64_t j = lane; j < n; j += threads) sum += Load(x[j]);
  const float mean = sum_all(sum) / static_cast<float>(n);
  float sq = 0.f;
  for (int64_t j = lane; j < n; j += threads) {
    const float d = Load(x[j]) - mean;
    sq += d * d;
  }
  const float var = sum_all(sq) / static_cast<float>(n);
  return RowStats{mean, 1.f / sqrtf(var + epsilon)};
}

// One block per (n, c) plane of `size` elements: y = x * a + b with
// a = scale[c] * inv_std, b = bias[c] - mean * a.
template <typename T, typename P>
__global__ void InstanceNormPlanes(int64_t planes, int64_t C, int64_t size, float epsilon,
                                   const T* __restrict__ x, const P* __restrict__ scale,
                                   const P* __restrict__ bias, T* __restrict__ y) {
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    const T* xp = x + p * size;
    const RowStats st = RowStatsOver<false>(xp, size, epsilon, static_cast<int>(threadIdx.x));
    const float a = Load(scale[p % C]) * st.inv_std;
    const float b = Load(bias[p % C]) - st.mean * a;
    for (int64_t j = threadIdx.x; j < size; j += blockDim.x)
      y[p * size + j] = Store<T>(Load(xp[j]) * a + b);
  }
}

// Index into Scale or B of element f of the normalised shape: f itself when
// the input has as many elements, else through broadcast strides.
struct BroadcastIndex {
  static constexpr int kMaxDims = 8;
  bool identity = true;
  int nd = 0;
  int64_t dims[kMaxDims] = {}, strides[kMaxDims] = {};

  __device__ int64_t operator()(int64_t f) const {
    if (identity) return f;
    int64_t idx = 0;
    for (int d = nd - 1; d >= 0; --d) {
      idx += (f % dims[d]) * strides[d];
      f /= dims[d];
    }
    return idx;
  }
};

// One block per row of `n` elements (kWarpPerRow: one warp per row, for rows
// of at most kWarpRowMax elements): y = (x - mean) * inv_std * scale (+ bias),
// and the row's mean and inv_std where those outputs are wanted (non-null).
constexpr int64_t kWarpRowMax = 1024;

template <typename T, typename P, bool kWarpPerRow>
__global__ void LayerNormRows(int64_t rows, int64_t n, float epsilon, BroadcastIndex scale_at,
                              BroadcastIndex bias_at, const T* __restrict__ x,
                              const P* __restrict__ scale, const P* __restrict__ bias,
                              T* __restrict__ y, float* __restrict__ mean_out,
                              float* __restrict__ inv_std_out) {
  const int threads = kWarpPerRow ? 32 : static_cast<int>(blockDim.x);
  const int lane = kWarpPerRow ? static_cast<int>(threadIdx.x % 32) : static_cast<int>(threadIdx.x);
  const int64_t per_block = kWarpPerRow ? blockDim.x / 32 : 1;
  const int64_t first = blockIdx.x * per_block + (kWarpPerRow ? threadIdx.x / 32 : 0);
  for (int64_t r = first; r < rows; r += gridDim.x * per_block) {
    const T* xr = x + r * n;
    const RowStats st = RowStatsOver<kWarpPerRow>(xr, n, epsilon, lane);
    if (lane == 0) {
      if (mean_out) mean_out[r] = st.mean;
      if (inv_std_out) inv_std_out[r] = st.inv_std;
    }
    for (int64_t j = lane; j < n; j += threads) {
      float v = (Load(xr[j]) - st.mean) * st.inv_std * Load(scale[scale_at(j)]);
      if (bias) v += Load(bias[bias_at(j)]);
      y[r * n + j] = Store<T>(v);
    }
  }
}

// Rows of at most 32 * kPerLane elements, one warp each, the row held in
// registers (element lane + 32 * i in slot i): one read of X and one write of
// Y, every load of a row in flight at once. The same sums in the same order as
// LayerNormRows' warp form (two-pass mean and variance, lane sums then an xor
// shuffle), so both give the same results; for the short rows of per-unit
// or per-token norms.
template <typename T, typename P, int kPerLane>
__global__ void __launch_bounds__(256) LayerNormWarpRows(int64_t rows, int n, float epsilon,
                                                         BroadcastIndex scale_at, BroadcastIndex bias_at,
                                                         const T* __restrict__ x, const P* __restrict__ scale,
                                                         const P* __restrict__ bias, T* __restrict__ y,
                                                         float* __restrict__ mean_out,
                                                         float* __restrict__ inv_std_out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const auto sum_all = [](float v) {
    return CombineAcrossThreads(v, SumOp(), static_cast<float*>(nullptr), 32);
  };
  for (int64_t r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; r < rows; r += warps) {
    const T* xr = x + r * n;
    float v[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + 32 * i;
      v[i] = j < n ? Load(xr[j]) : 0.f;
    }
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) sum += v[i];
    const float mean = sum_all(sum) / static_cast<float>(n);
    float sq = 0.f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const float d = v[i] - mean;
      if (lane + 32 * i < n) sq += d * d;
    }
    const float inv_std = 1.f / sqrtf(sum_all(sq) / static_cast<float>(n) + epsilon);
    if (lane == 0) {
      if (mean_out) mean_out[r] = mean;
      if (inv_std_out) inv_std_out[r] = inv_std;
    }
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
      const int j = lane + 32 * i;
      if (j >= n) break;
      float o = (v[i] - mean) * inv_std * Load(scale[scale_at(j)]);
      if (bias) o += Load(bias[bias_at(j)]);
      y[r * n + j] = Store<T>(o);
    }
  }
}

template <typename T, typename P, int kPerLane>
void LaunchWarpRows(int64_t rows, int n, float epsilon, const BroadcastIndex& scale_at,
                    const BroadcastIndex& bias_at, const T* x, const P* scale, const P* bias, T* y,
                    float* mean_out, float* inv_std_out, cudaStream_t stream) {
  constexpr int kRowsPerBlock = 256 / 32;
  LayerNormWarpRows<T, P, kPerLane><<<RowGrid((rows + kRowsPerBlock - 1) / kRowsPerBlock), 256, 0, stream>>>(
      rows, n, epsilon, scale_at, bias_at, x, scale, bias, y, mean_out, inv_std_out);
}

template <typename T>
const T* In(const KernelIO& io, int i) {
  return static_cast<const T*>(io.inputs[i]);
}

// Calls fn(T{}, P{}) with the storage types of X and of the parameters: float
// for float32, __half / __nv_bfloat16 for the 16-bit floats.
template <typename Fn>
void WithNormTypes(DType x, DType params, Fn&& fn) {
  WithFloatType(x, [&](auto t) {
    using T = decltype(t);
    if (params == DType::kFloat32) {
      fn(t, float{});
    } else {
      fn(t, T{});
    }
  });
}

class BatchNormKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (total_ == 0) return;
    WithNormTypes(x_, params_, [&](auto t, auto p) {
      using T = decltype(t);
      using P = decltype(p);
      BatchNormElements<T, P><<<GridFor(total_), kBlock, 0, Dev(io).stream>>>(
          total_, c_, plane_, epsilon_, In<T>(io, 0), In<P>(io, 1), In<P>(io, 2), In<P>(io, 3),
          In<P>(io, 4), static_cast<T*>(io.outputs[0]));
    });
    CheckLaunch("BatchNormalization kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    x_ = ctx.in(0).dtype;
    params_ = ctx.in(1).dtype;
    const Shape& x = ctx.in(0).shape;
    epsilon_ = ctx.Params<NormParams>().epsilon;
    c_ = x[1];
    plane_ = NumElements(Shape(x.begin() + 2, x.end()));
    total_ = NumElements(x);
  }

 private:
  DType x_ = DType::kFloat32, params_ = DType::kFloat32;
  float epsilon_ = 1e-5f;
  int64_t c_ = 0, plane_ = 0, total_ = 0;
};

class InstanceNormKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (planes_ == 0 || size_ == 0) return;
    WithNormTypes(x_, params_, [&](auto t, auto p) {
      using T = decltype(t);
      using P = decltype(p);
      InstanceNormPlanes<T, P><<<RowGrid(planes_), kBlock, 0, Dev(io).stream>>>(
          planes_, c_, size_, epsilon_, In<T>(io, 0), In<P>(io, 1), In<P>(io, 2),
          static_cast<T*>(io.outputs[0]));
    });
    CheckLaunch("InstanceNormalization kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    x_ = ctx.in(0).dtype;
    params_ = ctx.in(1).dtype;
    const Shape& x = ctx.in(0).shape;
    epsilon_ = ctx.Params<NormParams>().epsilon;
    c_ = x[1];
    planes_ = x[0] * c_;
    size_ = NumElements(Shape(x.begin() + 2, x.end()));
  }

 private:
  DType x_ = DType::kFloat32, params_ = DType::kFloat32;
  float epsilon_ = 1e-5f;
  int64_t c_ = 0, planes_ = 0, size_ = 0;
};

class LayerNormKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (rows_ == 0 || n_ == 0) return;
    float* mean_out = want_mean_ ? static_cast<float*>(io.outputs[1]) : nullptr;
    float* inv_std_out = want_inv_std_ ? static_cast<float*>(io.outputs[2]) : nullptr;
    WithNormTypes(x_, params_, [&](auto t, auto p) {
      using T = decltype(t);
      using P = decltype(p);
      const P* bias = has_bias_ ? In<P>(io, 2) : nullptr;
      const auto warp_rows = [&](auto per_lane) {
        LaunchWarpRows<T, P, decltype(per_lane)::value>(rows_, static_cast<int>(n_), epsilon_, scale_at_,
                                                        bias_at_, In<T>(io, 0), In<P>(io, 1), bias,
                                                        static_cast<T*>(io.outputs[0]), mean_out,
                                                        inv_std_out, Dev(io).stream);
      };
      if (n_ <= 32)
        warp_rows(std::integral_constant<int, 1>{});
      else if (n_ <= 64)
        warp_rows(std::integral_constant<int, 2>{});
      else if (n_ <= 128)
        warp_rows(std::integral_constant<int, 4>{});
      else if (n_ <= 256)
        warp_rows(std::integral_constant<int, 8>{});
      else if (n_ <= 512)
        warp_rows(std::integral_constant<int, 16>{});
      else if (n_ <= kWarpRowMax)
        LayerNormRows<T, P, true><<<RowGrid((rows_ + kBlock / 32 - 1) / (kBlock / 32)), kBlock, 0,
                                    Dev(io).stream>>>(rows_, n_, epsilon_, scale_at_, bias_at_,
                                                      In<T>(io, 0), In<P>(io, 1), bias,
                                                      static_cast<T*>(io.outputs[0]), mean_out,
                                                      inv_std_out);
      else
        LayerNormRows<T, P, false><<<RowGrid(rows_), kBlock, 0, Dev(io).stream>>>(
            rows_, n_, epsilon_, scale_at_, bias_at_, In<T>(io, 0), In<P>(io, 1), bias,
            static_cast<T*>(io.outputs[0]), mean_out, inv_std_out);
    });
    CheckLaunch("LayerNormalization kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const LayerNormParams& p = ctx.Params<LayerNormParams>();
    x_ = ctx.in(0).dtype;
    params_ = ctx.in(1).dtype;
    const Shape& x = ctx.in(0).shape;
    epsilon_ = p.epsilon;
    rows_ = NumElements(Shape(x.begin(), x.begin() + p.axis));
    n_ = NumElements(p.norm_shape);
    scale_at_ = IndexOf(ctx, 1, p.scale_shape, p.norm_shape);
    has_bias_ = p.has_bias;
    if (has_bias_) bias_at_ = IndexOf(ctx, 2, p.bias_shape, p.norm_shape);
    // Shape inference gives Mean and InvStdDev shapes; write those the node wants.
    const auto wanted = [&](size_t i) {
      return ctx.outputs.size() > i && ctx.node.outputs.size() > i && ctx.node.outputs[i] >= 0;
    };
    want_mean_ = wanted(1);
    want_inv_std_ = wanted(2);
  }

 private:
  // As the CPU kernel's IndexMap, but computed on the device: the index into
  // input i (Scale or B, of shape `s`, which broadcasts to the normalised shape).
  static BroadcastIndex IndexOf(const PrepareContext& ctx, int i, const Shape& s,
                                const Shape& norm_shape) {
    BroadcastIndex index;
    if (NumElements(s) == NumElements(norm_shape)) return index;
    if (norm_shape.size() > BroadcastIndex::kMaxDims)
      Unsupported(ctx, "broadcasting input ", i, " over more than ", BroadcastIndex::kMaxDims,
                  " normalised dims");
    const std::vector<int64_t> strides = BroadcastStrides(s, norm_shape);
    index.identity = false;
    index.nd = static_cast<int>(norm_shape.size());
    for (int d = 0; d < index.nd; ++d) {
      index.dims[d] = norm_shape[d];
      index.strides[d] = strides[d];
    }
    return index;
  }

  DType x_ = DType::kFloat32, params_ = DType::kFloat32;
  float epsilon_ = 1e-5f;
  int64_t rows_ = 0, n_ = 0;
  BroadcastIndex scale_at_, bias_at_;
  bool has_bias_ = false, want_mean_ = false, want_inv_std_ = false;
};

}  // namespace

void RegisterNormKernels(KernelRegistry& r) {
  const std::initializer_list<DType> floats = {DType::kFloat32, DType::kFloat16,
                                               DType::kBFloat16};
  r.Register(OpId::kBatchNormalization, floats, &MakeKernel<BatchNormKernel>);
  r.Register(OpId::kInstanceNormalization, floats, &MakeKernel<InstanceNormKernel>);
  r.Register(OpId::kLayerNormalization, floats, &MakeKernel<LayerNormKernel>);
}

}  // namespace cuda
}  // namespace kaiwu
