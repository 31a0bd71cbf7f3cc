// Shared machinery of the elementwise kernels: a compressed numpy-broadcasting
// plan built in Prepare, a walker that turns a flat output range into runs
// along the innermost dimension, and the vectorisable binary/ternary loops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/cpu/cpu_kernels.h"

namespace kaiwu {
namespace cpu {

// Registration functions of the family's files (elementwise.cc calls them).
void RegisterArithmeticKernels(KernelRegistry& r);  // elementwise_binary.cc
void RegisterCompareKernels(KernelRegistry& r);     // elementwise_compare.cc
void RegisterUnaryKernels(KernelRegistry& r);       // elementwise_unary.cc
void RegisterActivationKernels(KernelRegistry& r);  // elementwise_activation.cc
void RegisterCastKernels(KernelRegistry& r);        // elementwise_cast.cc
void RegisterSelectKernels(KernelRegistry& r);      // elementwise_select.cc

constexpr int kMaxBroadcastInputs = 3;
constexpr int kMaxBroadcastDims = 16;

/// Inputs broadcast to one output shape, with runs of dimensions that share a
/// broadcast pattern merged. Input strides are in elements; 0 on broadcast dims.
/// The innermost stride of each input is 0 or 1. rank >= 1 always.
struct BroadcastPlan {
  int rank = 1;
  int num_inputs = 0;
  int64_t total = 0;  // output elements
  int64_t dims[kMaxBroadcastDims] = {1};
  int64_t strides[kMaxBroadcastInputs][kMaxBroadcastDims] = {};

  int64_t inner() const { return dims[rank - 1]; }
  int64_t inner_stride(int k) const { return strides[k][rank - 1]; }
};

/// Builds the plan for `inputs` (each must broadcast unidirectionally to `out`),
/// or fails naming the node.
BroadcastPlan MakeBroadcastPlan(const PrepareContext& ctx, const std::vector<Shape>& inputs,
                                const Shape& out);


/// Total cost (about scalar ops) below which elementwise work stays on the
/// calling thread: waking workers costs more than streaming this much memory.
constexpr double kParallelMinCost = 131072.0;

/// Calls f(begin, end) over [0, n), on the pool when the work is large.
template <typename F>
void ParallelRange(ThreadPool* pool, int64_t n, double cost_per_item, const F& f) {
  if (n <= 0) return;
  if (pool == nullptr || pool->num_threads() == 1 || n * cost_per_item < kParallelMinCost) {
    f(int64_t{0}, n);
    return;
  }
  pool->ParallelFor(n, cost_per_item, f);
}

/// Calls f(begin, end) over the flat element range [0, n) in blocks of whole
/// 256-element blocks, so that chunk edges stay aligned for the vector loops.
template <typename F>
void ParallelElements(ThreadPool* pool, int64_t n, double cost_per_element, const F& f) {
  constexpr int64_t kBlock = 256;
  int64_t blocks = (n + kBlock - 1) / kBlock;
  auto body = [&](int64_t b, int64_t e) { f(b * kBlock, std::min(n, e * kBlock)); };
  ParallelRange(pool, blocks, cost_per_element * kBlock, body);
}

/// Walks output elements [begin, end) as runs along the innermost dimension:
/// fn(out_offset, in_offsets[N], length).
template <int N, typename Fn>
inline void ForEachRun(const BroadcastPlan& p, int64_t begin, int64_t end, Fn&& fn) {
  const int r = p.rank;
  int64_t idx[kMaxBroadcastDims];
  int64_t off[N > 0 ? N : 1] = {};
  int64_t rem = begin;
  for (int d = r - 1; d >= 0; --d) {
    idx[d] = rem % p.dims[d];
    rem /= p.dims[d];
    for (int k = 0; k < N; ++k) off[k] += idx[d] * p.strides[k][d];
  }
  const int64_t inner = p.dims[r - 1];
  int64_t pos = begin;
  while (pos < end) {
    int64_t len = std::min(inner - idx[r - 1], end - pos);
    fn(pos, static_cast<const int64_t*>(off), len);
    pos += len;
    if (pos >= end) break;
    idx[r - 1] += len;
    for (int k = 0; k < N; ++k) off[k] += len * p.strides[k][r - 1];
    if (idx[r - 1] < inner) continue;
    // Carry into the outer dimensions.
    for (int d = r - 1; d >= 0; --d) {
      if (d < r - 1) {
        ++idx[d];
        for (int k = 0; k < N; ++k) off[k] += p.strides[k][d];
      }
      if (idx[d] < p.dims[d]) break;
      for (int k = 0; k < N; ++k) off[k] -= idx[d] * p.strides[k][d];
      idx[d] = 0;
    }
  }
}

/// o = f(a, b) elementwise over a two-input plan. The innermost loop is
/// specialised for contiguous/contiguous, contiguous/scalar and scalar/contiguous.
template <typename A, typename B, typename O, typename F>
void BinaryLoop(const BroadcastPlan& p, const A* a, const B* b, O* o, const F& f,
                ThreadPool* pool, double cost = 1.0) {
  const int64_t sa = p.inner_stride(0), sb = p.inner_stride(1);
  auto body = [&](int64_t begin, int64_t end) {
    ForEachRun<2>(p, begin, end, [&](int64_t oo, const int64_t* off, int64_t n) {
      const A* x = a + off[0];
      const B* y = b + off[1];
      O* z = o + oo;
      if (sa != 0 && sb != 0) {
        for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], y[i]);
      } else if (sa != 0) {
        const B yv = *y;
        for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], yv);
      } else if (sb != 0) {
        const A xv = *x;
        for (int64_t i = 0; i < n; ++i) z[i] = f(xv, y[i]);
      } else {
        const O v = f(*x, *y);
        for (int64_t i = 0; i < n; ++i) z[i] = v;
      }
    });
  };
  ParallelElements(pool, p.total, cost, body);
}

