#include "backends/cpu/tensor_util.h"

#include <algorithm>
#include <cstring>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "backends/copy_geometry.h"
#include "core/transpose.h"

namespace kaiwu {
namespace cpu {

namespace {

constexpr size_t kCopyChunkBytes = 64 * 1024;
constexpr int64_t kTile = 32;  // blocked-transpose tile edge, in elements

template <typename U>
void FillTyped(void* dst, const void* value, int64_t count) {
  U v;
  std::memcpy(&v, value, sizeof(U));
  std::fill_n(static_cast<U*>(dst), count, v);
}

template <typename U>
void GatherTyped(void* dst, const void* src, int64_t count, int64_t stride) {
  U* d = static_cast<U*>(dst);
  const U* s = static_cast<const U*>(src);
  for (int64_t i = 0; i < count; ++i) d[i] = s[i * stride];
}

// dst[a * cols + b] = src[a + b * ld] for a in [a0, a1), b in [0, cols), in tiles.
template <typename U>
void TransposeRows(const void* src_v, void* dst_v, int64_t a0, int64_t a1, int64_t cols,
                   int64_t ld) {
  const U* src = static_cast<const U*>(src_v);
  U* dst = static_cast<U*>(dst_v);
  for (int64_t b0 = 0; b0 < cols; b0 += kTile) {
    int64_t b1 = std::min(cols, b0 + kTile);
    for (int64_t a = a0; a < a1; ++a) {
      const U* s = src + a;
      U* d = dst + a * cols;
      for (int64_t b = b0; b < b1; ++b) d[b] = s[b * ld];
    }
  }
}

// 1-byte elements: 4 columns (the NCHW -> NHWC transpose of a 4-channel uint8
// frame stack) interleave 16 rows at a time in SSE2 registers.
template <>
void TransposeRows<uint8_t>(const void* src_v, void* dst_v, int64_t a0, int64_t a1, int64_t cols,
                            int64_t ld) {
  const uint8_t* src = static_cast<const uint8_t*>(src_v);
  uint8_t* dst = static_cast<uint8_t*>(dst_v);
  int64_t a = a0;
#ifdef __SSE2__
  if (cols == 4) {
    for (; a + 16 <= a1; a += 16) {
      auto load = [&](int64_t b) {
        return _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + b * ld + a));
      };
      const __m128i p0 = load(0), p1 = load(1), p2 = load(2), p3 = load(3);
      const __m128i lo01 = _mm_unpacklo_epi8(p0, p1), hi01 = _mm_unpackhi_epi8(p0, p1);
      const __m128i lo23 = _mm_unpacklo_epi8(p2, p3), hi23 = _mm_unpackhi_epi8(p2, p3);
      __m128i* d = reinterpret_cast<__m128i*>(dst + a * 4);
      _mm_storeu_si128(d, _mm_unpacklo_epi16(lo01, lo23));      // rows a .. a + 3
      _mm_storeu_si128(d + 1, _mm_unpackhi_epi16(lo01, lo23));  // a + 4 .. a + 7
      _mm_storeu_si128(d + 2, _mm_unpacklo_epi16(hi01, hi23));
      _mm_storeu_si128(d + 3, _mm_unpackhi_epi16(hi01, hi23));
    }
  }
#endif
  for (int64_t b0 = 0; b0 < cols; b0 += kTile) {
    const int64_t b1 = std::min(cols, b0 + kTile);
    for (int64_t r = a; r < a1; ++r)
      for (int64_t b = b0; b < b1; ++b) dst[r * cols + b] = src[r + b * ld];
  }
}

// 4-byte elements (float32, int32): core/transpose (8x8 AVX2 register tiles).
template <>
void TransposeRows<uint32_t>(const void* src_v, void* dst_v, int64_t a0, int64_t a1,
                             int64_t cols, int64_t ld) {
  Transpose32(static_cast<const uint32_t*>(src_v) + a0, a1 - a0, cols, ld,
              static_cast<uint32_t*>(dst_v) + a0 * cols);
}

}  // namespace

void ParallelCopy(void* dst, const void* src, size_t bytes, ThreadPool* pool) {
  if (bytes == 0 || dst == src) return;
  if (pool == nullptr || pool->num_threads() == 1 || bytes < 4 * kCopyChunkBytes) {
    std::memcpy(dst, src, bytes);
    return;
  }
  int64_t chunks = static_cast<int64_t>((bytes + kCopyChunkBytes - 1) / kCopyChunkBytes);
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  struct Args {
    char* d;
    const char* s;
    size_t bytes;
  } a{d, s, bytes};
  pool->ParallelFor(chunks, kCopyChunkBytes / 8.0, [&a](int64_t b, int64_t e) {
    size_t lo = static_cast<size_t>(b) * kCopyChunkBytes;
    size_t hi = std::min(a.bytes, static_cast<size_t>(e) * kCopyChunkBytes);
    std::memcpy(a.d + lo, a.s + lo, hi - lo);
  });
}

void FillElements(void* dst, const void* value, int64_t count, size_t elem) {
  switch (elem) {
    case 1: std::memset(dst, *static_cast<const unsigned char*>(value), count); break;
    case 2: FillTyped<uint16_t>(dst, value, count); break;
    case 4: FillTyped<uint32_t>(dst, value, count); break;
    case 8: FillTyped<uint64_t>(dst, value, count); break;
    default:
      for (int64_t i = 0; i < count; ++i)
        std::memcpy(static_cast<char*>(dst) + i * elem, value, elem);
  }
}

