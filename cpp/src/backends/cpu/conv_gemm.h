// Conv as one implicit GEMM per group on AVX-512 or AVX2+FMA: the im2col
// matrix is never built; each thread gathers one panel of kNr output columns
// (any mix of images) straight into a packed [K, kNr] buffer, multiplies it by
// the weight rows kMr at a time in registers, and writes the tile into y with
// bias and the fused activation applied. Falls back (Supported() false)
// without either instruction set or when offsets do not fit 32 bits.
#pragma once

#include <cstdint>

#include "backends/cpu/activation.h"
#include "backends/cpu/conv_geometry.h"
#include "core/thread_pool.h"

namespace kaiwu {
namespace cpu {

class ConvGemm {
 public:
#if defined(__AVX512F__)
  static constexpr int64_t kNr = 48;  // output columns per panel (3 AVX-512 vectors)
  static constexpr int64_t kMr = 8;   // output channels per register tile
#else
  // AVX2 has 16 registers: 4 x 3 accumulators, 3 panel vectors, 1 broadcast.
  static constexpr int64_t kNr = 24;  // output columns per panel (3 AVX2 vectors)
  static constexpr int64_t kMr = 4;   // output channels per register tile
#endif

  /// n images of c channels, m output channels in `group` groups.
  static bool Supported(const SpatialGeometry& g, int64_t n, int64_t c, int64_t m);
  ConvGemm() = default;
  ConvGemm(const SpatialGeometry& g, int64_t n, int64_t c, int64_t m, int64_t group,
           const Activation& act);
  /// Scratch floats per thread slot.
  int64_t SlotFloats() const { return k_ * kNr; }
  /// Thread slots worth using with `threads` threads.
  int64_t Slots(int64_t threads) const;
  /// y = act(conv(x, w) + bias); scratch (64-byte aligned) holds max_slots
  /// slots, max_slots = Slots(threads) for some thread count.
  void Run(const float* x, const float* w, const float* bias, float* y, float* scratch,
           int64_t max_slots, ThreadPool* pool) const;

 private:
  void Panel(const float* x, const float* w, const float* bias, float* y, int64_t g, int64_t j0,
             float* buf) const;

  SpatialGeometry geo_;
  Activation act_;
  int64_t n_ = 0, c_ = 0, m_ = 0, group_ = 1, cg_ = 0, mg_ = 0, k_ = 0, cols_ = 0, panels_ = 0;
  bool all_valid_ = true;
};

}  // namespace cpu
}  // namespace kaiwu
