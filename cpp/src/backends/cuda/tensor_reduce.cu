// ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceSumSquare, ReduceLogSum, ReduceLogSumExp (float32, float64, int32,
// int64, float16, bfloat16), and ArgMax / ArgMin. 16-bit floats are read as
// float and accumulated in float; the result is rounded once when stored.
//
// PrepareDevice merges the dims the op layer reduces (ReduceParams) as the CPU
// kernel does (size-1 dims dropped, neighbours both kept or both reduced
// merged) into a kept and a reduced set of (size, input stride). Two kernels:
//  - one thread per output looping over its reduced elements (eight loads in
//    flight, combined in order): when the innermost dim is kept (neighbouring
//    threads read neighbouring elements) or few elements are reduced per output;
//  - one block per output, the threads striding over the reduced elements and
//    combining in shared memory: when many elements are reduced per output, or
//    (a block of one warp, combined by shuffles) when few outputs of 16 or more
//    float elements each would leave most of the GPU idle one thread apiece.
// ArgMax / ArgMin scan each line in order with one thread, as the CPU does, so
// that ties and NaNs pick the same index.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backends/cuda/half_util.cuh"
#include "backends/cuda/tensor_util.cuh"
#include "backends/reduce_common.h"
#include "ops/reduce.h"

namespace kaiwu {
namespace cuda {
namespace tensor {
namespace {

using reduce::Accum;
using reduce::AccumOf;
using reduce::Combine;
using reduce::Finish;
using reduce::ReduceKind;

constexpr int kWarp = 32;
static_assert(kMaxReduceRank <= kMaxDims, "a reduce's merged dims fit a DimArray");

// The element as accumulated.
template <typename T>
__device__ inline T MapValue(Accum a, T v) {
  switch (a) {
    case Accum::kSumAbs: return v < T(0) ? -v : v;
    case Accum::kSumSquare: return v * v;
    default: return v;
  }
}

// exp and log of float32 in single precision, of float64 in double.
template <typename T>
__device__ inline T Exp(T v) {
  if constexpr (std::is_same<T, float>::value) return expf(v);
  return static_cast<T>(exp(static_cast<double>(v)));
}

template <typename T>
__device__ inline T Log(T v) {
  if constexpr (std::is_same<T, float>::value) return logf(v);
  return static_cast<T>(log(static_cast<double>(v)));
}

struct ReduceGeometry {
  DimArray<int64_t> kept;     // merged kept dims (output order) and their input strides
  DimArray<int64_t> reduced;  // merged reduced dims and their input strides
  int64_t count = 0;          // elements reduced into each output
  int64_t out_size = 0;
};

// Input offset of reduced element r (one merged reduced dim needs no division).
__device__ inline int64_t ReducedOffset(const DimArray<int64_t>& d, int64_t r) {
  return d.n == 1 ? r * d.stride[0] : DimOffset(d, r);
}

// Combine(a, x, y) as a binary operator for CombineAcrossThreads.
struct AccumOp {
  Accum a;
  template <typename T>
  __device__ T operator()(T x, T y) const { return Combine(a, x, y); }
};

// T: the storage type; C: what it accumulates in (float for the 16-bit floats).
template <typename T, typename C = ComputeT<T>>
__global__ void ReduceThreadGpu(const T* __restrict__ x, T* __restrict__ y, ReduceGeometry g,
                                ReduceKind kind, C identity) {
  const Accum acc = AccumOf(kind);
  KAIWU_CUDA_LOOP(o, g.out_size) {
    const T* base = x + DimOffset(g.kept, o);
    C a = identity;
    // Eight loads in flight, then combined in order (the same result as one at
    // a time): a thread's dependent load-add chain was the kernel's latency.
    int64_t r = 0;
    for (; r + 8 <= g.count; r += 8) {
      C v[8];
#pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = Load(base[ReducedOffset(g.reduced, r + u)]);
#pragma unroll
      for (int u = 0; u < 8; ++u) a = Combine(acc, a, MapValue(acc, v[u]));
    }
    for (; r < g.count; ++r) a = Combine(acc, a, MapValue(acc, Load(base[ReducedOffset(g.reduced, r)])));
    if constexpr (std::is_floating_point<C>::value) {
      if (kind == ReduceKind::kLogSumExp) {
        if (isfinite(a)) {
          C sum = C(0);
          for (int64_t r = 0; r < g.count; ++r)
            sum += Exp(Load(base[ReducedOffset(g.reduced, r)]) - a);
          a += Log(sum);
        }
        y[o] = Store<T>(a);
        continue;
      }
    }
    y[o] = Store<T>(Finish(kind, a, g.count));
  }
}

template <typename T, typename C = ComputeT<T>>
__global__ void ReduceBlockGpu(const T* __restrict__ x, T* __restrict__ y, ReduceGeometry g,
                               ReduceKind kind, C identity) {
  __shared__ C partial[1024 / kWarp];
  const Accum acc = AccumOf(kind);
  for (int64_t o = blockIdx.x; o < g.out_size; o += gridDim.x) {
    const T* base = x + DimOffset(g.kept, o);
    C a = identity;
    for (int64_t r = threadIdx.x; r < g.count; r += blockDim.x)
      a = Combine(acc, a, MapValue(acc, Load(base[ReducedOffset(g.reduced, r)])));
    a = CombineAcrossThreads(a, AccumOp{acc}, partial, static_cast<int>(blockDim.x));
    C result = Finish(kind, a, g.count);
    if constexpr (std::is_floating_point<C>::value) {
      if (kind == ReduceKind::kLogSumExp) {
        result = a;
        if (isfinite(a)) {  // the same for every thread of the block
          C sum = C(0);
          for (int64_t r = threadIdx.x; r < g.count; r += blockDim.x)
            sum += Exp(Load(base[ReducedOffset(g.reduced, r)]) - a);
          result = a + Log(CombineAcrossThreads(sum, AccumOp{Accum::kSum}, partial,
                                                static_cast<int>(blockDim.x)));
        }
      }
    }
    if (threadIdx.x == 0) y[o] = Store<T>(result);
  }
}

class ReduceKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (copy_) {
      CopyAsync(io.outputs[0], io.inputs[0], copy_bytes_, Dev(io).stream, "reduce copy");
      return;
    }
    if (geometry_.out_size == 0) return;
    switch (dtype_) {
      case DType::kFloat32: Launch<float>(io); break;
      case DType::kFloat64: Launch<double>(io); break;
      case DType::kInt32: Launch<int32_t>(io); break;
      case DType::kFloat16: Launch<__half>(io); break;
      case DType::kBFloat16: Launch<__nv_bfloat16>(io); break;
      default: Launch<int64_t>(io); break;
    }
    CheckLaunch("reduce kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const ReduceParams& p = ctx.Params<ReduceParams>();
    kind_ = p.kind;
    dtype_ = ctx.in(0).dtype;
    const Shape& in = ctx.in(0).shape;
    copy_ = p.copy;
    copy_bytes_ = static_cast<size_t>(ctx.in(0).size()) * DTypeSize(dtype_);

    geometry_ = ReduceGeometry{};
    geometry_.out_size = ctx.outputs[0].size();
    geometry_.count = p.count;
    block_threads_ = 0;
    if (copy_ || geometry_.out_size == 0 || geometry_.count == 0) return;

    const std::vector<reduce::MergedDim> merged = reduce::MergeReduceDims(in, p.reduced);
    std::vector<int64_t> kept_size, kept_stride, red_size, red_stride;
    for (const reduce::MergedDim& m : merged) {
      (m.reduced ? red_size : kept_size).push_back(m.size);
      (m.reduced ? red_stride : kept_stride).push_back(m.stride);
    }
    geometry_.kept = MakeDims<int64_t>(kept_size, kept_stride);
    geometry_.reduced = MakeDims<int64_t>(red_size, red_stride);
    const bool inner_reduced = !merged.empty() && merged.back().reduced;
    const int64_t count = geometry_.count, outs = geometry_.out_size;
    if ((inner_reduced && count >= 64) || (outs <= 4096 && count >= 1024))
      block_threads_ = count >= 1024 ? 256 : count >= 256 ? 128 : 64;
    // Few outputs of a few dozen elements each (a masked mean over units, [B, N, d]
    // summed over N): one thread per output would leave most SMs idle (2,048
    // outputs: 8 blocks) behind a chain of dependent loads; a warp per output reads
    // its elements at once. Float accumulators only: the tree order changes the
    // last bits, which the integer and float64 kernels keep exactly as the CPU's.
    const bool float_accum = dtype_ == DType::kFloat32 || dtype_ == DType::kFloat16 ||
                             dtype_ == DType::kBFloat16;
    if (block_threads_ == 0 && float_accum && count >= 16 && outs <= 65536) block_threads_ = kWarp;
  }

