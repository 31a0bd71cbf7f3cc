// Batch assembly for the inference server: the rows of a batch's requests
// (feeds and each actor's recurrent state) gathered into contiguous model
// inputs, slice after slice, and each slice's outputs scattered back into
// the requests' outputs and their actors' next state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/server_layout.h"
#include "runtime/server_slices.h"
#include "runtime/server_state.h"

namespace kaiwu {

class ThreadPool;

/// Buffers for gathered inputs, grown (with headroom) and reused, so that a
/// thread's steady batches need no new input memory. One per thread. A
/// server on a device allocates them page-locked (Session::AllocHostBuffer),
/// so that the run moves each gathered input with one DMA, no staging copy.
class BatchScratch {
 public:
  using Alloc = std::function<std::shared_ptr<void>(size_t)>;
  /// `alloc` (bytes -> memory); null: ordinary host memory.
  explicit BatchScratch(Alloc alloc = nullptr) : alloc_(std::move(alloc)) {}

  /// Buffer `i`, at least `bytes` long; earlier contents are not kept.
  void* Get(size_t i, size_t bytes);
  /// Buffer `i` for `used` bytes the caller writes next, followed by zeros up
  /// to `bytes`: zeroes only the part of [used, bytes) earlier calls may have
  /// written (a new buffer starts all zeros), so that steady batches padded to
  /// the same size do not clear their padding again.
  void* GetPadded(size_t i, size_t used, size_t bytes);
  /// Bytes zeroed by GetPadded since construction (a counter for tests).
  uint64_t zeroed_bytes() const { return zeroed_; }

 private:
  struct Buf {
    std::shared_ptr<void> mem;
    size_t cap = 0;
    size_t dirty = 0;  ///< bytes past this are known to be zero
  };
  Buf& Reserve(size_t i, size_t bytes);

  Alloc alloc_;
  std::vector<Buf> bufs_;
  uint64_t zeroed_ = 0;
};

/// Per request: the state it steps (null without state specs).
using RequestStates = std::vector<std::shared_ptr<ActorState>>;

/// One group of requests [begin, end) run as the slices of `slices`.
class BatchAssembly {
 public:
  /// `layout` must outlive this object; `slices.rows` is the group's rows.
  BatchAssembly(const ServerLayout& layout, const SliceLayout& slices)
      : layout_(layout), slices_(slices) {}

  /// Copies the requests' feed rows (axis 0), then their state rows, into
  /// `scratch`: each state as one [outer, n_s, inner] block per slice. Done
  /// rows are zeroed in the actor's state first; padding rows are zeros.
  /// With `pool` (more than one thread), feeds of kParallelBytes and more in
  /// all are copied in pieces on its threads. Returns the feed bytes copied.
  size_t Gather(const Requests& batch, const RequestStates& states, size_t begin, size_t end,
                BatchScratch* scratch, ThreadPool* pool = nullptr);
  /// Feed bytes of one batch from which Gather copies on several threads.
  static constexpr size_t kParallelBytes = size_t{1} << 21;
  /// Whether the last Gather copied on several threads.
  bool parallel() const { return parallel_; }

  /// Model inputs (model order) of slice `s`, viewing the gathered buffers;
  /// feeds take dtype and shape from `feeds` (server order) with the slice's rows.
  std::vector<TensorView> SliceInputs(const std::vector<TensorView>& feeds, int64_t s) const;

  /// Hands each request [begin, end) its rows of every output: `res[s]` holds
  /// slice s's outputs, `axes` each output's batch axis (-1: the request gets
  /// the whole output). A view into the run's output where its rows are
  /// contiguous, else a copy. State outputs are also copied into `states`.
  void Scatter(const std::vector<int>& axes, const std::vector<RunResult>& res,
               const Requests& batch, const RequestStates& states, size_t begin, size_t end) const;

 private:
  const ServerLayout& layout_;
  SliceLayout slices_;
  std::vector<char*> feed_base_;        ///< per feed input
  std::vector<size_t> feed_row_bytes_;  ///< per feed input
  std::vector<char*> state_base_;       ///< per state spec
  /// One feed's rows of one request, and the pieces they are cut into for the
  /// threads; kept between batches so a gather allocates nothing once warm.
  struct RowCopy {
    char* dst;
    const char* src;
    size_t bytes;
  };
  std::vector<RowCopy> copies_, pieces_;
  bool parallel_ = false;
};

}  // namespace kaiwu
