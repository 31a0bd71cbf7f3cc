#include "runtime/server_layout.h"

#include <map>
#include <set>

#include "core/memory_budget.h"

namespace kaiwu {

int64_t ProdDims(const Shape& s, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t i = begin; i < end; ++i) p *= s[i];
  return p;
}

Shape StateSpec::AtRows(int64_t rows) const {
  Shape s = dims;
  s[in_axis] = rows;
  return s;
}

ServerLayout ServerLayout::Build(const std::vector<IOInfo>& ins, const std::vector<IOInfo>& outs,
                                 const ServerOptions& opt) {
  ServerLayout l;
  l.num_inputs = ins.size();
  std::map<std::string, int> in_idx, out_idx;
  for (size_t i = 0; i < ins.size(); ++i) in_idx[ins[i].name] = static_cast<int>(i);
  for (size_t i = 0; i < outs.size(); ++i) out_idx[outs[i].name] = static_cast<int>(i);
  std::set<std::string> state_inputs;
  for (const auto& [in, out] : opt.state) {
    KAIWU_CHECK(in_idx.count(in), StatusCode::kInput, "state: '", in, "' is not a model input");
    KAIWU_CHECK(out_idx.count(out), StatusCode::kInput, "state: '", out, "' is not a model output");
    KAIWU_CHECK(!state_inputs.count(in), StatusCode::kInput, "state: '", in, "' given twice");
    state_inputs.insert(in);
  }
  for (const auto& [name, axis] : opt.state_batch_axis)
    KAIWU_CHECK(state_inputs.count(name), StatusCode::kInput, "state_batch_axis: '", name,
                "' is not a state input");
  for (size_t i = 0; i < ins.size(); ++i) {
    if (state_inputs.count(ins[i].name)) continue;
    l.feed_inputs.push_back(ins[i]);
    l.feed_index.push_back(static_cast<int>(i));
  }
  KAIWU_CHECK(!l.feed_inputs.empty(), StatusCode::kInput,
              "the model needs at least one input that is not recurrent state");
  std::string batch_symbol;
  const IOInfo& obs = l.feed_inputs[0];
  if (obs.has_shape && !obs.dims.empty() && obs.dims[0] < 0) batch_symbol = obs.symbols[0];

  l.out_state.assign(outs.size(), -1);
  for (const auto& [in, out] : opt.state) {
    StateSpec s;
    s.in_name = in;
    s.out_name = out;
    s.in_index = in_idx[in];
    s.out_index = out_idx[out];
    const IOInfo& io = ins[s.in_index];
    s.dtype = io.dtype;
    KAIWU_CHECK(io.has_shape, StatusCode::kInput, "state input '", in,
                "' has no declared shape; the server needs its non-batch dims");
    KAIWU_CHECK(outs[s.out_index].dtype == io.dtype, StatusCode::kInput, "state '", in,
                "' and output '", out, "' have different dtypes");
    int axis = -1;
    auto ov = opt.state_batch_axis.find(in);
    if (ov != opt.state_batch_axis.end()) {
      axis = ov->second < 0 ? ov->second + static_cast<int>(io.dims.size()) : ov->second;
      KAIWU_CHECK(axis >= 0 && axis < static_cast<int>(io.dims.size()), StatusCode::kInput,
                  "state_batch_axis for '", in, "' is out of range for rank ", io.dims.size());
    } else {
      if (!batch_symbol.empty())
        for (size_t d = 0; d < io.dims.size(); ++d)
          if (io.symbols[d] == batch_symbol) axis = static_cast<int>(d);
      if (axis < 0) axis = 0;
    }
    KAIWU_CHECK(!io.dims.empty(), StatusCode::kInput, "state input '", in, "' is a scalar");
    s.in_axis = axis;
    s.out_axis = axis;
    s.dims = io.dims;
    for (size_t d = 0; d < io.dims.size(); ++d) {
      if (static_cast<int>(d) == axis) continue;
      KAIWU_CHECK(io.dims[d] >= 0, StatusCode::kInput, "state input '", in, "': dimension ", d,
                  " is not fixed; only the batch axis (", axis, ") may vary");
      s.per_row.push_back(io.dims[d]);
    }
    Shape full = io.dims;
    full[axis] = opt.max_batch > 0 ? opt.max_batch : 1;
    uint64_t batch_bytes = 0;
    const uint64_t budget = CurrentMemoryBudget();
    if (!TensorBytes(full, io.dtype, &batch_bytes) || batch_bytes > budget)
      Fail(StatusCode::kInput, "state input '", in, "': a batch of ", full[axis], " rows of shape ",
           ShapeToString(full), " does not fit in ", BudgetText(budget));
    full[axis] = 1;
    s.outer = ProdDims(full, 0, axis);
    s.inner = ProdDims(full, axis + 1, full.size());
    l.out_state[s.out_index] = static_cast<int>(l.state.size());
    l.state.push_back(s);
  }
  return l;
}

