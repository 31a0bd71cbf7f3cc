#include "runtime/block_copy.h"

#include <algorithm>
#include <cstring>

#include "core/stream_copy.h"
#include "core/thread_pool.h"
#include "core/transpose.h"
#include "kaiwu/status.h"

namespace kaiwu {

std::vector<CopyBlock> CompressElementMap(const int32_t* src, const int64_t* index, int64_t n) {
  auto source = [src](int64_t i) { return src ? src[i] : 0; };
  std::vector<CopyBlock> blocks;
  int64_t p = 0;
  while (p < n) {
    CopyBlock b;
    b.src = source(p);
    b.src_offset = index[p];
    b.dst_offset = p;
    auto at = [&](int64_t q, int64_t want) { return source(q) == b.src && index[q] == want; };
    // One row: a run with a constant stride.
    b.col_stride = (p + 1 < n && source(p + 1) == b.src) ? index[p + 1] - index[p] : 1;
    b.cols = 1;
    while (p + b.cols < n && at(p + b.cols, b.src_offset + b.cols * b.col_stride)) ++b.cols;
    if (b.cols == 1) b.col_stride = 1;
    // Repetitions of that row with a constant offset between them.
    const int64_t next = p + b.cols;
    if (next < n && source(next) == b.src) {
      b.row_stride = index[next] - b.src_offset;
      for (int64_t r = 1;; ++r) {
        const int64_t start = p + r * b.cols;
        if (start + b.cols > n) break;
        bool same = true;
        for (int64_t k = 0; k < b.cols && same; ++k)
          same = at(start + k, b.src_offset + r * b.row_stride + k * b.col_stride);
        if (!same) break;
        b.rows = r + 1;
      }
    }
    if (b.rows == 1) b.row_stride = b.cols * b.col_stride;
    blocks.push_back(b);
    p += b.size();
  }
  return blocks;
}

std::vector<int64_t> TransposeIndex(const Shape& in_shape, const std::vector<int64_t>& perm) {
  const size_t rank = in_shape.size();
  if (perm.size() != rank) Fail(StatusCode::kRefit, "transpose: perm has ", perm.size(),
                                " axes for a tensor of rank ", rank);
  const std::vector<int64_t> in_strides = Strides(in_shape);
  Shape out_shape(rank);
  std::vector<int64_t> stride(rank);  // input stride of each output axis
  for (size_t a = 0; a < rank; ++a) {
    if (perm[a] < 0 || perm[a] >= static_cast<int64_t>(rank))
      Fail(StatusCode::kRefit, "transpose: bad perm axis ", perm[a]);
    out_shape[a] = in_shape[perm[a]];
    stride[a] = in_strides[perm[a]];
  }
  const int64_t n = NumElements(in_shape);
  std::vector<int64_t> index(static_cast<size_t>(n));
  std::vector<int64_t> pos(rank, 0);
  int64_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    index[i] = at;
    for (int a = static_cast<int>(rank) - 1; a >= 0; --a) {
      if (++pos[a] < out_shape[a]) {
        at += stride[a];
        break;
      }
      at -= (out_shape[a] - 1) * stride[a];
      pos[a] = 0;
    }
  }
  return index;
}

