// KAIWU_HOST_DEVICE marks small inline functions shared by the CPU backend and
// the CUDA kernels: __host__ __device__ under nvcc, nothing for a C++ compiler.
#pragma once

#if defined(__CUDACC__)
#define KAIWU_HOST_DEVICE __host__ __device__
#else
#define KAIWU_HOST_DEVICE
#endif
