// Softmax, LogSoftmax and Hardmax on CUDA (float32, and float16/bfloat16
// tensors read and written as such with every sum, max and exp in float), with
// the axis semantics
// of softmax_kernels.cc: one axis from opset 13, the flattened trailing part
// from `axis` before. The input is viewed as [outer, n, inner]. With inner == 1
// each row is contiguous and a warp (or, for long rows, a block) reduces it;
// otherwise one thread walks one strided column.
#include <cmath>

#include "backends/cuda/elementwise_util.cuh"
#include "backends/cuda/half_util.cuh"
#include "ops/unary.h"

namespace kaiwu {
namespace cuda {
namespace eltwise {
namespace {

enum class SoftmaxKind { kSoftmax, kLogSoftmax, kHardmax };

// Rows longer than this get a whole block each instead of a warp.
constexpr int64_t kWarpRowMax = 1024;

// Reduces v over the kThreads threads (one warp, or the whole block) of a row.
template <int kThreads, typename Op>
__device__ float RowReduce(float v, Op op, float* shared) {
  return CombineAcrossThreads(v, op, shared, kThreads);
}

// (value, index) of the first maximum: b wins over a if larger, or equal and earlier.
__device__ inline bool Better(float bv, int64_t bi, float av, int64_t ai) {
  return bv > av || (bv == av && bi < ai);
}

template <int kThreads>
__device__ int64_t RowArgMax(float v, int64_t i, float* shared, int64_t* shared_idx) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int64_t oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (Better(ov, oi, v, i)) {
      v = ov;
      i = oi;
    }
  }
  if constexpr (kThreads > 32) {
    const int warp = threadIdx.x / 32;
    __syncthreads();
    if (threadIdx.x % 32 == 0) {
      shared[warp] = v;
      shared_idx[warp] = i;
    }
    __syncthreads();
    v = shared[0];
    i = shared_idx[0];
    for (int w = 1; w < kThreads / 32; ++w) {
      if (Better(shared[w], shared_idx[w], v, i)) {
        v = shared[w];
        i = shared_idx[w];
      }
    }
  }
  return i;
}

// Contiguous rows of n elements, kThreads threads per row, kBlock / kThreads
// rows per block. The row loop is uniform over each row's threads.
template <int kThreads, typename T>
__global__ void SoftmaxRowsKernel(SoftmaxKind kind, int64_t rows, int64_t n, const T* x, T* y) {
  constexpr int kRowsPerBlock = kBlock / kThreads;
  __shared__ float shared[kBlock / 32];
  __shared__ int64_t shared_idx[kBlock / 32];
  const int lane = static_cast<int>(threadIdx.x) % kThreads;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kThreads;
       row < rows; row += static_cast<int64_t>(gridDim.x) * kRowsPerBlock) {
    const T* xr = x + row * n;
    T* yr = y + row * n;
    if (kind == SoftmaxKind::kHardmax) {
      float bv = -INFINITY;
      int64_t bi = n;
      for (int64_t j = lane; j < n; j += kThreads) {
        const float v = Load(xr[j]);
        if (Better(v, j, bv, bi)) {
          bv = v;
          bi = j;
        }
      }
      const int64_t best = RowArgMax<kThreads>(bv, bi, shared, shared_idx);
      for (int64_t j = lane; j < n; j += kThreads) yr[j] = Store<T>(j == best ? 1.f : 0.f);
      continue;
    }
    float m = -INFINITY;
    for (int64_t j = lane; j < n; j += kThreads) m = fmaxf(m, Load(xr[j]));
    m = RowReduce<kThreads>(m, MaxOp{}, shared);
    float s = 0.f;
    for (int64_t j = lane; j < n; j += kThreads) s += expf(Load(xr[j]) - m);
    s = RowReduce<kThreads>(s, SumOp{}, shared);
    if (kind == SoftmaxKind::kSoftmax) {
      const float inv = 1.f / s;
      for (int64_t j = lane; j < n; j += kThreads) yr[j] = Store<T>(expf(Load(xr[j]) - m) * inv);
    } else {
      const float lse = logf(s);
      for (int64_t j = lane; j < n; j += kThreads)
        yr[j] = Store<T>((Load(xr[j]) - m) - lse);  // as the CPU rounds
    }
  }
}

// Short contiguous rows (n <= kLanes * kPer: attention over a few dozen units or
// tokens), kLanes threads a row, each row's elements read once into registers
// (element lane + kLanes * i in slot i), max and sum by shuffles within the
// row's lanes; 32 / kLanes rows a warp. Softmax and LogSoftmax.
template <int kLanes, int kPer, typename T>
__global__ void SoftmaxShortRowsKernel(SoftmaxKind kind, int64_t rows, int n, const T* x, T* y) {
  constexpr int kRowsPerWarp = 32 / kLanes;
  const int lane = static_cast<int>(threadIdx.x) % kLanes;
  const int64_t warp = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int64_t warps = static_cast<int64_t>(gridDim.x) * blockDim.x / 32;
  // Every lane of a warp runs the same iterations (the shuffles need them all).
  for (int64_t base = warp * kRowsPerWarp; base < rows; base += warps * kRowsPerWarp) {
    const int64_t row = base + static_cast<int>(threadIdx.x % 32) / kLanes;
    const bool live = row < rows;
    const T* xr = x + row * n;
    float v[kPer];
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int j = lane + kLanes * i;
      v[i] = live && j < n ? Load(xr[j]) : -INFINITY;
      m = fmaxf(m, v[i]);
    }
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) s += lane + kLanes * i < n ? expf(v[i] - m) : 0.f;
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (!live) continue;
    T* yr = y + row * n;
    if (kind == SoftmaxKind::kSoftmax) {
      const float inv = 1.f / s;
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int j = lane + kLanes * i;
        if (j < n) yr[j] = Store<T>(expf(v[i] - m) * inv);
      }
    } else {
      const float lse = logf(s);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const int j = lane + kLanes * i;
        if (j < n) yr[j] = Store<T>((v[i] - m) - lse);  // as the CPU rounds
      }
    }
  }
}

