// Conv as one implicit GEMM per group on AVX-512 or AVX2+FMA: the im2col
// matrix is never built; each thread gathers one panel of kNr output columns
// (any mix of images) straight into a packed [K, kNr] buffer, multiplies it by
// the weight rows kMr at a time in registers, and writes the tile into y with
// bias and the fused activation applied. Falls back (Supported() false)
// without either instruction set or when offsets do not fit 32 bits.
//
// On AVX2 most convs skip the packing (see DirectLayout in conv_gemm.cc): x
// is first rearranged, some images at a time, so that every tap reads a
// vector of output columns from consecutive floats, and the register tile
// loads those straight from the rearranged copy.
#pragma once

#include <cstdint>
#include <vector>

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
  int64_t SlotFloats() const;
  /// Thread slots worth using with `threads` threads.
  int64_t Slots(int64_t threads) const;
  /// y = act(conv(x, w) + bias); scratch (64-byte aligned) holds max_slots
  /// slots, max_slots = Slots(threads) for some thread count.
  void Run(const float* x, const float* w, const float* bias, float* y, float* scratch,
           int64_t max_slots, ThreadPool* pool) const;

 private:
  void Panel(const float* x, const float* w, const float* bias, float* y, int64_t g, int64_t j0,
             float* buf) const;
  // The modes: kGather packs each panel from x with masked gathers; the
  // others first rearrange x (RunRearranged, a chunk of images at a time) so
  // that taps read consecutive floats: kDirect feeds the tile from there,
  // kSegments packs from there with two plain loads per vector.
  enum class Mode { kGather, kDirect, kSegments };
  int64_t ChunkFloats() const;
  void RunRearranged(const float* x, const float* w, const float* bias, float* y,
                     float* scratch, int64_t slots, ThreadPool* pool) const;
  void RunChunk(const float* x, const float* w, const float* bias, float* y, float* slot,
                int64_t slots, int64_t n0, int64_t nn, ThreadPool* pool) const;
  void Rearrange(const float* x, float* xt) const;
  void DirectPanel(const float* xt, const float* w, const float* bias, float* y, int64_t g,
                   int64_t u0, int64_t vectors) const;
  void SegmentPanel(const float* xt, const float* w, const float* bias, float* y, int64_t g,
                    int64_t j0, int64_t cols, float* buf) const;

  SpatialGeometry geo_;
  Activation act_;
  int64_t n_ = 0, c_ = 0, m_ = 0, group_ = 1, cg_ = 0, mg_ = 0, k_ = 0, cols_ = 0, panels_ = 0;
  bool all_valid_ = true;
  // Direct mode: per channel, one plane of ext_ floats for each combination
  // of tap phases (tap offset modulo stride, per dim); koff_[k] is where
  // row k = (channel, tap) starts, relative to a column's first tap. chunk_
  // images are rearranged at a time; vrow_ vectors cover an output row.
  Mode mode_ = Mode::kGather;
  std::vector<int64_t> phases_[3];
  int64_t ext_[3] = {1, 1, 1}, cplane_ = 0, chunk_ = 1, vrow_ = 0;
  std::vector<int32_t> koff_;
};

}  // namespace cpu
}  // namespace kaiwu
