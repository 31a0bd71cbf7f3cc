// Shared machinery of the CUDA elementwise kernels: the per-input index map
// of numpy broadcasting (built at Prepare, passed by value to kernels), the
// generic one-input and two-input kernels, and the registration functions of
// the family's files (elementwise.cu calls them).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_util.cuh"

namespace kaiwu {
namespace cuda {
// The family's names live apart from the other CUDA kernel groups' helpers.
namespace eltwise {

void RegisterUnaryKernels(KernelRegistry& r);       // elementwise_unary.cu
void RegisterArithmeticKernels(KernelRegistry& r);  // elementwise_binary.cu
void RegisterCompareKernels(KernelRegistry& r);     // elementwise_compare.cu
void RegisterCastKernels(KernelRegistry& r);        // elementwise_cast.cu
void RegisterSoftmaxKernels(KernelRegistry& r);     // elementwise_softmax.cu
void RegisterFusedKernels(KernelRegistry& r);       // elementwise_fused.cu

/// Most distinct dimensions a broadcast may have after merging neighbours that
/// share a broadcast pattern (ONNX shapes of rank <= 8 always fit).
constexpr int kMaxDims = 8;

/// How an input's element for output element i is found.
enum class Access : int {
  kScalar,   // one element: offset 0
  kFull,     // same element count as the output: offset i
  kTail,     // repeats the output's trailing block of `tail` elements: i % tail
  kGeneral,  // anything else: through dims and strides
};

/// Maps a flat output index to one offset per input (N inputs at most;
/// unused slots are kScalar). Strides are in elements, 0 on broadcast dims
/// and for every input that is not kGeneral.
template <int N>
struct ElementIndexer {
  int rank = 1;
  bool narrow = true;  // output has < 2^31 elements: 32-bit index math
  Access access[N];
  int64_t tail[N];
  int64_t dims[kMaxDims];
  int64_t strides[N][kMaxDims];

