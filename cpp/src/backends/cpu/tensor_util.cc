#include "backends/cpu/tensor_util.h"

#include <algorithm>
#include <cstring>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "backends/copy_geometry.h"

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

#if defined(__AVX__)
// An 8x8 block of 4-byte elements: dst[a * ldd + b] = src[a + b * lds].
inline void Transpose8x8(const float* src, int64_t lds, float* dst, int64_t ldd) {
  __m256 r0 = _mm256_loadu_ps(src), r1 = _mm256_loadu_ps(src + lds);
  __m256 r2 = _mm256_loadu_ps(src + 2 * lds), r3 = _mm256_loadu_ps(src + 3 * lds);
  __m256 r4 = _mm256_loadu_ps(src + 4 * lds), r5 = _mm256_loadu_ps(src + 5 * lds);
  __m256 r6 = _mm256_loadu_ps(src + 6 * lds), r7 = _mm256_loadu_ps(src + 7 * lds);
  __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1);
  __m256 t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3);
  __m256 t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5);
  __m256 t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  _mm256_storeu_ps(dst, _mm256_permute2f128_ps(s0, s4, 0x20));
  _mm256_storeu_ps(dst + ldd, _mm256_permute2f128_ps(s1, s5, 0x20));
  _mm256_storeu_ps(dst + 2 * ldd, _mm256_permute2f128_ps(s2, s6, 0x20));
  _mm256_storeu_ps(dst + 3 * ldd, _mm256_permute2f128_ps(s3, s7, 0x20));
  _mm256_storeu_ps(dst + 4 * ldd, _mm256_permute2f128_ps(s0, s4, 0x31));
  _mm256_storeu_ps(dst + 5 * ldd, _mm256_permute2f128_ps(s1, s5, 0x31));
  _mm256_storeu_ps(dst + 6 * ldd, _mm256_permute2f128_ps(s2, s6, 0x31));
  _mm256_storeu_ps(dst + 7 * ldd, _mm256_permute2f128_ps(s3, s7, 0x31));
}

// 4-byte elements (float32, int32): 8x8 register transposes, scalar edges.
template <>
void TransposeRows<uint32_t>(const void* src_v, void* dst_v, int64_t a0, int64_t a1,
                             int64_t cols, int64_t ld) {
  const float* src = static_cast<const float*>(src_v);
  float* dst = static_cast<float*>(dst_v);
  const int64_t a8 = a0 + (a1 - a0) / 8 * 8, b8 = cols / 8 * 8;
  for (int64_t b = 0; b < b8; b += 8)
    for (int64_t a = a0; a < a8; a += 8) Transpose8x8(src + a + b * ld, ld, dst + a * cols + b, cols);
  for (int64_t a = a0; a < a1; ++a) {  // edges: the last rows, and the last columns
    const float* s = src + a;
    float* d = dst + a * cols;
    for (int64_t b = a < a8 ? b8 : 0; b < cols; ++b) d[b] = s[b * ld];
  }
}
#endif

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