 private:
  template <typename T>
  void Launch(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    T* y = static_cast<T*>(io.outputs[0]);
    const ComputeT<T> identity = reduce::Identity<ComputeT<T>>(AccumOf(kind_));
    cudaStream_t stream = Dev(io).stream;
    if (block_threads_ > 0) {
      const int64_t blocks = std::min<int64_t>(geometry_.out_size, int64_t{1} << 20);
      ReduceBlockGpu<T><<<static_cast<unsigned>(blocks), block_threads_, 0, stream>>>(
          x, y, geometry_, kind_, identity);
    } else {
      ReduceThreadGpu<T><<<GridFor(geometry_.out_size), kBlock, 0, stream>>>(x, y, geometry_,
                                                                             kind_, identity);
    }
  }

  ReduceKind kind_ = ReduceKind::kSum;
  DType dtype_ = DType::kFloat32;
  bool copy_ = false;        // noop_with_empty_axes and no axes: output = input
  size_t copy_bytes_ = 0;
  ReduceGeometry geometry_;  // count 0: every output is the finished identity
  int block_threads_ = 0;    // > 0: one block of this many threads per output
};

// y[o, i] = index of the best x[o, :, i]; the first best unless `last`.
template <typename T>
__global__ void ArgReduceGpu(const T* __restrict__ x, int64_t* __restrict__ y, int64_t n,
                             int64_t inner, int64_t total, bool is_max, bool last) {
  KAIWU_CUDA_LOOP(t, total) {
    const int64_t o = t / inner, i = t - o * inner;
    const T* p = x + o * n * inner + i;
    ComputeT<T> best = Load(p[0]);
    int64_t at = 0;
    for (int64_t j = 1; j < n; ++j) {
      const ComputeT<T> v = Load(p[j * inner]);
      const bool take = is_max ? (last ? v >= best : v > best) : (last ? v <= best : v < best);
      if (take) {
        best = v;
        at = j;
      }
    }
    y[t] = at;
  }
}

class ArgReduceKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (total_ == 0) return;
    switch (dtype_) {
      case DType::kFloat32: Launch<float>(io); break;
      case DType::kFloat64: Launch<double>(io); break;
      case DType::kInt32: Launch<int32_t>(io); break;
      case DType::kInt64: Launch<int64_t>(io); break;
      case DType::kInt8: Launch<int8_t>(io); break;
      case DType::kUInt8: Launch<uint8_t>(io); break;
      case DType::kFloat16: Launch<__half>(io); break;
      case DType::kBFloat16: Launch<__nv_bfloat16>(io); break;
      default: Launch<int16_t>(io); break;
    }
    CheckLaunch("arg reduce kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const ArgReduceParams& p = ctx.Params<ArgReduceParams>();
    is_max_ = p.is_max;
    last_ = p.select_last_index;
    dtype_ = ctx.in(0).dtype;
    const Shape& shape = ctx.in(0).shape;
    n_ = shape[p.axis];
    inner_ = NumElements(Shape(shape.begin() + p.axis + 1, shape.end()));
    total_ = ctx.outputs[0].size();
  }

