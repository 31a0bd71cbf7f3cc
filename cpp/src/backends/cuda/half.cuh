// Element types of the CUDA kernels that run in float16 or bfloat16 as well as
// float32: loads widen to float, math runs in float, stores round to nearest
// even. CudaDataType<T> names the type for cuBLAS / cuDNN.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kaiwu/tensor.h"

namespace kaiwu {
namespace cuda {

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T FromFloat(float v);
template <> __device__ __forceinline__ float FromFloat<float>(float v) { return v; }
template <> __device__ __forceinline__ __half FromFloat<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

template <typename T> struct CudaDataType;
template <> struct CudaDataType<float> { static constexpr cudaDataType_t value = CUDA_R_32F; };
template <> struct CudaDataType<__half> { static constexpr cudaDataType_t value = CUDA_R_16F; };
template <> struct CudaDataType<__nv_bfloat16> { static constexpr cudaDataType_t value = CUDA_R_16BF; };

/// Calls f(T{}) with T the CUDA element type of a float dtype (float32,
/// float16 or bfloat16).
template <typename F>
void DispatchFloatType(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat16: f(__half{}); break;
    case DType::kBFloat16: f(__nv_bfloat16{}); break;
    default: f(float{}); break;
  }
}

}  // namespace cuda
}  // namespace kaiwu
