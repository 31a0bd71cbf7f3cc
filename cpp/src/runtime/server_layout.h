// How the inference server maps actors' requests onto the model: which inputs
// an actor feeds, which inputs are recurrent state kept per actor, and where
// each state's batch axis lies. Built once from the model's inputs and outputs,
// without running anything, so it can be checked on hand-made IOInfo.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/server_request.h"

namespace kaiwu {

/// The product of dims [begin, end) of `s` (elements before / after a batch axis).
int64_t ProdDims(const Shape& s, size_t begin, size_t end);

/// One recurrent state: a model input fed from each actor's kept rows, and the
/// model output that carries its next value.
struct StateSpec {
  std::string in_name, out_name;
  int in_index = -1, out_index = -1;
  int in_axis = 0, out_axis = 0;
  DType dtype = DType::kUndefined;
  Shape dims;                    ///< the input's declared dims (the batch axis may be -1)
  Shape per_row;                 ///< shape with the batch dim removed
  int64_t outer = 1, inner = 1;  ///< elements before / after the batch axis

  /// Bytes of one row at one outer index (`inner` elements).
  size_t inner_bytes() const { return static_cast<size_t>(inner) * DTypeSize(dtype); }
  /// Declared dims with the batch axis set to `rows`.
  Shape AtRows(int64_t rows) const;
};

/// The model's inputs split into what actors feed and what the server keeps.
/// Feeds carry rows on axis 0; a request lists them in `feed_inputs` order.
struct ServerLayout {
  size_t num_inputs = 0;            ///< all model inputs
  std::vector<IOInfo> feed_inputs;  ///< non-state inputs, in model order
  std::vector<int> feed_index;      ///< model input index of each feed input
  std::vector<StateSpec> state;     ///< in options.state order
  std::vector<int> out_state;       ///< per model output: state index or -1

  /// Splits `inputs` by `options.state` and finds each state's batch axis
  /// (options.state_batch_axis, else the dim named like the first feed's
  /// symbolic batch dim, else 0). Throws kInput on unknown or repeated names,
  /// mismatched dtypes, scalars, or non-batch dims that are not fixed.
  static ServerLayout Build(const std::vector<IOInfo>& inputs, const std::vector<IOInfo>& outputs,
                            const ServerOptions& options);

  /// Checks a request's feeds against the declared inputs (count, dtype,
  /// rank, rows on axis 0 equal and in [1, max_batch]) and its done flags.
  /// Returns its rows. Throws kInput naming the input.
  int64_t CheckFeeds(const ServerRequest& r, int max_batch) const;

  /// Shape-only views (null data) of every model input, in model order, for
  /// `rows` rows: feeds shaped like `feeds` (server order) with axis 0 set to
  /// `rows`; states at their declared dims. What Session::OutputShapes takes.
  std::vector<TensorView> Probe(const std::vector<TensorView>& feeds, int64_t rows) const;

  /// Batch axis of each output (-1: none), from the output shapes at 1 and 2
  /// rows: the first dim that reads 1 then 2. Throws kInput when a state
  /// output's axis or shape differs from its state input's.
  std::vector<int> BatchAxes(const std::vector<TensorView>& at_1,
                             const std::vector<TensorView>& at_2) const;

  /// True when every feed's dims after axis 0 and every state's non-batch
  /// dims are fixed, so a batch of any size can be made up without a request.
  bool FixedRowShapes() const;
};

/// Per-row shapes of `feeds` (axis 0 dropped), each closed by -1: requests
/// with equal keys can share a batch.
std::vector<int64_t> RowShapeKey(const std::vector<TensorView>& feeds);
/// dtype, rank and full shape of each of `feeds`.
std::vector<int64_t> FeedShapeKey(const std::vector<TensorView>& feeds);

}  // namespace kaiwu