int64_t ServerLayout::CheckFeeds(const ServerRequest& r, int max_batch) const {
  KAIWU_CHECK(r.feeds.size() == feed_inputs.size(), StatusCode::kInput, "expected ",
              feed_inputs.size(), " feeds, got ", r.feeds.size());
  int64_t rows = -1;
  for (size_t i = 0; i < r.feeds.size(); ++i) {
    const TensorView& f = r.feeds[i];
    const IOInfo& io = feed_inputs[i];
    KAIWU_CHECK(f.dtype == io.dtype, StatusCode::kInput, "input '", io.name, "': expected dtype ",
                DTypeName(io.dtype), ", got ", DTypeName(f.dtype));
    KAIWU_CHECK(!f.shape.empty(), StatusCode::kInput, "input '", io.name,
                "': expected rows on axis 0, got a scalar");
    if (io.has_shape)
      KAIWU_CHECK(f.shape.size() == io.dims.size(), StatusCode::kInput, "input '", io.name,
                  "': expected rank ", io.dims.size(), ", got shape ", ShapeToString(f.shape));
    if (rows < 0) rows = f.shape[0];
    KAIWU_CHECK(f.shape[0] == rows, StatusCode::kInput, "input '", io.name, "' has ", f.shape[0],
                " rows, but input '", feed_inputs[0].name, "' has ", rows);
  }
  KAIWU_CHECK(rows >= 1, StatusCode::kInput, "a request needs at least one row");
  KAIWU_CHECK(rows <= max_batch, StatusCode::kInput, "a request has ", rows,
              " rows, more than max_batch (", max_batch, ")");
  KAIWU_CHECK(r.done.size() <= 1 || static_cast<int64_t>(r.done.size()) == rows, StatusCode::kInput,
              "done must be one flag or one per row (", rows, "), got ", r.done.size());
  return rows;
}

std::vector<TensorView> ServerLayout::Probe(const std::vector<TensorView>& feeds,
                                            int64_t rows) const {
  std::vector<TensorView> p(num_inputs);
  for (size_t i = 0; i < feed_index.size(); ++i) {
    Shape s = feeds[i].shape;
    s[0] = rows;
    p[feed_index[i]] = TensorView{feeds[i].dtype, std::move(s), nullptr};
  }
  for (const StateSpec& st : state) p[st.in_index] = TensorView{st.dtype, st.AtRows(rows), nullptr};
  return p;
}

std::vector<int> ServerLayout::BatchAxes(const std::vector<TensorView>& a,
                                         const std::vector<TensorView>& b) const {
  std::vector<int> axes(a.size(), -1);
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k].shape.size() != b[k].shape.size()) continue;
    for (size_t d = 0; d < a[k].shape.size(); ++d)
      if (a[k].shape[d] == 1 && b[k].shape[d] == 2) {
        axes[k] = static_cast<int>(d);
        break;
      }
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    const int si = out_state[k];
    if (si < 0) continue;
    const StateSpec& s = state[si];
    const Shape want = s.AtRows(1);
    KAIWU_CHECK(axes[k] == s.in_axis && a[k].shape == want, StatusCode::kInput, "state output '",
                s.out_name, "' (shape ", ShapeToString(a[k].shape), " at batch 1, batch axis ",
                axes[k], ") does not match state input '", s.in_name, "' (", ShapeToString(want),
                ", batch axis ", s.in_axis, ")");
  }
  return axes;
}

bool ServerLayout::FixedRowShapes() const {
  for (const IOInfo& io : feed_inputs) {
    if (!io.has_shape || io.dims.empty()) return false;
    for (size_t d = 1; d < io.dims.size(); ++d)
      if (io.dims[d] < 0) return false;
  }
  for (const StateSpec& st : state) {
    if (st.dims.size() <= static_cast<size_t>(st.in_axis)) return false;
    for (size_t d = 0; d < st.dims.size(); ++d)
      if (static_cast<int>(d) != st.in_axis && st.dims[d] < 0) return false;
  }
  return true;
}

std::vector<int64_t> RowShapeKey(const std::vector<TensorView>& feeds) {
  std::vector<int64_t> key;
  for (const auto& f : feeds) {
    key.insert(key.end(), f.shape.begin() + 1, f.shape.end());
    key.push_back(-1);
  }
  return key;
}

std::vector<int64_t> FeedShapeKey(const std::vector<TensorView>& feeds) {
  std::vector<int64_t> key;
  for (const auto& f : feeds) {
    key.push_back(static_cast<int64_t>(f.dtype));
    key.push_back(static_cast<int64_t>(f.shape.size()));
    key.insert(key.end(), f.shape.begin(), f.shape.end());
  }
  return key;
}

}  // namespace kaiwu