namespace {

// Bits of the exponent of a float dtype: all ones means NaN or Inf.
template <typename U> U ExponentMask(DType t) {
  switch (t) {
    case DType::kFloat16: return static_cast<U>(0x7c00u);
    case DType::kFloat32: return static_cast<U>(0x7f800000u);
    case DType::kFloat64: return static_cast<U>(0x7ff0000000000000ull);
    default: return 0;
  }
}

template <typename U> int64_t FirstNonFinite(const U* p, int64_t n, U mask) {
  unsigned bad = 0;
  for (int64_t i = 0; i < n; ++i) bad |= (p[i] & mask) == mask;
  if (!bad) return -1;
  for (int64_t i = 0; i < n; ++i)
    if ((p[i] & mask) == mask) return i;
  return -1;
}

// Elements copied between checks: the checked chunk is still in L1.
constexpr int64_t kChunk = 4096;

// d[c] = s[c * stride] for c < n, eight independent loads before their stores
// (a GEMM or conv panel packed from a weight read across both its axes: the
// plain loop ran at a third of the speed on the EPYC, bound by its
// load-store chain, and AVX2 gathers were slower still).
template <typename U> inline void GatherRow(const U* s, int64_t stride, U* d, int64_t n) {
  int64_t c = 0;
  for (; c + 8 <= n; c += 8) {
    const U* p = s + c * stride;
    const U v0 = p[0], v1 = p[stride], v2 = p[2 * stride], v3 = p[3 * stride],
            v4 = p[4 * stride], v5 = p[5 * stride], v6 = p[6 * stride], v7 = p[7 * stride];
    d[c] = v0;
    d[c + 1] = v1;
    d[c + 2] = v2;
    d[c + 3] = v3;
    d[c + 4] = v4;
    d[c + 5] = v5;
    d[c + 6] = v6;
    d[c + 7] = v7;
  }
  for (; c < n; ++c) d[c] = s[c * stride];
}


template <typename U>
bool CopyTyped(const CopyBlock* blocks, size_t count, const void* const* srcs, void* dst_base,
               U mask, bool stream, CopyFault* fault) {
  U* dst = static_cast<U*>(dst_base);
  struct Fence {
    bool on;
    ~Fence() {
      if (on) StreamFence();
    }
  } fence{stream};
  for (size_t bi = 0; bi < count; ++bi) {
    const CopyBlock& b = blocks[bi];
    const U* src = static_cast<const U*>(srcs[b.src]) + b.src_offset;
    U* out = dst + b.dst_offset;
    auto fail = [&](int64_t r, int64_t c) {
      fault->src = b.src;
      fault->index = b.src_offset + r * b.row_stride + c * b.col_stride;
      return false;
    };
    if (b.col_stride == 1) {
      // Contiguous runs: whole rows at once when the rows follow each other.
      const bool merged = b.row_stride == b.cols;
      const int64_t rows = merged ? 1 : b.rows, cols = merged ? b.size() : b.cols;
      for (int64_t r = 0; r < rows; ++r) {
        const U* s = src + r * b.row_stride;
        U* d = out + r * cols;
        for (int64_t c = 0; c < cols; c += kChunk) {
          const int64_t len = std::min(kChunk, cols - c);
          if constexpr (sizeof(U) == 4) {
            // float32 checked into cache: the check rides on the copy's own loads.
            if (mask && !stream) {
              if (!CopyCheckBits32(d + c, s + c, len, mask)) continue;
              const int64_t i = FirstNonFinite(s + c, len, mask);
              return merged ? fail(0, c + i) : fail(r, c + i);
            }
          }
          if (stream) StreamCopy(d + c, s + c, static_cast<size_t>(len) * sizeof(U));
          else std::memcpy(d + c, s + c, static_cast<size_t>(len) * sizeof(U));
          if (mask) {  // the source: a streamed destination is not in cache
            const int64_t i = FirstNonFinite(s + c, len, mask);
            if (i >= 0) return merged ? fail(0, c + i) : fail(r, c + i);
          }
        }
      }
      continue;
    }
    if (b.row_stride == 1 && sizeof(U) == 4) {
      // A transpose of a row-major source (the panels of a prepacked GEMM
      // weight, a transposed matrix): core/transpose. With the finite check,
      // in row ranges of about kChunk elements: into cache, each element
      // checked as it is loaded; streamed, each range's source runs checked
      // right after they were read (still in L1). A range found bad is
      // scanned for the first bad element.
      const int64_t step =
          mask ? std::max<int64_t>(16, (kChunk / std::max<int64_t>(b.cols, 1)) & ~int64_t{15}) : b.rows;
      for (int64_t r0 = 0; r0 < b.rows; r0 += step) {
        const int64_t n = std::min(step, b.rows - r0);
        bool scan = mask != 0;
        if (stream) Transpose32Stream(src + r0, n, b.cols, b.col_stride, out + r0 * b.cols);
        else if (mask) scan = Transpose32Check(src + r0, n, b.cols, b.col_stride, out + r0 * b.cols, mask);
        else Transpose32(src + r0, n, b.cols, b.col_stride, out + r0 * b.cols);
        if (!scan) continue;
        for (int64_t c = 0; c < b.cols; ++c) {
          const int64_t i = FirstNonFinite(src + r0 + c * b.col_stride, n, mask);
          if (i >= 0) return fail(r0 + i, c);
        }
      }
      continue;
    }
    if (b.row_stride == 1 && !mask) {
      // Other element sizes: each source row read contiguously into a
      // destination tile in L1.
      const int64_t tile_rows = std::max<int64_t>(32, 4096 / std::max<int64_t>(b.cols, 1));
      for (int64_t r0 = 0; r0 < b.rows; r0 += tile_rows) {
        const int64_t n = std::min(tile_rows, b.rows - r0);
        for (int64_t c = 0; c < b.cols; ++c) {
          const U* s = src + r0 + c * b.col_stride;
          U* d = out + r0 * b.cols + c;
          for (int64_t r = 0; r < n; ++r) d[r * b.cols] = s[r];
        }
      }
      continue;
    }
    // Strided rows (a transpose): tiles, so that reads and writes both stay in cache.
    constexpr int64_t kTile = 32;
    for (int64_t r0 = 0; r0 < b.rows; r0 += kTile) {
      const int64_t r1 = std::min(b.rows, r0 + kTile);
      for (int64_t c0 = 0; c0 < b.cols; c0 += kTile) {
        const int64_t c1 = std::min(b.cols, c0 + kTile);
        for (int64_t r = r0; r < r1; ++r) {
          const U* s = src + r * b.row_stride;
          U* d = out + r * b.cols;
          GatherRow(s + c0 * b.col_stride, b.col_stride, d + c0, c1 - c0);
          if (mask) {
            const int64_t i = FirstNonFinite(d + c0, c1 - c0, mask);
            if (i >= 0) return fail(r, c0 + i);
          }
        }
      }
    }
  }
  return true;
}

template <typename U> U Mask(bool check, DType t) { return check ? ExponentMask<U>(t) : 0; }

bool CopyBlockRange(const CopyBlock* blocks, size_t count, const void* const* srcs, void* dst,
                    DType dtype, bool check, bool stream, CopyFault* fault) {
  switch (DTypeSize(dtype)) {
    case 1: return CopyTyped<uint8_t>(blocks, count, srcs, dst, 0, stream, fault);
    case 2: return CopyTyped(blocks, count, srcs, dst, Mask<uint16_t>(check, dtype), stream, fault);
    case 4: return CopyTyped(blocks, count, srcs, dst, Mask<uint32_t>(check, dtype), stream, fault);
    case 8: return CopyTyped(blocks, count, srcs, dst, Mask<uint64_t>(check, dtype), stream, fault);
    default: Fail(StatusCode::kInternal, "CopyBlocks: no copy for dtype ", DTypeName(dtype));
  }
}

}  // namespace

