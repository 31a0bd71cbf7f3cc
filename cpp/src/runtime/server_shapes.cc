#include "runtime/server_shapes.h"

#include "kaiwu/status.h"

namespace kaiwu {

void ServerShapes::Check(const ServerRequest& r, int64_t rows, int64_t run_rows) {
  std::vector<int64_t> key = FeedShapeKey(r.feeds);
  {
    std::lock_guard<std::mutex> lock(validated_mu_);
    if (validated_.count(key)) return;
  }
  try {
    session_.OutputShapes(layout_.Probe(r.feeds, run_rows));  // throws kInput naming the input
  } catch (const Error&) {
    // The message should show what the caller sent: check at its own rows,
    // whose error (if any) replaces this one.
    if (run_rows != rows) session_.OutputShapes(layout_.Probe(r.feeds, rows));
    throw;
  }
  std::lock_guard<std::mutex> lock(validated_mu_);
  if (validated_.size() > 4096) validated_.clear();
  validated_.insert(std::move(key));
}

std::vector<int> ServerShapes::OutputAxes(const std::vector<TensorView>& feeds) {
  std::vector<int64_t> key = RowShapeKey(feeds);
  {
    std::lock_guard<std::mutex> lock(axes_mu_);
    auto it = out_axes_.find(key);
    if (it != out_axes_.end()) return it->second;
  }
  const auto at_1 = session_.OutputShapes(layout_.Probe(feeds, 1));
  const auto at_2 = session_.OutputShapes(layout_.Probe(feeds, 2));
  std::vector<int> axes = layout_.BatchAxes(at_1, at_2);
  std::lock_guard<std::mutex> lock(axes_mu_);
  out_axes_[std::move(key)] = axes;
  return axes;
}

std::vector<int> ServerShapes::OutputLayout(std::vector<TensorView>* at_one_row) {
  std::vector<TensorView> feeds(layout_.feed_inputs.size());
  for (size_t i = 0; i < feeds.size(); ++i) {
    const IOInfo& io = layout_.feed_inputs[i];
    KAIWU_CHECK(io.has_shape && !io.dims.empty(), StatusCode::kInput, "input '", io.name,
                "' needs a declared shape with rows on axis 0");
    Shape s = io.dims;
    s[0] = 1;
    for (size_t d = 1; d < s.size(); ++d)
      KAIWU_CHECK(s[d] >= 0, StatusCode::kInput, "input '", io.name, "': dimension ", d,
                  " is not fixed; shared-memory clients need fixed per-row shapes");
    feeds[i] = TensorView{io.dtype, s, nullptr};
  }
  std::vector<int> axes = OutputAxes(feeds);
  *at_one_row = session_.OutputShapes(layout_.Probe(feeds, 1));
  return axes;
}

}  // namespace kaiwu
