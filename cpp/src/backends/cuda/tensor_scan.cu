// CumSum and TopK: one thread per line along the axis (lines are (outer,
// inner) pairs, so neighbouring threads read neighbouring inner elements).
// CumSum adds in order, as the CPU kernel; TopK keeps the best k seen so far
// in a sorted buffer of at most kMaxTopK entries (larger k: kUnsupported).
#include <type_traits>

#include "backends/cuda/tensor_util.cuh"
#include "ops/game.h"

namespace kaiwu {
namespace cuda {
namespace tensor {
namespace {

constexpr int64_t kMaxTopK = 64;

template <typename T>
__global__ void CumSumGpu(const T* __restrict__ x, T* __restrict__ y, int64_t lines,
                          int64_t inner, int64_t dim, bool exclusive, bool reverse) {
  KAIWU_CUDA_LOOP(line, lines) {
    const int64_t o = line / inner, j = line - o * inner;
    const int64_t step = reverse ? -inner : inner;
    int64_t p = o * dim * inner + j + (reverse ? (dim - 1) * inner : 0);
    T acc = T(0);
    for (int64_t s = 0; s < dim; ++s, p += step) {
      if (exclusive) {
        y[p] = acc;
        acc += x[p];
      } else {
        acc += x[p];
        y[p] = acc;
      }
    }
  }
}

class CumSumKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (lines_ * dim_ == 0) return;
    switch (dtype_) {
      case DType::kFloat32: Launch<float>(io); break;
      case DType::kFloat64: Launch<double>(io); break;
      case DType::kInt32: Launch<int32_t>(io); break;
      default: Launch<int64_t>(io); break;
    }
    CheckLaunch("CumSum kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const CumSumParams& p = ctx.Params<CumSumParams>();
    const TensorInfo& x = ctx.in(0);
    dim_ = x.shape[p.axis];
    inner_ = NumElements(Shape(x.shape.begin() + p.axis + 1, x.shape.end()));
    lines_ = NumElements(Shape(x.shape.begin(), x.shape.begin() + p.axis)) * inner_;
    exclusive_ = p.exclusive;
    reverse_ = p.reverse;
    dtype_ = x.dtype;
  }

 private:
  template <typename T>
  void Launch(const KernelIO& io) const {
    CumSumGpu<T><<<GridFor(lines_), kBlock, 0, Dev(io).stream>>>(
        static_cast<const T*>(io.inputs[0]), static_cast<T*>(io.outputs[0]), lines_, inner_, dim_,
        exclusive_, reverse_);
  }

  int64_t dim_ = 0, inner_ = 1, lines_ = 0;
  bool exclusive_ = false, reverse_ = false;
  DType dtype_ = DType::kFloat32;
};

// a ranks before b in ascending numeric order, NaN last.
template <typename T>
__device__ inline bool Less(T a, T b) {
  if constexpr (std::is_floating_point<T>::value) {
    if (isnan(a)) return false;
    if (isnan(b)) return true;
  }
  return a < b;
}

// a ranks strictly before b (ties are decided by index).
template <typename T, bool kLargest>
__device__ inline bool Better(T a, T b) {
  return kLargest ? Less(b, a) : Less(a, b);
}

// Per line: scanning in index order, a value is inserted after every kept value
// not worse than it, so ties keep the lower index first (as ONNX specifies and
// the CPU kernel does). y_idx may be null.
template <typename T, bool kLargest>
__global__ void TopKGpu(const T* __restrict__ x, T* __restrict__ y, int64_t* __restrict__ y_idx,
                        int64_t lines, int64_t inner, int64_t dim, int k) {
  KAIWU_CUDA_LOOP(line, lines) {
    const int64_t o = line / inner, i = line - o * inner;
    const T* xl = x + o * dim * inner + i;
    T best[kMaxTopK];
    int64_t at[kMaxTopK];
    int n = 0;
    for (int64_t j = 0; j < dim; ++j) {
      const T v = xl[j * inner];
      if (n == k && !Better<T, kLargest>(v, best[n - 1])) continue;
      int p = n < k ? n++ : n - 1;
      for (; p > 0 && Better<T, kLargest>(v, best[p - 1]); --p) {
        best[p] = best[p - 1];
        at[p] = at[p - 1];
      }
      best[p] = v;
      at[p] = j;
    }
    const int64_t out = o * k * inner + i;
    for (int j = 0; j < k; ++j) {
      y[out + j * inner] = best[j];
      if (y_idx) y_idx[out + j * inner] = at[j];
    }
  }
}

class TopKKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (lines_ == 0 || k_ == 0) return;
    switch (dtype_) {
      case DType::kFloat32: Launch<float>(io); break;
      case DType::kFloat64: Launch<double>(io); break;
      case DType::kInt64: Launch<int64_t>(io); break;
      case DType::kInt32: Launch<int32_t>(io); break;
      case DType::kInt8: Launch<int8_t>(io); break;
      case DType::kUInt8: Launch<uint8_t>(io); break;
      default: Launch<int16_t>(io); break;
    }
    CheckLaunch("TopK kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const TopKParams& p = ctx.Params<TopKParams>();
    const TensorInfo& x = ctx.in(0);
    if (p.k > kMaxTopK) Unsupported(ctx, "K = ", p.k, " (at most ", kMaxTopK, ")");
    k_ = static_cast<int>(p.k);
    dim_ = x.shape[p.axis];
    inner_ = NumElements(Shape(x.shape.begin() + p.axis + 1, x.shape.end()));
    lines_ = NumElements(Shape(x.shape.begin(), x.shape.begin() + p.axis)) * inner_;
    largest_ = p.largest;
    has_indices_ = ctx.outputs.size() > 1 && ctx.outputs[1].present;
    dtype_ = x.dtype;
  }

 private:
  template <typename T>
  void Launch(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    T* y = static_cast<T*>(io.outputs[0]);
    int64_t* y_idx = has_indices_ ? static_cast<int64_t*>(io.outputs[1]) : nullptr;
    if (largest_)
      TopKGpu<T, true><<<GridFor(lines_), kBlock, 0, Dev(io).stream>>>(x, y, y_idx, lines_, inner_,
                                                                       dim_, k_);
    else
      TopKGpu<T, false><<<GridFor(lines_), kBlock, 0, Dev(io).stream>>>(x, y, y_idx, lines_,
                                                                        inner_, dim_, k_);
  }

  int64_t dim_ = 0, inner_ = 1, lines_ = 0;
  int k_ = 0;
  bool largest_ = true, has_indices_ = false;
  DType dtype_ = DType::kFloat32;
};

}  // namespace

void RegisterTensorScanKernels(KernelRegistry& r) {
  r.Register(OpId::kCumSum, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64},
             &MakeKernel<CumSumKernel>);
  r.Register(OpId::kTopK,
             {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32, DType::kInt8,
              DType::kUInt8, DType::kInt16},
             &MakeKernel<TopKKernel>);
}

}  // namespace tensor
}  // namespace cuda
}  // namespace kaiwu
