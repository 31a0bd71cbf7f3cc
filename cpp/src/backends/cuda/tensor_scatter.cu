// ScatterElements and ScatterND: the output is a device copy of data, then one
// thread per updated element writes (reduction none) or combines its update
// with an atomic compare-and-swap loop (add/mul/max/min, on 4- and 8-byte
// numeric dtypes). Duplicate indices with reduction none leave one of the
// updates, unspecified which (as ONNX allows); an out-of-range index reports
// an error for the step and its update is skipped.
#include <cstring>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "backends/cuda/tensor_util.cuh"
#include "ops/game.h"

namespace kaiwu {
namespace cuda {
namespace tensor {
namespace {

template <typename T>
__device__ inline T Reduced(Reduction r, T dst, T v) {
  switch (r) {
    case Reduction::kAdd: return static_cast<T>(dst + v);
    case Reduction::kMul: return static_cast<T>(dst * v);
    case Reduction::kMax: return dst < v ? v : dst;
    case Reduction::kMin: return v < dst ? v : dst;
    default: return v;
  }
}

// *addr = Reduced(r, *addr, v) atomically: a compare-and-swap loop on the bits.
template <typename T>
__device__ inline void AtomicReduce(T* addr, T v, Reduction r) {
  using Bits = typename std::conditional<sizeof(T) == 4, unsigned int, unsigned long long>::type;
  static_assert(sizeof(T) == sizeof(Bits), "4- or 8-byte types only");
  Bits* bits = reinterpret_cast<Bits*>(addr);
  Bits old = *bits, assumed;
  do {
    assumed = old;
    T cur;
    memcpy(&cur, &assumed, sizeof(T));
    const T next = Reduced(r, cur, v);
    Bits next_bits;
    memcpy(&next_bits, &next, sizeof(T));
    old = atomicCAS(bits, assumed, next_bits);
  } while (old != assumed);
}

// Writes update v at y[off]: a plain store for reduction none. (Prepare allows
// reductions on 4- and 8-byte dtypes only.)
template <typename T>
__device__ inline void Apply(T* y, int64_t off, T v, Reduction r) {
  if constexpr (sizeof(T) == 4 || sizeof(T) == 8) {
    if (r != Reduction::kNone) {
      AtomicReduce(y + off, v, r);
      return;
    }
  }
  y[off] = v;
}

// y[DimOffset(dims, p) + idx[p] * axis_stride] (op)= upd[p]; dims = indices'
// shape with data strides, the axis stride zeroed.
template <typename T, typename I>
__global__ void ScatterElementsGpu(const I* __restrict__ idx, const T* __restrict__ upd,
                                   T* __restrict__ y, DimArray<int64_t> dims, int64_t axis_stride,
                                   int64_t dim, Reduction r, int64_t count, int* error_flag,
                                   int step) {
  KAIWU_CUDA_LOOP(p, count) {
    const int64_t k = WrapIndex(static_cast<int64_t>(idx[p]), dim);
    if (k < 0) {
      ReportError(error_flag, step);
      continue;
    }
    Apply(y, DimOffset(dims, p) + k * axis_stride, upd[p], r);
  }
}

// y[sum_m idx[i, m] * strides[m] + j] (op)= upd[i, j] for j < slice; `indexed`
// holds the k indexed dims (sizes) and their data strides.
template <typename T, typename I>
__global__ void ScatterNDGpu(const I* __restrict__ idx, const T* __restrict__ upd,
                             T* __restrict__ y, DimArray<int64_t> indexed, int64_t slice,
                             Reduction r, int64_t total, int* error_flag, int step) {
  KAIWU_CUDA_LOOP(t, total) {
    const int64_t i = t / slice, j = t - i * slice;
    int64_t off = j;
    if (!AddTupleOffset(idx + i * indexed.n, indexed, &off)) {
      ReportError(error_flag, step);
      continue;
    }
    Apply(y, off, upd[t], r);
  }
}

// What the two scatter kernels share: the reduction, the copy of data, and the
// dispatch to K::LaunchTyped<T, I> with T the element type (by size for
// reduction none, else the dtype) and I the index type.
class ScatterKernel : public CudaKernel {
 protected:
  void PrepareScatter(PrepareContext& ctx, int64_t updates) {
    const TensorInfo& x = ctx.in(0);
    reduction_ = ctx.Params<ScatterParams>().reduction;
    dtype_ = x.dtype;
    if (reduction_ != Reduction::kNone && dtype_ != DType::kFloat32 &&
        dtype_ != DType::kFloat64 && dtype_ != DType::kInt32 && dtype_ != DType::kInt64)
      Unsupported(ctx, "reduction '", ReductionName(reduction_), "' on ", DTypeName(dtype_));
    elem_ = DTypeSize(dtype_);
    data_bytes_ = static_cast<size_t>(x.size()) * elem_;
    index64_ = ctx.in(1).dtype == DType::kInt64;
    updates_ = updates;
  }