bool CopyBlocks(const std::vector<CopyBlock>& blocks, const void* const* srcs, void* dst,
                DType dtype, bool check_finite, CopyFault* fault) {
  return CopyBlockRange(blocks.data(), blocks.size(), srcs, dst, dtype,
                        check_finite && IsFloat(dtype), false, fault);
}

void SplitBlocks(const std::vector<CopyBlock>& blocks, int64_t max_elements,
                 std::vector<CopyBlock>* out) {
  out->clear();
  for (const CopyBlock& b : blocks) {
    if (b.size() <= max_elements) {
      out->push_back(b);
      continue;
    }
    if (b.col_stride == 1 && b.row_stride == b.cols) {  // one contiguous run
      for (int64_t e = 0; e < b.size(); e += max_elements) {
        CopyBlock p = b;
        p.rows = 1;
        p.cols = std::min(max_elements, b.size() - e);
        p.row_stride = p.cols;
        p.src_offset = b.src_offset + e;
        p.dst_offset = b.dst_offset + e;
        out->push_back(p);
      }
      continue;
    }
    const int64_t rows =
        std::max<int64_t>(8, (max_elements / std::max<int64_t>(b.cols, 1)) & ~int64_t{7});
    for (int64_t r = 0; r < b.rows; r += rows) {
      CopyBlock p = b;
      p.rows = std::min(rows, b.rows - r);
      p.src_offset = b.src_offset + r * b.row_stride;
      p.dst_offset = b.dst_offset + r * b.cols;
      out->push_back(p);
    }
  }
}

bool CopyBlocksParallel(const std::vector<CopyBlock>& blocks, const void* const* srcs, void* dst,
                        DType dtype, bool check_finite, CopyFault* fault, ThreadPool* pool) {
  // Pieces of 64 KB (float32), for copies of 1 MB and up: on the H100 host,
  // splitting a 256 KB weight cost more in waking threads than it saved.
  constexpr int64_t kPiece = 1 << 14, kMinParallel = 1 << 18;
  int64_t total = 0;
  for (const CopyBlock& b : blocks) total += b.size();
  const bool check = check_finite && IsFloat(dtype);
  if (!pool || pool->num_threads() < 2 || total < kMinParallel)
    return CopyBlockRange(blocks.data(), blocks.size(), srcs, dst, dtype, check, false, fault);
  // Scratch kept per calling thread (a steady refit allocates nothing here),
  // named through references: the workers must see the caller's vectors, not
  // their own thread's.
  thread_local std::vector<CopyBlock> tl_pieces;
  thread_local std::vector<CopyFault> tl_faults;
  thread_local std::vector<char> tl_failed;
  std::vector<CopyBlock>& pieces = tl_pieces;
  std::vector<CopyFault>& faults = tl_faults;
  std::vector<char>& failed = tl_failed;
  SplitBlocks(blocks, kPiece, &pieces);
  faults.assign(pieces.size(), CopyFault{});
  failed.assign(pieces.size(), 0);
  pool->ParallelFor(static_cast<int64_t>(pieces.size()), static_cast<double>(kPiece),
                    [&](int64_t begin, int64_t end) {
                      for (int64_t i = begin; i < end; ++i)
                        failed[i] = !CopyBlockRange(&pieces[i], 1, srcs, dst, dtype, check, false,
                                                    &faults[i]);
                    });
  for (size_t i = 0; i < pieces.size(); ++i)
    if (failed[i]) {
      *fault = faults[i];
      return false;
    }
  return true;
}

