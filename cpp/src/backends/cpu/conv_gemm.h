// Conv as one implicit GEMM per group on AVX-512 or AVX2+FMA: the im2col
// matrix is never built; each panel of kNr output columns (any mix of images)
// is multiplied by the weight rows kMr at a time in registers, and the tile
// goes into y with bias and the fused activation applied. Falls back
// (Supported() false) without either instruction set or when offsets do not
// fit 32 bits.
//
// Where the panel comes from (Mode):
//  - kGather (AVX-512, and AVX2 convs the others do not fit): gathered from x
//    into a packed [K, kNr] buffer with masked loads and gathers;
//  - kDirect, kSegments (AVX2): x is first rearranged, a chunk of images at
//    a time, into zero-padded planes where every tap reads consecutive floats
//    for consecutive output columns (one plane per tap phase, the tap offset
//    modulo the stride). kDirect feeds the tile straight from there (vectors
//    are output-row aligned); kSegments packs with two plain loads per
//    vector (vectors cross rows).
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/activation.h"
#include "ops/conv_geometry.h"
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
  enum class Mode { kGather, kDirect, kSegments };

  void InitRearranged();
  int64_t ChunkFloats() const;
  void Panel(const float* x, const float* w, const float* bias, float* y, int64_t g, int64_t j0,
             float* buf) const;
  void RunRearranged(const float* x, const float* w, const float* bias, float* y,
                     float* scratch, int64_t slots, ThreadPool* pool) const;
  void RunChunk(const float* x, const float* w, const float* bias, float* y, float* slot,
                int64_t slots, int64_t n0, int64_t nn, ThreadPool* pool, const float* next_x,
                int64_t next_floats) const;  // next_x: the next chunk's x, prefetched
  void Rearrange(const float* x, float* xt) const;
  void DirectPanel(const float* xt, const float* w, const float* bias, float* y, int64_t g,
                   int64_t u0, int64_t vectors) const;
  void SegmentPanel(const float* xt, const float* w, const float* bias, float* y, int64_t g,
                    int64_t j0, int64_t cols, float* buf) const;

  SpatialGeometry geo_;
  Activation act_;
  int64_t n_ = 0, c_ = 0, m_ = 0, group_ = 1, cg_ = 0, mg_ = 0, k_ = 0, cols_ = 0, panels_ = 0;
  bool all_valid_ = true;
  Mode mode_ = Mode::kGather;
  // Rearranged modes: per channel, one plane for each combination of tap
  // phases (D, H, W), ext_ positions per dim; koff_[k] is where row
  // k = (channel, tap) starts relative to a column's first tap. chunk_
  // images are rearranged at a time; vrow_ vectors cover an output row.
  std::vector<int64_t> phases_[3];
  int64_t ext_[3] = {1, 1, 1}, cplane_ = 0, chunk_ = 1, vrow_ = 0;
  std::vector<int32_t> koff_;
  // kDirect: per output-row vector u of a chunk, where it starts in the
  // chunk's rearranged x and in its y (group 0), and its lanes inside the
  // row; computed once, so a panel does no division.
  struct RowVector {
    int32_t x, y, n;
  };
  std::vector<RowVector> row_vectors_;
};

}  // namespace cpu
}  // namespace kaiwu
