// Gather, GatherElements, GatherND and OneHot: one thread per output element
// reads its index on the device. An out-of-range index (Gather, GatherElements,
// GatherND) reports an error for the step and writes 0; OneHot, as the ONNX
// spec and the CPU kernel, turns one into an all-off row.
#include <type_traits>
#include <vector>

#include "backends/cuda/tensor_util.cuh"
#include "ops/tensor.h"

namespace kaiwu {
namespace cuda {
namespace tensor {
namespace {

// Runs the statement with `using U = <unsigned type of ELEM bytes>` and
// `using I = int64_t` when INDEX64, else int32_t (the indices' dtype).
#define KAIWU_GATHER_BY_ELEM_INDEX(elem, index64, ...)   \
  KAIWU_CUDA_BY_ELEM(elem, {                             \
    if (index64) {                                       \
      using I = int64_t;                                 \
      __VA_ARGS__;                                       \
    } else {                                             \
      using I = int32_t;                                 \
      __VA_ARGS__;                                       \
    }                                                    \
  })

// out[o, j, i] = data[o, idx[j], i], item = (o * count + j) * inner + i.
template <typename U, typename I>
__global__ void GatherGpu(const U* __restrict__ src, const I* __restrict__ idx,
                             U* __restrict__ dst, int64_t count, int64_t inner, int64_t dim,
                             int64_t total, int* error_flag, int step) {
  KAIWU_CUDA_LOOP(item, total) {
    const int64_t t = item / inner, i = item - t * inner;
    const int64_t o = t / count, j = t - o * count;
    const int64_t k = WrapIndex(static_cast<int64_t>(idx[j]), dim);
    if (k < 0) {
      ReportError(error_flag, step);
      dst[item] = U{};
      continue;
    }
    dst[item] = src[(o * dim + k) * inner + i];
  }
}

// out[p] = data[DimOffset(dims, p) + idx[p] * axis_stride], dims = indices' shape
// with data strides, the axis stride zeroed.
template <typename U, typename I>
__global__ void GatherElementsGpu(const U* __restrict__ src, const I* __restrict__ idx,
                                     U* __restrict__ dst, DimArray<int64_t> dims,
                                     int64_t axis_stride, int64_t dim, int64_t total,
                                     int* error_flag, int step) {
  KAIWU_CUDA_LOOP(p, total) {
    const int64_t k = WrapIndex(static_cast<int64_t>(idx[p]), dim);
    if (k < 0) {
      ReportError(error_flag, step);
      dst[p] = U(0);
      continue;
    }
    dst[p] = src[DimOffset(dims, p) + k * axis_stride];
  }
}

// out[i, j] = data[batch(i) + sum_m idx[i, m] * strides[m] + j] for j < slice;
// `indexed` holds the k indexed dims (sizes) and their data strides.
template <typename U, typename I>
__global__ void GatherNDGpu(const U* __restrict__ src, const I* __restrict__ idx,
                               U* __restrict__ dst, DimArray<int64_t> indexed, int64_t slice,
                               int64_t per_batch, int64_t batch_stride, int64_t total,
                               int* error_flag, int step) {
  KAIWU_CUDA_LOOP(t, total) {
    const int64_t i = t / slice, j = t - i * slice;
    int64_t off = (i / per_batch) * batch_stride + j;
    if (!AddTupleOffset(idx + i * indexed.n, indexed, &off)) {
      ReportError(error_flag, step);
      dst[t] = U(0);
      continue;
    }
    dst[t] = src[off];
  }
}

// out[o, d, i] = d == index(o, i) ? on : off, with values = [off, on].
template <typename U, typename I>
__global__ void OneHotGpu(const I* __restrict__ idx, const U* __restrict__ values,
                             U* __restrict__ dst, int64_t depth, int64_t inner, int64_t total) {
  const U off = values[0], on = values[1];
  KAIWU_CUDA_LOOP(t, total) {
    const int64_t i = t % inner, rest = t / inner;
    const int64_t d = rest % depth, o = rest / depth;
    const I v = idx[o * inner + i];
    bool hit = true;
    if constexpr (std::is_floating_point<I>::value) {
      const I magnitude = v < I(0) ? -v : v;
      hit = magnitude < static_cast<I>(depth + 1);  // false for NaN
    }
    int64_t k = hit ? static_cast<int64_t>(v) : -1;
    if (k < 0) k += depth;
    dst[t] = hit && k == d ? on : off;
  }
}

class GatherKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (total_ == 0) return;
    // The planner made the output a view of the data (one index known when planned).
    if (view_bytes_ >= 0 && io.outputs[0] == static_cast<const char*>(io.inputs[0]) + view_bytes_) return;
    const DeviceContext& dev = Dev(io);
    // Rows of a multiple of 16 bytes (attention's q / k / v picked from one
    // projection, embedding rows) move as 16-byte vectors.
    const int64_t row_bytes = inner_ * static_cast<int64_t>(elem_);
    if (row_bytes % 16 == 0 &&
        ((reinterpret_cast<uintptr_t>(io.inputs[0]) | reinterpret_cast<uintptr_t>(io.outputs[0])) & 15) == 0) {
      const int64_t vecs = total_ / inner_ * (row_bytes / 16);
      if (index64_) {
        GatherGpu<uint4, int64_t><<<GridFor(vecs), kBlock, 0, dev.stream>>>(
            static_cast<const uint4*>(io.inputs[0]), static_cast<const int64_t*>(io.inputs[1]),
            static_cast<uint4*>(io.outputs[0]), count_, row_bytes / 16, dim_, vecs, dev.error_flag, dev.step);
      } else {
        GatherGpu<uint4, int32_t><<<GridFor(vecs), kBlock, 0, dev.stream>>>(
            static_cast<const uint4*>(io.inputs[0]), static_cast<const int32_t*>(io.inputs[1]),
            static_cast<uint4*>(io.outputs[0]), count_, row_bytes / 16, dim_, vecs, dev.error_flag, dev.step);
      }
      CheckLaunch("Gather kernel");
      return;
    }
    KAIWU_GATHER_BY_ELEM_INDEX(elem_, index64_,
        GatherGpu<U, I><<<GridFor(total_), kBlock, 0, dev.stream>>>(
            static_cast<const U*>(io.inputs[0]), static_cast<const I*>(io.inputs[1]),
            static_cast<U*>(io.outputs[0]), count_, inner_, dim_, total_, dev.error_flag,
            dev.step));
    CheckLaunch("Gather kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.inputs[0];
    const int64_t axis = ctx.Params<AxisParams>().axis;
    inner_ = NumElements(Shape(x.shape.begin() + axis + 1, x.shape.end()));
    dim_ = x.shape[axis];
    count_ = ctx.inputs[1].size();
    total_ = ctx.outputs[0].size();
    elem_ = DTypeSize(x.dtype);
    index64_ = ctx.inputs[1].dtype == DType::kInt64;
    view_bytes_ = ctx.alias[0] == 0 && !ctx.alias_offset.empty()
                      ? ctx.alias_offset[0] * static_cast<int64_t>(elem_) : -1;
  }