  __device__ void Offsets(int64_t i, int64_t (&off)[N]) const {
    bool general = false;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      switch (access[k]) {
        case Access::kFull: off[k] = i; break;
        case Access::kTail:
          off[k] = narrow ? static_cast<int64_t>(static_cast<uint32_t>(i) %
                                                 static_cast<uint32_t>(tail[k]))
                          : i % tail[k];
          break;
        case Access::kGeneral: general = true; off[k] = 0; break;
        default: off[k] = 0; break;
      }
    }
    if (!general) return;
    if (narrow) {
      uint32_t rem = static_cast<uint32_t>(i);
      for (int d = rank - 1; d >= 0; --d) {
        const uint32_t dim = static_cast<uint32_t>(dims[d]);
        const int64_t idx = rem % dim;
        rem /= dim;
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += idx * strides[k][d];
      }
    } else {
      int64_t rem = i;
      for (int d = rank - 1; d >= 0; --d) {
        const int64_t idx = rem % dims[d];
        rem /= dims[d];
#pragma unroll
        for (int k = 0; k < N; ++k) off[k] += idx * strides[k][d];
      }
    }
  }
};

/// The index map of `inputs` (at most N, each broadcasting to `out`, which the
/// op layer checked). Throws kUnsupported naming the node when the merged
/// broadcast has more than kMaxDims dimensions.
template <int N>
ElementIndexer<N> MakeIndexer(const PrepareContext& ctx, const std::vector<Shape>& inputs,
                              const Shape& out) {
  static_assert(N <= 32, "broadcast patterns are 32-bit masks");
  ElementIndexer<N> ix{};
  const int n = static_cast<int>(inputs.size());
  if (n > N) Fail(StatusCode::kInternal, ctx.node.Describe(), ": indexer over ", n, " inputs");
  const int64_t total = NumElements(out);
  const size_t rank = out.size();
  ix.narrow = total <= INT32_MAX;
  ix.dims[0] = 1;
  for (int k = 0; k < N; ++k) {
    ix.access[k] = Access::kScalar;
    ix.tail[k] = 1;
  }

  // Each input's dims aligned to the output's rank; the kind of access.
  std::vector<Shape> aligned(n, Shape(rank, 1));
  std::vector<int> general;
  for (int k = 0; k < n; ++k) {
    const Shape& s = inputs[k];
    for (size_t i = 0; i < s.size(); ++i) aligned[k][rank - s.size() + i] = s[i];
    const int64_t size = NumElements(s);
    if (size == 1 || total == 0) continue;  // kScalar
    if (size == total) {
      ix.access[k] = Access::kFull;
      continue;
    }
    // A trailing block: dims equal to the output's from some p on, 1 before p.
    size_t p = rank;
    while (p > 0 && aligned[k][p - 1] == out[p - 1]) --p;
    bool ones_before = true;
    for (size_t d = 0; d < p; ++d) ones_before = ones_before && aligned[k][d] == 1;
    if (ones_before) {
      ix.access[k] = Access::kTail;
      ix.tail[k] = size;
      continue;
    }
    ix.access[k] = Access::kGeneral;
    general.push_back(k);
  }
  if (general.empty()) return ix;

  // Merge neighbouring dims in which the same general inputs repeat.
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> in_dims(general.size());
  uint32_t last_pattern = 0;
  for (size_t d = 0; d < rank; ++d) {
    if (out[d] == 1) continue;
    uint32_t pattern = 0;
    for (size_t g = 0; g < general.size(); ++g)
      if (aligned[general[g]][d] == 1) pattern |= 1u << g;
    if (!dims.empty() && pattern == last_pattern) {
      dims.back() *= out[d];
      for (size_t g = 0; g < general.size(); ++g) in_dims[g].back() *= aligned[general[g]][d];
    } else {
      dims.push_back(out[d]);
      for (size_t g = 0; g < general.size(); ++g) in_dims[g].push_back(aligned[general[g]][d]);
    }
    last_pattern = pattern;
  }
  if (dims.size() > static_cast<size_t>(kMaxDims))
    Fail(StatusCode::kUnsupported, ctx.node.Describe(), ": broadcasting over ", dims.size(),
         " distinct dimensions is not supported by the CUDA backend (at most ", kMaxDims, ")");
  ix.rank = static_cast<int>(dims.size());
  for (int d = 0; d < ix.rank; ++d) ix.dims[d] = dims[d];
  for (size_t g = 0; g < general.size(); ++g) {
    int64_t stride = 1;
    for (int d = ix.rank - 1; d >= 0; --d) {
      ix.strides[general[g]][d] = in_dims[g][d] == 1 ? 0 : stride;
      stride *= in_dims[g][d];
    }
  }
  return ix;
}

/// y[i] = f(x[i]).
template <typename X, typename Y, typename F>
__global__ void MapKernel(int64_t n, const X* x, Y* y, F f) {
  KAIWU_CUDA_LOOP(i, n) y[i] = f(x[i]);
}

/// V elements moved as one aligned load or store (16 bytes for the widest type).
template <typename T, int V>
struct alignas(sizeof(T) * V) Pack {
  T v[V];
};

/// Elements per thread of the packed kernels: 16 bytes of the widest of the types.
template <typename... T>
constexpr int PackWidth() {
  size_t w = 1;
  for (size_t s : {sizeof(T)...}) w = s > w ? s : w;
  return static_cast<int>(16 / w) > 0 ? static_cast<int>(16 / w) : 1;
}

inline bool PackAligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

/// MapKernel over packs of V: n_packs = n / V, every pointer aligned.
template <int V, typename X, typename Y, typename F>
__global__ void MapPackKernel(int64_t n_packs, const X* x, Y* y, F f) {
  KAIWU_CUDA_LOOP(i, n_packs) {
    const Pack<X, V> a = reinterpret_cast<const Pack<X, V>*>(x)[i];
    Pack<Y, V> o;
#pragma unroll
    for (int j = 0; j < V; ++j) o.v[j] = f(a.v[j]);
    reinterpret_cast<Pack<Y, V>*>(y)[i] = o;
  }
}

/// BinaryKernel when each input is whole (kFull) or one element (kScalar): packs of V.
template <int V, typename A, typename B, typename O, typename F>
__global__ void BinaryPackKernel(int64_t n_packs, bool a_full, bool b_full, const A* a, const B* b,
                                 O* o, F f) {
  const A a0 = a[0];
  const B b0 = b[0];
  KAIWU_CUDA_LOOP(i, n_packs) {
    Pack<A, V> pa;
    Pack<B, V> pb;
    if (a_full) {
      pa = reinterpret_cast<const Pack<A, V>*>(a)[i];
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) pa.v[j] = a0;
    }
    if (b_full) {
      pb = reinterpret_cast<const Pack<B, V>*>(b)[i];
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) pb.v[j] = b0;
    }
    Pack<O, V> po;
#pragma unroll
    for (int j = 0; j < V; ++j) po.v[j] = f(pa.v[j], pb.v[j]);
    reinterpret_cast<Pack<O, V>*>(o)[i] = po;
  }
}

/// BinaryKernel over packs of V output elements (the output's innermost merged
/// dim a multiple of V): an input whose V elements there are consecutive
/// (`*_vec`: full, a trailing block, or a general input not broadcast on that
/// dim) is read as one aligned pack, one broadcast on it (or a scalar) as one
/// element; one index computation per pack. Attention's scores + mask
/// [B*h, N, N] + [B*h, 1, N].
template <int V, typename A, typename B, typename O, typename F>
__global__ void BinaryBroadcastPackKernel(ElementIndexer<2> ix, int64_t n_packs, bool a_vec, bool b_vec,
                                          const A* a, const B* b, O* o, F f) {
  KAIWU_CUDA_LOOP(p, n_packs) {
    int64_t off[2];
    ix.Offsets(p * V, off);
    Pack<A, V> pa;
    Pack<B, V> pb;
    if (a_vec) {
      pa = *reinterpret_cast<const Pack<A, V>*>(a + off[0]);
    } else {
      const A a0 = a[off[0]];
#pragma unroll
      for (int j = 0; j < V; ++j) pa.v[j] = a0;
    }
    if (b_vec) {
      pb = *reinterpret_cast<const Pack<B, V>*>(b + off[1]);
    } else {
      const B b0 = b[off[1]];
#pragma unroll
      for (int j = 0; j < V; ++j) pb.v[j] = b0;
    }
    Pack<O, V> po;
#pragma unroll
    for (int j = 0; j < V; ++j) po.v[j] = f(pa.v[j], pb.v[j]);
    reinterpret_cast<Pack<O, V>*>(o)[p] = po;
  }
}

