// Integer Pow, shared by the CPU kernel and the CUDA kernel so that both wrap
// the same way.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/host_device.h"

namespace kaiwu {

/// Integer power by squaring, wrapping on overflow; negative exponents give the
/// truncated result (0 unless the base is 1 or -1).
template <typename T, typename E>
KAIWU_HOST_DEVICE inline T IntPow(T base, E exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp % 2) ? T(-1) : T(1);
    return 0;
  }
  using U = std::make_unsigned_t<T>;
  U result = 1, b = static_cast<U>(base);
  uint64_t e = static_cast<uint64_t>(exp);
  while (e) {
    if (e & 1) result = static_cast<U>(result * b);
    b = static_cast<U>(b * b);
    e >>= 1;
  }
  return static_cast<T>(result);
}

}  // namespace kaiwu