  template <typename K>
  static void RunScatter(const K& k, const KernelIO& io, const char* what) {
    CopyAsync(io.outputs[0], io.inputs[0], k.data_bytes_, Dev(io).stream, what);
    if (k.updates_ == 0) return;
    if (k.reduction_ == Reduction::kNone) {
      KAIWU_CUDA_BY_ELEM(k.elem_, ByIndex<K, U>(k, io));
    } else {
      switch (k.dtype_) {
        case DType::kFloat32: ByIndex<K, float>(k, io); break;
        case DType::kFloat64: ByIndex<K, double>(k, io); break;
        case DType::kInt32: ByIndex<K, int32_t>(k, io); break;
        default: ByIndex<K, int64_t>(k, io); break;
      }
    }
    CheckLaunch(what);
  }

  Reduction reduction_ = Reduction::kNone;
  DType dtype_ = DType::kFloat32;
  size_t elem_ = 4;
  size_t data_bytes_ = 0;
  bool index64_ = true;
  int64_t updates_ = 0;  // updated elements (threads)

 private:
  template <typename K, typename T>
  static void ByIndex(const K& k, const KernelIO& io) {
    if (k.index64_)
      k.template LaunchTyped<T, int64_t>(io);
    else
      k.template LaunchTyped<T, int32_t>(io);
  }
};

class ScatterElementsKernel : public ScatterKernel {
 public:
  void Run(const KernelIO& io) const override { RunScatter(*this, io, "ScatterElements"); }

  template <typename T, typename I>
  void LaunchTyped(const KernelIO& io) const {
    const DeviceContext& dev = Dev(io);
    ScatterElementsGpu<T, I><<<GridFor(updates_), kBlock, 0, dev.stream>>>(
        static_cast<const I*>(io.inputs[1]), static_cast<const T*>(io.inputs[2]),
        static_cast<T*>(io.outputs[0]), dims_, axis_stride_, dim_, reduction_, updates_,
        dev.error_flag, dev.step);
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.in(0);
    const TensorInfo& ind = ctx.in(1);
    const int axis = ctx.Params<ScatterParams>().axis;
    std::vector<int64_t> strides = Strides(x.shape);
    axis_stride_ = strides[axis];
    strides[axis] = 0;
    static_assert(kMaxScatterElementsRank <= kMaxDims, "ScatterElements rank");
    dims_ = MakeDims<int64_t>(ind.shape, strides);  // rank checked by shape inference
    dim_ = x.shape[axis];
    PrepareScatter(ctx, ind.size());
  }

 private:
  DimArray<int64_t> dims_;
  int64_t axis_stride_ = 0, dim_ = 0;
};

class ScatterNDKernel : public ScatterKernel {
 public:
  void Run(const KernelIO& io) const override { RunScatter(*this, io, "ScatterND"); }

  template <typename T, typename I>
  void LaunchTyped(const KernelIO& io) const {
    const DeviceContext& dev = Dev(io);
    ScatterNDGpu<T, I><<<GridFor(updates_), kBlock, 0, dev.stream>>>(
        static_cast<const I*>(io.inputs[1]), static_cast<const T*>(io.inputs[2]),
        static_cast<T*>(io.outputs[0]), indexed_, slice_, reduction_, updates_, dev.error_flag,
        dev.step);
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.in(0);
    const TensorInfo& ind = ctx.in(1);
    const int64_t k = ind.shape[ind.rank() - 1];
    if (k > kMaxDims) Unsupported(ctx, "index tuples of ", k, " (at most ", kMaxDims, ")");
    const std::vector<int64_t> strides = Strides(x.shape);
    indexed_ = MakeDims<int64_t>(std::vector<int64_t>(x.shape.begin(), x.shape.begin() + k),
                                 std::vector<int64_t>(strides.begin(), strides.begin() + k));
    slice_ = NumElements(Shape(x.shape.begin() + k, x.shape.end()));
    PrepareScatter(ctx, ctx.in(2).size());
  }

 private:
  DimArray<int64_t> indexed_;
  int64_t slice_ = 1;
};

}  // namespace

void RegisterTensorScatterKernels(KernelRegistry& r) {
  // Reduction none moves elements of any size; the reductions take float32,
  // float64, int32 and int64 (PrepareScatter refuses the others).
  const std::initializer_list<DType> dtypes = {
      DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,
      DType::kUInt8,   DType::kInt16,   DType::kInt32,   DType::kInt64,    DType::kBool};
  r.Register(OpId::kScatterElements, dtypes, &MakeKernel<ScatterElementsKernel>);
  r.Register(OpId::kScatterND, dtypes, &MakeKernel<ScatterNDKernel>);
}

}  // namespace tensor
}  // namespace cuda
}  // namespace kaiwu