 private:
  template <typename T>
  void Launch(const KernelIO& io) const {
    ArgReduceGpu<T><<<GridFor(total_), kBlock, 0, Dev(io).stream>>>(
        static_cast<const T*>(io.inputs[0]), static_cast<int64_t*>(io.outputs[0]), n_, inner_,
        total_, is_max_, last_);
  }

  bool is_max_ = true;
  bool last_ = false;
  DType dtype_ = DType::kFloat32;
  int64_t n_ = 1, inner_ = 1, total_ = 0;
};

}  // namespace

void RegisterTensorReduceKernels(KernelRegistry& r) {
  for (OpId op : {OpId::kReduceSum, OpId::kReduceMean, OpId::kReduceMax, OpId::kReduceMin,
                  OpId::kReduceProd, OpId::kReduceL1, OpId::kReduceL2, OpId::kReduceSumSquare,
                  OpId::kReduceLogSum})
    r.Register(op,
               {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kFloat16,
                DType::kBFloat16},
               &MakeKernel<ReduceKernel>);
  r.Register(OpId::kReduceLogSumExp,
             {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16},
             &MakeKernel<ReduceKernel>);
  for (OpId op : {OpId::kArgMax, OpId::kArgMin})
    r.Register(op, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kInt8,
                    DType::kUInt8, DType::kInt16, DType::kFloat16, DType::kBFloat16},
               &MakeKernel<ArgReduceKernel>);
}

}  // namespace tensor
}  // namespace cuda
}  // namespace kaiwu
