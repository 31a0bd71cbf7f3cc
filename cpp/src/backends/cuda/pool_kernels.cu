// MaxPool (with its optional int64 Indices output), AveragePool (1-D to 3-D,
// pads/auto_pad, dilations, ceil_mode, count_include_pad) and GlobalMaxPool /
// GlobalAveragePool on float32, float16 and bfloat16 (16-bit values are read
// as float, sums and maxima kept in float, the result rounded once when
// stored). The windowed pools run one thread per output
// element over the taps in the CPU kernel's order (d, h, w), so sums and the
// first maximum on ties match it; the global pools run one block per plane.
#include <cfloat>
#include <cstdint>

#include "backends/cuda/conv_family.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/half_util.cuh"
#include "backends/cuda/norm_reduce.cuh"
#include "ops/conv.h"

namespace kaiwu {
namespace cuda {
namespace {

// SpatialGeometry (ops/conv_geometry.h) by value: dims (D, H, W), unused
// leading ones of size 1.
struct PoolWindow {
  int64_t in[3], out[3], kernel[3], stride[3], dilation[3], pad_begin[3], pad_end[3];

  static PoolWindow From(const SpatialGeometry& g) {
    PoolWindow w;
    for (int d = 0; d < 3; ++d) {
      w.in[d] = g.in[d];
      w.out[d] = g.out[d];
      w.kernel[d] = g.kernel[d];
      w.stride[d] = g.stride[d];
      w.dilation[d] = g.dilation[d];
      w.pad_begin[d] = g.pad_begin[d];
      w.pad_end[d] = g.pad_end[d];
    }
    return w;
  }
  __device__ int64_t in_size() const { return in[0] * in[1] * in[2]; }
  __device__ int64_t out_size() const { return out[0] * out[1] * out[2]; }
  /// Input coordinate of dim d for output coordinate o and tap k (may be in the padding).
  __device__ int64_t Pos(int d, int64_t o, int64_t k) const {
    return o * stride[d] - pad_begin[d] + k * dilation[d];
  }
  /// Output element f of a plane as (od, oh, ow).
  __device__ void Coords(int64_t f, int64_t* o) const {
    o[2] = f % out[2];
    o[1] = (f / out[2]) % out[1];
    o[0] = f / (out[2] * out[1]);
  }
};

// Max over the taps inside the input, one thread per output element. Without
// indices: from -inf with fmaxf, so NaN inputs are skipped and a window all in
// the padding gives -inf (as the CPU's std::max(acc, v)). With indices: from
// lowest() with a strict >, recording the first maximum's flat input index
// plane * plane_size + (d * s0 + h * s1 + w * s2), row- or column-major.
template <bool kIndices, typename T>
__global__ void MaxPoolKernel(PoolWindow g, int64_t planes, bool col_major,
                              const T* __restrict__ x, T* __restrict__ y,
                              int64_t* __restrict__ indices) {
  const int64_t out_size = g.out_size(), in_size = g.in_size();
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2];
  const int64_t s0 = col_major ? 1 : H * W, s1 = col_major ? D : W, s2 = col_major ? D * H : 1;
  KAIWU_CUDA_LOOP(i, planes * out_size) {
    const int64_t plane = i / out_size, base = plane * in_size;
    int64_t o[3];
    g.Coords(i % out_size, o);
    const T* xp = x + base;
    float best = kIndices ? -FLT_MAX : -INFINITY;
    int64_t best_at = base;
    for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
      const int64_t id = g.Pos(0, o[0], kd);
      if (id < 0 || id >= D) continue;
      for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
        const int64_t ih = g.Pos(1, o[1], kh);
        if (ih < 0 || ih >= H) continue;
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
          const int64_t iw = g.Pos(2, o[2], kw);
          if (iw < 0 || iw >= W) continue;
          const float v = Load(xp[(id * H + ih) * W + iw]);
          if (kIndices) {
            if (v > best) {
              best = v;
              best_at = base + id * s0 + ih * s1 + iw * s2;
            }
          } else {
            best = fmaxf(best, v);
          }
        }
      }
    }
    y[i] = Store<T>(best);
    if (kIndices) indices[i] = best_at;
  }
}

// NhwcMaxPool: x [N, H, W, C] -> y [N, OH, OW, C] (2-D: the window's dims 1
// and 2), one thread per output element so that neighbouring threads read
// neighbouring channels; max from -inf with fmaxf as MaxPoolKernel<false>.
template <typename T>
__global__ void MaxPoolNhwcKernel(PoolWindow g, int64_t total, int64_t C, const T* __restrict__ x,
                                  T* __restrict__ y) {
  const int64_t H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2];
  KAIWU_CUDA_LOOP(i, total) {
    const int64_t c = i % C, r = i / C;
    const int64_t ow = r % OW, oh = (r / OW) % OH, n = r / (OW * OH);
    const T* xn = x + n * H * W * C + c;
    float best = -INFINITY;
    for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
      const int64_t ih = g.Pos(1, oh, kh);
      if (ih < 0 || ih >= H) continue;
      for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
        const int64_t iw = g.Pos(2, ow, kw);
        if (iw >= 0 && iw < W) best = fmaxf(best, Load(xn[(ih * W + iw) * C]));
      }
    }
    y[i] = Store<T>(best);
  }
}

