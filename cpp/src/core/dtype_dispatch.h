// Dtype dispatch: KAIWU_DISPATCH_ALL(dtype, BODY) calls BODY with
// `using T = <c++ type>` for the runtime dtype, and fails for dtypes the
// engine does not compute in. Shared by the op layer and the host kernels.
#pragma once

#include "kaiwu/status.h"
#include "kaiwu/tensor.h"

/// Calls BODY with `using T = <c++ type>` for the runtime dtype; fails otherwise.
#define KAIWU_DISPATCH_CASE(DT, CT, ...) \
  case ::kaiwu::DType::DT: {             \
    using T = CT;                        \
    __VA_ARGS__;                         \
    break;                               \
  }
#define KAIWU_DISPATCH_ALL(dtype, ...)                                      \
  switch (dtype) {                                                          \
    KAIWU_DISPATCH_CASE(kFloat32, float, __VA_ARGS__)                       \
    KAIWU_DISPATCH_CASE(kFloat64, double, __VA_ARGS__)                      \
    KAIWU_DISPATCH_CASE(kInt8, int8_t, __VA_ARGS__)                         \
    KAIWU_DISPATCH_CASE(kUInt8, uint8_t, __VA_ARGS__)                       \
    KAIWU_DISPATCH_CASE(kInt16, int16_t, __VA_ARGS__)                       \
    KAIWU_DISPATCH_CASE(kInt32, int32_t, __VA_ARGS__)                       \
    KAIWU_DISPATCH_CASE(kInt64, int64_t, __VA_ARGS__)                       \
    KAIWU_DISPATCH_CASE(kBool, bool, __VA_ARGS__)                           \
    default:                                                                \
      ::kaiwu::Fail(::kaiwu::StatusCode::kInternal, "unsupported dtype ",   \
                    ::kaiwu::DTypeName(dtype));                             \
  }