 private:
  int64_t inner_ = 1, dim_ = 0, count_ = 0, total_ = 0, view_bytes_ = -1;
  size_t elem_ = 4;
  bool index64_ = true;
};

class GatherElementsKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (total_ == 0) return;
    const DeviceContext& dev = Dev(io);
    KAIWU_GATHER_BY_ELEM_INDEX(elem_, index64_,
        GatherElementsGpu<U, I><<<GridFor(total_), kBlock, 0, dev.stream>>>(
            static_cast<const U*>(io.inputs[0]), static_cast<const I*>(io.inputs[1]),
            static_cast<U*>(io.outputs[0]), dims_, axis_stride_, dim_, total_, dev.error_flag,
            dev.step));
    CheckLaunch("GatherElements kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.inputs[0];
    const TensorInfo& ind = ctx.inputs[1];
    if (x.rank() > kMaxDims) Unsupported(ctx, "rank ", x.rank(), " (at most ", kMaxDims, ")");
    const int64_t axis = ctx.Params<AxisParams>().axis;
    std::vector<int64_t> strides = Strides(x.shape);
    axis_stride_ = strides[axis];
    strides[axis] = 0;
    dims_ = MakeDims<int64_t>(ind.shape, strides);
    dim_ = x.shape[axis];
    total_ = ind.size();
    elem_ = DTypeSize(x.dtype);
    index64_ = ind.dtype == DType::kInt64;
  }