// Number of taps k of dim d at output o inside [lo, hi).
__device__ int64_t TapsInside(const PoolWindow& g, int d, int64_t o, int64_t lo, int64_t hi) {
  int64_t n = 0;
  for (int64_t k = 0; k < g.kernel[d]; ++k) {
    const int64_t pos = g.Pos(d, o, k);
    n += pos >= lo && pos < hi;
  }
  return n;
}

// Sum of the taps inside the input over the window size: the taps inside the
// input, or inside the padded input with count_include_pad (never the
// ceil_mode overhang); 0 for an empty window.
template <typename T>
__global__ void AveragePoolKernel(PoolWindow g, int64_t planes, bool include_pad,
                                  const T* __restrict__ x, T* __restrict__ y) {
  const int64_t out_size = g.out_size(), in_size = g.in_size();
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2];
  KAIWU_CUDA_LOOP(i, planes * out_size) {
    int64_t o[3];
    g.Coords(i % out_size, o);
    const T* xp = x + (i / out_size) * in_size;
    float sum = 0.f;
    for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
      const int64_t id = g.Pos(0, o[0], kd);
      if (id < 0 || id >= D) continue;
      for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
        const int64_t ih = g.Pos(1, o[1], kh);
        if (ih < 0 || ih >= H) continue;
        for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
          const int64_t iw = g.Pos(2, o[2], kw);
          if (iw >= 0 && iw < W) sum += Load(xp[(id * H + ih) * W + iw]);
        }
      }
    }
    int64_t count = 1;
    for (int d = 0; d < 3; ++d) {
      const int64_t lo = include_pad ? -g.pad_begin[d] : 0;
      const int64_t hi = g.in[d] + (include_pad ? g.pad_end[d] : 0);
      count *= TapsInside(g, d, o[d], lo, hi);
    }
    y[i] = Store<T>(count > 0 ? sum / static_cast<float>(count) : 0.f);
  }
}

// One block per plane of `size` elements: its max, or its mean (0 when empty).
template <bool kMax, typename T>
__global__ void GlobalPoolPlanesKernel(int64_t planes, int64_t size, const T* __restrict__ x,
                                       T* __restrict__ y) {
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    const T* xp = x + p * size;
    float acc = kMax ? -INFINITY : 0.f;
    for (int64_t j = threadIdx.x; j < size; j += blockDim.x) {
      const float v = Load(xp[j]);
      acc = kMax ? fmaxf(acc, v) : acc + v;
    }
    if (kMax) {
      acc = BlockReduce(acc, MaxOp());
    } else {
      acc = BlockReduce(acc, SumOp());
    }
    if (threadIdx.x == 0)
      y[p] = Store<T>(kMax ? acc : (size > 0 ? acc / static_cast<float>(size) : 0.f));
  }
}


class PoolKernel : public CudaKernel {
 public:
  explicit PoolKernel(bool is_max) : max_(is_max) {}

  void Run(const KernelIO& io) const override {
    if (total_ == 0) return;
    WithFloatType(dtype_, [&](auto t) { RunTyped<decltype(t)>(io); });
  }

 private:
  template <typename T>
  void RunTyped(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    T* y = static_cast<T*>(io.outputs[0]);
    const cudaStream_t stream = Dev(io).stream;
    const unsigned grid = GridFor(total_);
    if (!max_) {
      AveragePoolKernel<<<grid, kBlock, 0, stream>>>(window_, planes_, include_pad_, x, y);
    } else if (indices_) {
      MaxPoolKernel<true, T><<<grid, kBlock, 0, stream>>>(window_, planes_, col_major_, x, y,
                                                       static_cast<int64_t*>(io.outputs[1]));
    } else {
      MaxPoolKernel<false, T><<<grid, kBlock, 0, stream>>>(window_, planes_, false, x, y, nullptr);
    }
    CheckLaunch(max_ ? "MaxPool kernel" : "AveragePool kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const PoolParams& p = ctx.Params<PoolParams>();
    const Shape& x = ctx.in(0).shape;
    window_ = PoolWindow::From(p.geo);
    planes_ = x[0] * x[1];
    total_ = planes_ * p.geo.out_size();
    indices_ = max_ && p.indices;
    col_major_ = p.col_major;
    include_pad_ = p.include_pad;
    dtype_ = ctx.in(0).dtype;
  }

 private:
  bool max_;
  DType dtype_ = DType::kFloat32;
  PoolWindow window_{};
  int64_t planes_ = 0, total_ = 0;
  bool indices_ = false, col_major_ = false;  // MaxPool's Indices output
  bool include_pad_ = false;                  // AveragePool's count_include_pad
};

class GlobalPoolKernel : public CudaKernel {
 public:
  explicit GlobalPoolKernel(bool is_max) : max_(is_max) {}

