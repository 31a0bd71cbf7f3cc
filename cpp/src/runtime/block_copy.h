// Copies between flat arrays described as 2-D blocks: the one form every
// refit write takes (a weight copied from the caller's array, LSTM/GRU gates
// repacked, a matrix transposed, runs gathered from several tensors), applied
// in one pass with the finite check fused in.
#pragma once

#include <cstdint>
#include <vector>

#include "kaiwu/tensor.h"

namespace kaiwu {

class ThreadPool;

/// rows x cols destination elements, contiguous from dst_offset, read from
/// source `src` at src_offset + r * row_stride + c * col_stride (elements).
struct CopyBlock {
  int32_t src = 0;
  int64_t src_offset = 0;
  int64_t rows = 1, cols = 0;
  int64_t row_stride = 0, col_stride = 1;
  int64_t dst_offset = 0;

  int64_t size() const { return rows * cols; }
  bool operator==(const CopyBlock& o) const {
    return src == o.src && src_offset == o.src_offset && rows == o.rows && cols == o.cols &&
           row_stride == o.row_stride && col_stride == o.col_stride && dst_offset == o.dst_offset;
  }
};

/// Blocks for an element map: destination element i is element index[i] of
/// source src[i] (src may be null: every element from source 0). Runs, strided
/// runs and their regular repetitions each become one block.
std::vector<CopyBlock> CompressElementMap(const int32_t* src, const int64_t* index, int64_t n);

/// The element map of a transpose: out = in.transpose(perm), row-major.
std::vector<int64_t> TransposeIndex(const Shape& in_shape, const std::vector<int64_t>& perm);

/// Where a copy met a non-finite value: source and flat element index in it.
struct CopyFault {
  int32_t src = -1;
  int64_t index = -1;
};

/// Copies `blocks` from `srcs` (one base pointer per source index) into `dst`,
/// elements of `dtype`. With `check_finite` (float dtypes), stops at the first
/// NaN or Inf it reads and returns false with `fault` naming it.
bool CopyBlocks(const std::vector<CopyBlock>& blocks, const void* const* srcs, void* dst,
                DType dtype, bool check_finite, CopyFault* fault);

/// CopyBlocks with copies of 256K elements and more split into pieces of 16K
/// elements run on `pool` (in place when the copy is smaller or the pool has
/// one thread). On a non-finite value, `fault` names the first piece's (in
/// destination order).
bool CopyBlocksParallel(const std::vector<CopyBlock>& blocks, const void* const* srcs, void* dst,
                        DType dtype, bool check_finite, CopyFault* fault, ThreadPool* pool);

/// One copy of a batch: `blocks` from `srcs` into `dst`.
struct CopyTask {
  const std::vector<CopyBlock>* blocks = nullptr;
  const void* const* srcs = nullptr;
  void* dst = nullptr;
  DType dtype = DType::kFloat32;
};

/// Independent copies (no job reads what another writes) as one batch: one
/// wake of `pool` for all of them, split into pieces of 16K elements when the
/// batch has 128K elements and more (else run in place). Ordinary stores, so
/// that the runs after a refit find the new weights in cache. On a non-finite
/// value, `fault` and `*fault_task` name the first piece's (in job order).
bool CopyTasksParallel(const std::vector<CopyTask>& jobs, bool check_finite, CopyFault* fault,
                      size_t* fault_task, ThreadPool* pool);

/// One piece of a batch of copies: `block` of job `task`.
struct CopyPiece {
  CopyBlock block;
  size_t task = 0;
};

/// The blocks of `jobs` cut into pieces of at most about `max_elements`
/// (SplitBlocks), in job order and, within a job, in destination order.
void SplitTasks(const std::vector<CopyTask>& jobs, int64_t max_elements,
                std::vector<CopyPiece>* out);

/// Copies `count` pieces of `jobs` (independent copies), on `pool` when they
/// hold 128K elements and more, with streaming stores when `stream` (for a
/// destination no CPU reads next: the device staging of a refit). On a
/// non-finite value, `fault` and `*fault_task` name the first piece's.
bool CopyPieces(const std::vector<CopyTask>& jobs, const CopyPiece* pieces, size_t count,
                bool check_finite, bool stream, CopyFault* fault, size_t* fault_task,
                ThreadPool* pool);

/// `blocks` cut into blocks of at most about `max_elements` (row ranges of a
/// strided block, multiples of 8 rows; element ranges of a contiguous run).
void SplitBlocks(const std::vector<CopyBlock>& blocks, int64_t max_elements,
                 std::vector<CopyBlock>* out);

/// True when every block reads contiguous runs (col_stride 1): what a device
/// copy engine does without a kernel.
bool AllRowsContiguous(const std::vector<CopyBlock>& blocks);

}  // namespace kaiwu