/// Whether input k of `ix` can be read in packs of V output elements, and how:
/// *vec = V consecutive elements (else one element repeated). The output's
/// innermost merged dim must be a multiple of V (checked by the caller).
template <int N>
bool PackableInput(const ElementIndexer<N>& ix, int k, int V, const void* data, size_t elem, bool* vec) {
  switch (ix.access[k]) {
    case Access::kScalar: *vec = false; return true;
    case Access::kFull: *vec = true; break;
    case Access::kTail:
      *vec = true;
      if (ix.tail[k] % V != 0) return false;
      break;
    default: {
      const int64_t inner = ix.strides[k][ix.rank - 1];
      if (inner == 0) {
        *vec = false;
        return true;
      }
      if (inner != 1) return false;
      *vec = true;
      for (int d = 0; d < ix.rank - 1; ++d)
        if (ix.strides[k][d] % V != 0) return false;
    }
  }
  return PackAligned(data, elem * V);
}

/// o[i] = f(a[..], b[..]) under broadcasting. o may be a (in-place folds).
template <typename A, typename B, typename O, typename F>
__global__ void BinaryKernel(ElementIndexer<2> ix, int64_t n, const A* a, const B* b, O* o, F f) {
  KAIWU_CUDA_LOOP(i, n) {
    int64_t off[2];
    ix.Offsets(i, off);
    o[i] = f(a[off[0]], b[off[1]]);
  }
}

template <typename X, typename Y, typename F>
void LaunchMap(int64_t n, const X* x, Y* y, F f, cudaStream_t stream, const char* what) {
  if (n <= 0) return;
  constexpr int V = PackWidth<X, Y>();
  if (V > 1 && n % V == 0 && PackAligned(x, sizeof(X) * V) && PackAligned(y, sizeof(Y) * V)) {
    MapPackKernel<V><<<GridFor(n / V), kBlock, 0, stream>>>(n / V, x, y, f);
  } else {
    MapKernel<<<GridFor(n), kBlock, 0, stream>>>(n, x, y, f);
  }
  CheckLaunch(what);
}

template <typename A, typename B, typename O, typename F>
void LaunchBinary(const ElementIndexer<2>& ix, int64_t n, const A* a, const B* b, O* o, F f,
                  cudaStream_t stream, const char* what) {
  if (n <= 0) return;
  constexpr int V = PackWidth<A, B, O>();
  const bool a_full = ix.access[0] == Access::kFull, b_full = ix.access[1] == Access::kFull;
  const bool packable = (a_full || ix.access[0] == Access::kScalar) &&
                        (b_full || ix.access[1] == Access::kScalar) && V > 1 && n % V == 0 &&
                        (!a_full || PackAligned(a, sizeof(A) * V)) &&
                        (!b_full || PackAligned(b, sizeof(B) * V)) && PackAligned(o, sizeof(O) * V);
  bool a_vec = false, b_vec = false;
  if (packable) {
    BinaryPackKernel<V><<<GridFor(n / V), kBlock, 0, stream>>>(n / V, a_full, b_full, a, b, o, f);
  } else if (V > 1 && n % V == 0 && ((ix.rank == 1 && ix.dims[0] == 1) || ix.dims[ix.rank - 1] % V == 0) &&
             PackAligned(o, sizeof(O) * V) &&
             PackableInput(ix, 0, V, a, sizeof(A), &a_vec) && PackableInput(ix, 1, V, b, sizeof(B), &b_vec)) {
    BinaryBroadcastPackKernel<V><<<GridFor(n / V), kBlock, 0, stream>>>(ix, n / V, a_vec, b_vec, a, b, o, f);
  } else {
    BinaryKernel<<<GridFor(n), kBlock, 0, stream>>>(ix, n, a, b, o, f);
  }
  CheckLaunch(what);
}

/// dst = src on the stream unless they are the same buffer (an output the
/// planner placed on its input, or an op that is the identity here).
inline void CopyIfDistinct(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  if (dst == src || bytes == 0) return;
  CheckCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream), "copy");
}

/// Calls fn(T{}) with T the element type of a numeric dtype these kernels take
/// (checked at Prepare): int32_t, int64_t, else float.
template <typename Fn>
void WithNumericType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kInt32: return fn(int32_t{});
    case DType::kInt64: return fn(int64_t{});
    default: return fn(float{});
  }
}

}  // namespace eltwise
}  // namespace cuda
}  // namespace kaiwu