  void Run(const KernelIO& io) const override {
    if (planes_ == 0) return;
    WithFloatType(dtype_, [&](auto t) { RunTyped<decltype(t)>(io); });
  }

 private:
  template <typename T>
  void RunTyped(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    T* y = static_cast<T*>(io.outputs[0]);
    const cudaStream_t stream = Dev(io).stream;
    if (max_) {
      GlobalPoolPlanesKernel<true, T><<<RowGrid(planes_), kBlock, 0, stream>>>(planes_, size_, x,
                                                                               y);
    } else {
      GlobalPoolPlanesKernel<false, T><<<RowGrid(planes_), kBlock, 0, stream>>>(planes_, size_, x,
                                                                                y);
    }
    CheckLaunch(max_ ? "GlobalMaxPool kernel" : "GlobalAveragePool kernel");
  }

 public:

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const Shape& x = ctx.in(0).shape;
    planes_ = x[0] * x[1];
    size_ = NumElements(Shape(x.begin() + 2, x.end()));
    dtype_ = ctx.in(0).dtype;
  }

 private:
  bool max_;
  DType dtype_ = DType::kFloat32;
  int64_t planes_ = 0, size_ = 0;
};

// The same over 16-byte packs of V channels (C % V == 0, x and y aligned).
template <int V, typename T>
struct alignas(sizeof(T) * V) PoolPack {
  T v[V];
};

template <int V, typename T>
__global__ void MaxPoolNhwcPackKernel(PoolWindow g, int64_t packs, int64_t C, const T* __restrict__ x,
                                      T* __restrict__ y) {
  const int64_t H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2], CP = C / V;
  const auto* xp = reinterpret_cast<const PoolPack<V, T>*>(x);
  auto* yp = reinterpret_cast<PoolPack<V, T>*>(y);
  KAIWU_CUDA_LOOP(i, packs) {
    const int64_t cp = i % CP, r = i / CP;
    const int64_t ow = r % OW, oh = (r / OW) % OH, n = r / (OW * OH);
    const PoolPack<V, T>* xn = xp + n * H * W * CP + cp;
    float best[V];
#pragma unroll
    for (int j = 0; j < V; ++j) best[j] = -INFINITY;
    for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
      const int64_t ih = g.Pos(1, oh, kh);
      if (ih < 0 || ih >= H) continue;
      for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
        const int64_t iw = g.Pos(2, ow, kw);
        if (iw < 0 || iw >= W) continue;
        const PoolPack<V, T> v = xn[(ih * W + iw) * CP];
#pragma unroll
        for (int j = 0; j < V; ++j) best[j] = fmaxf(best[j], Load(v.v[j]));
      }
    }
    PoolPack<V, T> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = Store<T>(best[j]);
    yp[i] = o;
  }
}

class NhwcMaxPoolKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (total_ == 0) return;
    WithFloatType(dtype_, [&](auto t) {
      using T = decltype(t);
      constexpr int V = 16 / sizeof(T);
      const T* x = static_cast<const T*>(io.inputs[0]);
      T* y = static_cast<T*>(io.outputs[0]);
      if (channels_ % V == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
          reinterpret_cast<uintptr_t>(y) % 16 == 0)
        MaxPoolNhwcPackKernel<V, T><<<GridFor(total_ / V), kBlock, 0, Dev(io).stream>>>(
            window_, total_ / V, channels_, x, y);
      else
        MaxPoolNhwcKernel<T><<<GridFor(total_), kBlock, 0, Dev(io).stream>>>(window_, total_, channels_, x,
                                                                           y);
    });
    CheckLaunch("NhwcMaxPool kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const PoolParams& p = ctx.Params<PoolParams>();
    const Shape& x = ctx.in(0).shape;
    window_ = PoolWindow::From(p.geo);
    channels_ = x[3];
    total_ = x[0] * p.geo.out_size() * channels_;
    dtype_ = ctx.in(0).dtype;
  }

 private:
  DType dtype_ = DType::kFloat32;
  PoolWindow window_{};
  int64_t channels_ = 0, total_ = 0;
};

template <typename K, bool kMax>
std::unique_ptr<Kernel> MakePool(const Node&) {
  return std::make_unique<K>(kMax);
}

}  // namespace

void RegisterPoolKernels(KernelRegistry& r) {
  const std::initializer_list<DType> floats = {DType::kFloat32, DType::kFloat16,
                                               DType::kBFloat16};
  r.Register(OpId::kMaxPool, floats, &MakePool<PoolKernel, true>);
  r.Register(OpId::kAveragePool, floats, &MakePool<PoolKernel, false>);
  r.Register(OpId::kGlobalMaxPool, floats, &MakePool<GlobalPoolKernel, true>);
  r.Register(OpId::kGlobalAveragePool, floats, &MakePool<GlobalPoolKernel, false>);
  r.Register(OpId::kNhwcMaxPool, floats, &MakeKernel<NhwcMaxPoolKernel>);
}

}  // namespace cuda
}  // namespace kaiwu