/// o = f(a, b, c) elementwise over a three-input plan.
template <typename A, typename B, typename C, typename O, typename F>
void TernaryLoop(const BroadcastPlan& p, const A* a, const B* b, const C* c, O* o, const F& f,
                 ThreadPool* pool, double cost = 1.0) {
  const int64_t sa = p.inner_stride(0), sb = p.inner_stride(1), sc = p.inner_stride(2);
  auto body = [&](int64_t begin, int64_t end) {
    ForEachRun<3>(p, begin, end, [&](int64_t oo, const int64_t* off, int64_t n) {
      const A* x = a + off[0];
      const B* y = b + off[1];
      const C* w = c + off[2];
      O* z = o + oo;
      if (sa != 0 && sb != 0 && sc != 0) {
        for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], y[i], w[i]);
      } else {
        for (int64_t i = 0; i < n; ++i) z[i] = f(x[i * sa], y[i * sb], w[i * sc]);
      }
    });
  };
  ParallelElements(pool, p.total, cost, body);
}

/// Dispatch over the numeric (non-bool) dtypes the family supports.
#define KAIWU_DISPATCH_NUMERIC(dtype, ...)                                \
  switch (dtype) {                                                        \
    KAIWU_DISPATCH_CASE(kFloat32, float, __VA_ARGS__)                     \
    KAIWU_DISPATCH_CASE(kFloat64, double, __VA_ARGS__)                    \
    KAIWU_DISPATCH_CASE(kInt8, int8_t, __VA_ARGS__)                       \
    KAIWU_DISPATCH_CASE(kUInt8, uint8_t, __VA_ARGS__)                     \
    KAIWU_DISPATCH_CASE(kInt16, int16_t, __VA_ARGS__)                     \
    KAIWU_DISPATCH_CASE(kInt32, int32_t, __VA_ARGS__)                     \
    KAIWU_DISPATCH_CASE(kInt64, int64_t, __VA_ARGS__)                     \
    default:                                                              \
      ::kaiwu::Fail(::kaiwu::StatusCode::kInternal, "unsupported dtype ", \
                    ::kaiwu::DTypeName(dtype));                           \
  }

#define KAIWU_DISPATCH_FLOAT(dtype, ...)                                  \
  switch (dtype) {                                                        \
    KAIWU_DISPATCH_CASE(kFloat32, float, __VA_ARGS__)                     \
    KAIWU_DISPATCH_CASE(kFloat64, double, __VA_ARGS__)                    \
    default:                                                              \
      ::kaiwu::Fail(::kaiwu::StatusCode::kInternal, "unsupported dtype ", \
                    ::kaiwu::DTypeName(dtype));                           \
  }

}  // namespace cpu
}  // namespace kaiwu
