// The inference server's questions to the model's shape inference: is a
// request's feed signature valid, and which axis of each output carries the
// batch. Each answer is cached per distinct signature, since asking the model
// costs far more than a lookup and actors repeat the same few shapes.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "runtime/server_layout.h"

namespace kaiwu {

/// Thread-safe (its own locks, never held while calling the session twice).
class ServerShapes {
 public:
  /// `session` and `layout` must outlive this object.
  ServerShapes(const Session& session, const ServerLayout& layout)
      : session_(session), layout_(layout) {}

  /// Checks feeds of `rows` rows (already through ServerLayout::CheckFeeds)
  /// against the model's shape inference, once per signature, through the plan
  /// of `run_rows` rows (the padded size a batch of them runs as, so that a
  /// check builds no plan that runs would not, and warm-up's plans serve it).
  /// Throws kInput naming the input, with the request's own shapes where they
  /// fail too.
  void Check(const ServerRequest& r, int64_t rows, int64_t run_rows);

  /// Batch axis of each output (-1: none) for feeds shaped like `feeds`
  /// (server order; axis 0 is ignored). Throws kInput when a state output
  /// does not match its input (see ServerLayout::BatchAxes).
  std::vector<int> OutputAxes(const std::vector<TensorView>& feeds);

  /// Batch axes as OutputAxes, and the output shapes at one row, for models
  /// whose feed inputs have fixed dims after axis 0 (throws kInput if not).
  std::vector<int> OutputLayout(std::vector<TensorView>* at_one_row);

 private:
  const Session& session_;
  const ServerLayout& layout_;
  std::mutex validated_mu_;
  std::set<std::vector<int64_t>> validated_;  ///< FeedShapeKey of valid feeds
  std::mutex axes_mu_;
  std::map<std::vector<int64_t>, std::vector<int>> out_axes_;  ///< by RowShapeKey
};

}  // namespace kaiwu
