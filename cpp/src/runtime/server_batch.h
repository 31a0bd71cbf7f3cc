// Batch assembly for the inference server: the rows of a batch's requests
// (feeds and each actor's recurrent state) gathered into contiguous model
// inputs, slice after slice, and each slice's outputs scattered back into
// the requests' outputs and their actors' next state.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/server_layout.h"
#include "runtime/server_slices.h"
#include "runtime/server_state.h"

namespace kaiwu {

/// Buffers for gathered inputs, grown (with headroom) and reused, so that a
/// thread's steady batches need no new input memory. One per thread.
class BatchScratch {
 public:
  /// Buffer `i`, at least `bytes` long; earlier contents are not kept.
  void* Get(size_t i, size_t bytes);

 private:
  std::vector<Tensor> bufs_;
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
  void Gather(const Requests& batch, const RequestStates& states, size_t begin, size_t end,
              BatchScratch* scratch);

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
};

}  // namespace kaiwu