 private:
  DimArray<int64_t> dims_;
  int64_t axis_stride_ = 0, dim_ = 0, total_ = 0;
  size_t elem_ = 4;
  bool index64_ = true;
};

class GatherNDKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (total_ == 0) return;
    const DeviceContext& dev = Dev(io);
    KAIWU_GATHER_BY_ELEM_INDEX(elem_, index64_,
        GatherNDGpu<U, I><<<GridFor(total_), kBlock, 0, dev.stream>>>(
            static_cast<const U*>(io.inputs[0]), static_cast<const I*>(io.inputs[1]),
            static_cast<U*>(io.outputs[0]), indexed_, slice_, per_batch_, batch_stride_, total_,
            dev.error_flag, dev.step));
    CheckLaunch("GatherND kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.inputs[0];
    const TensorInfo& ind = ctx.inputs[1];
    const int q = ind.rank();
    const int64_t b = ctx.Params<GatherNDParams>().batch_dims;
    const int64_t k = ind.shape[q - 1];
    if (k > kMaxDims) Unsupported(ctx, "index tuples of ", k, " (at most ", kMaxDims, ")");
    const std::vector<int64_t> strides = Strides(x.shape);
    indexed_ = MakeDims<int64_t>(std::vector<int64_t>(x.shape.begin() + b, x.shape.begin() + b + k),
                                 std::vector<int64_t>(strides.begin() + b, strides.begin() + b + k));
    slice_ = NumElements(Shape(x.shape.begin() + b + k, x.shape.end()));
    per_batch_ = NumElements(Shape(ind.shape.begin() + b, ind.shape.end() - 1));
    batch_stride_ = NumElements(Shape(x.shape.begin() + b, x.shape.end()));
    total_ = ctx.outputs[0].size();
    elem_ = DTypeSize(x.dtype);
    index64_ = ind.dtype == DType::kInt64;
  }

 private:
  DimArray<int64_t> indexed_;
  int64_t slice_ = 1, per_batch_ = 1, batch_stride_ = 0, total_ = 0;
  size_t elem_ = 4;
  bool index64_ = true;
};

class OneHotKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (total_ == 0) return;
    KAIWU_CUDA_BY_ELEM(elem_, {
      switch (index_dtype_) {
        case DType::kInt64: Launch<U, int64_t>(io); break;
        case DType::kInt32: Launch<U, int32_t>(io); break;
        case DType::kFloat32: Launch<U, float>(io); break;
        case DType::kFloat64: Launch<U, double>(io); break;
        case DType::kInt8: Launch<U, int8_t>(io); break;
        case DType::kUInt8: Launch<U, uint8_t>(io); break;
        default: Launch<U, int16_t>(io); break;
      }
    });
    CheckLaunch("OneHot kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const OneHotParams& p = ctx.Params<OneHotParams>();
    const TensorInfo& ind = ctx.inputs[0];
    depth_ = p.depth;
    inner_ = NumElements(Shape(ind.shape.begin() + p.axis, ind.shape.end()));
    total_ = ctx.outputs[0].size();
    index_dtype_ = ind.dtype;
    elem_ = DTypeSize(ctx.outputs[0].dtype);
  }

 private:
  template <typename U, typename I>
  void Launch(const KernelIO& io) const {
    OneHotGpu<U, I><<<GridFor(total_), kBlock, 0, Dev(io).stream>>>(
        static_cast<const I*>(io.inputs[0]), static_cast<const U*>(io.inputs[2]),
        static_cast<U*>(io.outputs[0]), depth_, inner_, total_);
  }

  int64_t depth_ = 1, inner_ = 1, total_ = 0;
  DType index_dtype_ = DType::kInt64;
  size_t elem_ = 4;
};

#undef KAIWU_GATHER_BY_ELEM_INDEX

}  // namespace

void RegisterTensorGatherKernels(KernelRegistry& r) {
  r.Register(OpId::kGather, {KAIWU_ALL_DTYPES}, &MakeKernel<GatherKernel>);
  r.Register(OpId::kGatherElements, {KAIWU_ALL_DTYPES}, &MakeKernel<GatherElementsKernel>);
  r.Register(OpId::kGatherND, {KAIWU_ALL_DTYPES}, &MakeKernel<GatherNDKernel>);
  r.Register(OpId::kOneHot, {KAIWU_ALL_DTYPES}, &MakeKernel<OneHotKernel>);
}

}  // namespace tensor
}  // namespace cuda
}  // namespace kaiwu