void CopyStridedRow(void* dst, const void* src, int64_t count, int64_t stride, size_t elem) {
  if (stride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(count) * elem);
  } else if (stride == 0) {
    FillElements(dst, src, count, elem);
  } else {
    switch (elem) {
      case 1: GatherTyped<uint8_t>(dst, src, count, stride); break;
      case 2: GatherTyped<uint16_t>(dst, src, count, stride); break;
      case 4: GatherTyped<uint32_t>(dst, src, count, stride); break;
      case 8: GatherTyped<uint64_t>(dst, src, count, stride); break;
      default:
        for (int64_t i = 0; i < count; ++i)
          std::memcpy(static_cast<char*>(dst) + i * elem,
                      static_cast<const char*>(src) + i * stride * static_cast<int64_t>(elem),
                      elem);
    }
  }
}

void StridedCopy::Init(const PrepareContext& ctx, const Shape& out_shape,
                       const std::vector<int64_t>& in_strides, int64_t in_offset, size_t elem) {
  elem_ = elem;
  offset_ = in_offset;
  total_ = NumElements(out_shape);
  MergeCopyDims(out_shape, in_strides, &shape_, &strides_);
  if (static_cast<int>(shape_.size()) > kMaxCopyDims)
    ctx.Error("too many non-contiguous dimensions (", shape_.size(), ", at most ",
              kMaxCopyDims, ")");
}

void StridedCopy::RunRows(const char* src, char* dst, int64_t begin, int64_t end) const {
  const int r = static_cast<int>(shape_.size());
  const int64_t inner = shape_[r - 1];
  const int64_t inner_stride = strides_[r - 1];
  const int64_t e = static_cast<int64_t>(elem_);
  int64_t idx[kMaxCopyDims];
  int64_t off = offset_;
  int64_t rem = begin;
  for (int d = r - 2; d >= 0; --d) {
    idx[d] = rem % shape_[d];
    rem /= shape_[d];
    off += idx[d] * strides_[d];
  }
  for (int64_t row = begin; row < end; ++row) {
    CopyStridedRow(dst + row * inner * e, src + off * e, inner, inner_stride, elem_);
    for (int d = r - 2; d >= 0; --d) {
      off += strides_[d];
      if (++idx[d] < shape_[d]) break;
      off -= strides_[d] * shape_[d];
      idx[d] = 0;
    }
  }
}

void StridedCopy::RunTransposed(const char* src, char* dst, ThreadPool* pool) const {
  const int r = static_cast<int>(shape_.size());
  const int64_t rows = shape_[r - 2], cols = shape_[r - 1], ld = strides_[r - 1];
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t outer = total_ / (rows * cols);
  // Captures stay within std::function's small buffer (two pointers): no allocation.
  struct Args {
    const char* src;
    char* dst;
    int64_t rows, cols, ld, row_tiles;
  } a{src, dst, rows, cols, ld, row_tiles};
  auto body = [this, &a](int64_t begin, int64_t end) {
    const int r = static_cast<int>(shape_.size());
    const int64_t e = static_cast<int64_t>(elem_);
    const int64_t rows = a.rows, cols = a.cols, ld = a.ld, row_tiles = a.row_tiles;
    for (int64_t item = begin; item < end; ++item) {
      int64_t o = item / row_tiles, tile = item % row_tiles;
      int64_t off = offset_, rem = o;
      for (int d = r - 3; d >= 0; --d) {
        off += (rem % shape_[d]) * strides_[d];
        rem /= shape_[d];
      }
      const char* s = a.src + off * e;
      char* d = a.dst + o * rows * cols * e;
      int64_t a0 = tile * kTile, a1 = std::min(rows, a0 + kTile);
      switch (elem_) {
        case 1: TransposeRows<uint8_t>(s, d, a0, a1, cols, ld); break;
        case 2: TransposeRows<uint16_t>(s, d, a0, a1, cols, ld); break;
        case 4: TransposeRows<uint32_t>(s, d, a0, a1, cols, ld); break;
        default: TransposeRows<uint64_t>(s, d, a0, a1, cols, ld); break;
      }
    }
  };
  pool->ParallelFor(outer * row_tiles, static_cast<double>(kTile * cols), body);
}

void StridedCopy::Run(const void* src_v, void* dst_v, ThreadPool* pool) const {
  if (total_ == 0) return;
  const char* src = static_cast<const char*>(src_v);
  char* dst = static_cast<char*>(dst_v);
  const int r = static_cast<int>(shape_.size());
  if (r >= 2 && strides_[r - 2] == 1 && strides_[r - 1] != 0 && strides_[r - 1] != 1 &&
      elem_ <= 8 && (elem_ & (elem_ - 1)) == 0) {
    RunTransposed(src, dst, pool);
    return;
  }
  const int64_t inner = shape_[r - 1];
  struct Args {
    const char* src;
    char* dst;
  } a{src, dst};
  pool->ParallelFor(total_ / inner, static_cast<double>(inner) + 8.0,
                    [this, &a](int64_t b, int64_t e) { RunRows(a.src, a.dst, b, e); });
}

}  // namespace cpu
}  // namespace kaiwu