// One thread per (outer, inner) column of n elements `inner` apart.
template <typename T>
__global__ void SoftmaxColumnsKernel(SoftmaxKind kind, int64_t outer, int64_t n, int64_t inner,
                                     const T* x, T* y) {
  KAIWU_CUDA_LOOP(c, outer * inner) {
    const int64_t base = (c / inner) * n * inner + c % inner;
    const T* xc = x + base;
    T* yc = y + base;
    if (kind == SoftmaxKind::kHardmax) {
      int64_t best = 0;
      for (int64_t i = 1; i < n; ++i)
        if (Load(xc[i * inner]) > Load(xc[best * inner])) best = i;
      for (int64_t i = 0; i < n; ++i) yc[i * inner] = Store<T>(i == best ? 1.f : 0.f);
      continue;
    }
    float m = Load(xc[0]);
    for (int64_t i = 1; i < n; ++i) m = fmaxf(m, Load(xc[i * inner]));
    float s = 0.f;
    for (int64_t i = 0; i < n; ++i) s += expf(Load(xc[i * inner]) - m);
    if (kind == SoftmaxKind::kSoftmax) {
      const float inv = 1.f / s;
      for (int64_t i = 0; i < n; ++i) yc[i * inner] = Store<T>(expf(Load(xc[i * inner]) - m) * inv);
    } else {
      const float lse = logf(s);
      for (int64_t i = 0; i < n; ++i) yc[i * inner] = Store<T>((Load(xc[i * inner]) - m) - lse);
    }
  }
}

class SoftmaxKernel : public CudaKernel {
 public:
  explicit SoftmaxKernel(SoftmaxKind kind) : kind_(kind) {}

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const SoftmaxParams& p = ctx.Params<SoftmaxParams>();
    outer_ = p.outer;
    n_ = p.n;
    inner_ = p.inner;
    dtype_ = ctx.in(0).dtype;
  }

  void Run(const KernelIO& io) const override {
    if (outer_ * n_ * inner_ == 0) return;
    WithFloatType(dtype_, [&](auto t) { RunTyped<decltype(t)>(io); });
  }

 private:
  template <typename T>
  void RunTyped(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    T* y = static_cast<T*>(io.outputs[0]);
    cudaStream_t s = Dev(io).stream;
    if (inner_ > 1) {
      SoftmaxColumnsKernel<<<GridFor(outer_ * inner_), kBlock, 0, s>>>(kind_, outer_, n_, inner_,
                                                                        x, y);
    } else if (kind_ != SoftmaxKind::kHardmax && n_ <= 128) {
      const int n = static_cast<int>(n_);
      if (n_ <= 32) {
        SoftmaxShortRowsKernel<8, 4, T><<<RowBlocks(kBlock / 8), kBlock, 0, s>>>(kind_, outer_, n, x, y);
      } else if (n_ <= 64) {
        SoftmaxShortRowsKernel<16, 4, T><<<RowBlocks(kBlock / 16), kBlock, 0, s>>>(kind_, outer_, n, x, y);
      } else {
        SoftmaxShortRowsKernel<32, 4, T><<<RowBlocks(kBlock / 32), kBlock, 0, s>>>(kind_, outer_, n, x, y);
      }
    } else if (n_ <= kWarpRowMax) {
      constexpr int64_t kRowsPerBlock = kBlock / 32;
      SoftmaxRowsKernel<32, T><<<RowBlocks(kRowsPerBlock), kBlock, 0, s>>>(kind_, outer_, n_, x, y);
    } else {
      SoftmaxRowsKernel<kBlock, T><<<RowBlocks(1), kBlock, 0, s>>>(kind_, outer_, n_, x, y);
    }
    CheckLaunch("softmax kernel");
  }

  unsigned RowBlocks(int64_t rows_per_block) const {
    const int64_t blocks = (outer_ + rows_per_block - 1) / rows_per_block;
    return static_cast<unsigned>(blocks < 65535LL * 64 ? blocks : 65535LL * 64);
  }

  SoftmaxKind kind_;
  int64_t outer_ = 1, n_ = 1, inner_ = 1;
  DType dtype_ = DType::kFloat32;
};

template <SoftmaxKind K>
std::unique_ptr<Kernel> MakeSoftmax(const Node&) {
  return std::make_unique<SoftmaxKernel>(K);
}

}  // namespace

void RegisterSoftmaxKernels(KernelRegistry& r) {
  const std::initializer_list<DType> floats = {DType::kFloat32, DType::kFloat16,
                                               DType::kBFloat16};
  r.Register(OpId::kSoftmax, floats, &MakeSoftmax<SoftmaxKind::kSoftmax>);
  r.Register(OpId::kLogSoftmax, floats, &MakeSoftmax<SoftmaxKind::kLogSoftmax>);
  r.Register(OpId::kHardmax, floats, &MakeSoftmax<SoftmaxKind::kHardmax>);
}

}  // namespace eltwise
}  // namespace cuda
}  // namespace kaiwu
