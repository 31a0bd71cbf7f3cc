// The 16-bit float types of the CUDA kernels: float16 tensors hold __half,
// bfloat16 tensors __nv_bfloat16. Half kernels load a 16-bit value, compute in
// float and store the result rounded to nearest even (Load / Store below), so a
// half kernel's math is its float32 kernel's. Included only by .cu files.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kaiwu/tensor.h"

namespace kaiwu {
namespace cuda {

/// The element a kernel computes in for storage type T: float for the 16-bit
/// floats, T otherwise.
template <typename T> struct ComputeOf { using type = T; };
template <> struct ComputeOf<__half> { using type = float; };
template <> struct ComputeOf<__nv_bfloat16> { using type = float; };
template <typename T> using ComputeT = typename ComputeOf<T>::type;

/// Storage -> compute type (exact).
template <typename T>
__device__ __forceinline__ ComputeT<T> Load(T x) { return x; }
template <>
__device__ __forceinline__ float Load<__half>(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float Load<__nv_bfloat16>(__nv_bfloat16 x) {
  return __bfloat162float(x);
}

/// Compute -> storage type: round to nearest even; past the largest finite
/// value gives infinity, NaN stays NaN.
template <typename T>
__device__ __forceinline__ T Store(ComputeT<T> x) { return x; }
template <>
__device__ __forceinline__ __half Store<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 Store<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

/// Calls fn(T{}) with T the storage type of a floating-point dtype a kernel
/// takes (checked at Prepare): __half, __nv_bfloat16, else float.
template <typename Fn>
void WithFloatType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat16: return fn(__half{});
    case DType::kBFloat16: return fn(__nv_bfloat16{});
    default: return fn(float{});
  }
}

/// f(float) applied to 16-bit storage: y = Store(f(Load(x))).
template <typename T, typename F>
struct Widened {
  F f;
  __device__ T operator()(T x) const { return Store<T>(f(Load(x))); }
};

/// f(float, float) -> float applied to 16-bit storage.
template <typename T, typename F>
struct Widened2 {
  F f;
  __device__ T operator()(T a, T b) const { return Store<T>(f(Load(a), Load(b))); }
};

/// The 16-bit float whose bits are v's low 16, and the bits of Store<T>(v).
template <typename T>
__device__ __forceinline__ T FromBits(uint32_t v) {
  const uint16_t b = static_cast<uint16_t>(v);
  T h;
  memcpy(&h, &b, 2);
  return h;
}
template <typename T>
__device__ __forceinline__ uint16_t Bits(float v) {
  const T h = Store<T>(v);
  uint16_t b;
  memcpy(&b, &h, 2);
  return b;
}

/// c (16 x 8, float) += a (16 x 16) x b (16 x 8) on tensor cores, T = __half or
/// __nv_bfloat16, fragments as mma.sync m16n8k16 (row.col) lays them out.
template <typename T>
__device__ __forceinline__ void Mma16816(float* c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                         uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __half>)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

}  // namespace cuda
}  // namespace kaiwu