void SplitTasks(const std::vector<CopyTask>& jobs, int64_t max_elements,
                std::vector<CopyPiece>* out) {
  thread_local std::vector<CopyBlock> tl_split;  // kept: a steady refit allocates nothing here
  out->clear();
  for (size_t i = 0; i < jobs.size(); ++i) {
    SplitBlocks(*jobs[i].blocks, max_elements, &tl_split);
    for (const CopyBlock& b : tl_split) out->push_back(CopyPiece{b, i});
  }
}

bool CopyPieces(const std::vector<CopyTask>& jobs, const CopyPiece* pieces, size_t count,
                bool check_finite, bool stream, CopyFault* fault, size_t* fault_task,
                ThreadPool* pool) {
  constexpr int64_t kPiece = 1 << 14, kMinParallel = 1 << 17;
  int64_t total = 0;
  for (size_t i = 0; i < count; ++i) total += pieces[i].block.size();
  auto copy = [&](size_t i, CopyFault* f) {
    const CopyTask& j = jobs[pieces[i].task];
    return CopyBlockRange(&pieces[i].block, 1, j.srcs, j.dst, j.dtype,
                          check_finite && IsFloat(j.dtype), stream, f);
  };
  if (!pool || pool->num_threads() < 2 || total < kMinParallel) {
    for (size_t i = 0; i < count; ++i)
      if (!copy(i, fault)) {
        *fault_task = pieces[i].task;
        return false;
      }
    return true;
  }
  // Scratch kept per calling thread (see CopyBlocksParallel).
  thread_local std::vector<CopyFault> tl_faults;
  thread_local std::vector<char> tl_failed;
  std::vector<CopyFault>& faults = tl_faults;
  std::vector<char>& failed = tl_failed;
  faults.assign(count, CopyFault{});
  failed.assign(count, 0);
  pool->ParallelFor(static_cast<int64_t>(count), static_cast<double>(kPiece),
                    [&](int64_t begin, int64_t end) {
                      for (int64_t i = begin; i < end; ++i) failed[i] = !copy(i, &faults[i]);
                    });
  for (size_t i = 0; i < count; ++i)
    if (failed[i]) {
      *fault = faults[i];
      *fault_task = pieces[i].task;
      return false;
    }
  return true;
}

bool CopyTasksParallel(const std::vector<CopyTask>& jobs, bool check_finite, CopyFault* fault,
                      size_t* fault_task, ThreadPool* pool) {
  constexpr int64_t kPiece = 1 << 14, kMinParallel = 1 << 17;
  // Ordinary stores: they leave the new weights in cache for the runs that
  // follow. Streaming stores made the refit itself faster (Atari CNN on the
  // 2-core EPYC: 0.39-0.55 ms against 0.9-1.0 ms) but the first run after it
  // slower by more (0.5 -> 1.2-1.35 ms), since it then read every weight from
  // memory. Only the device staging, which no run reads, streams.
  constexpr bool stream = false;
  int64_t total = 0;
  for (const CopyTask& j : jobs)
    for (const CopyBlock& b : *j.blocks) total += b.size();
  if (!pool || pool->num_threads() < 2 || total < kMinParallel) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      const CopyTask& j = jobs[i];
      if (!CopyBlockRange(j.blocks->data(), j.blocks->size(), j.srcs, j.dst, j.dtype,
                          check_finite && IsFloat(j.dtype), stream, fault)) {
        *fault_task = i;
        return false;
      }
    }
    return true;
  }
  thread_local std::vector<CopyPiece> tl_pieces;  // kept per calling thread
  std::vector<CopyPiece>& pieces = tl_pieces;
  SplitTasks(jobs, kPiece, &pieces);
  return CopyPieces(jobs, pieces.data(), pieces.size(), check_finite, stream, fault, fault_task,
                    pool);
}

bool AllRowsContiguous(const std::vector<CopyBlock>& blocks) {
  for (const CopyBlock& b : blocks)
    if (b.col_stride != 1 && b.cols > 1) return false;
  return true;
}

}  // namespace kaiwu
