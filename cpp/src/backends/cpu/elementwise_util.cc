#include "backends/cpu/elementwise_util.h"

namespace kaiwu {
namespace cpu {

BroadcastPlan MakeBroadcastPlan(const PrepareContext& ctx, const std::vector<Shape>& inputs,
                                const Shape& out) {
  const int n = static_cast<int>(inputs.size());
  if (n < 1 || n > kMaxBroadcastInputs) ctx.Error("internal: broadcast plan over ", n, " inputs");
  BroadcastPlan p;
  p.num_inputs = n;
  p.total = NumElements(out);
  const size_t rank = out.size();

  // Each input's dims aligned to the output's rank.
  std::vector<Shape> aligned(n, Shape(rank, 1));
  for (int k = 0; k < n; ++k) {
    const Shape& s = inputs[k];
    bool ok = s.size() <= rank;
    for (size_t i = 0; ok && i < s.size(); ++i) {
      int64_t od = out[rank - s.size() + i];
      ok = s[i] == od || s[i] == 1;
      aligned[k][rank - s.size() + i] = s[i];
    }
    if (!ok)
      ctx.Error("input shape ", ShapeToString(s), " does not broadcast to ", ShapeToString(out));
  }
  if (p.total == 0) {
    p.rank = 1;
    p.dims[0] = 0;
    return p;
  }

  // Merge neighbouring dims whose broadcast pattern (which inputs repeat) matches.
  std::vector<int64_t> dims;
  std::vector<std::vector<int64_t>> in_dims(n);
  unsigned last_pattern = 0;
  for (size_t i = 0; i < rank; ++i) {
    if (out[i] == 1) continue;
    unsigned pattern = 0;
    for (int k = 0; k < n; ++k)
      if (aligned[k][i] == 1) pattern |= 1u << k;
    if (!dims.empty() && pattern == last_pattern) {
      dims.back() *= out[i];
      for (int k = 0; k < n; ++k) in_dims[k].back() *= aligned[k][i];
    } else {
      dims.push_back(out[i]);
      for (int k = 0; k < n; ++k) in_dims[k].push_back(aligned[k][i]);
    }
    last_pattern = pattern;
  }
  if (dims.empty()) {
    dims.push_back(1);
    for (int k = 0; k < n; ++k) in_dims[k].push_back(1);
  }
  if (dims.size() > static_cast<size_t>(kMaxBroadcastDims))
    ctx.Error("broadcasting over more than ", kMaxBroadcastDims, " distinct dimensions");

  p.rank = static_cast<int>(dims.size());
  for (int d = 0; d < p.rank; ++d) p.dims[d] = dims[d];
  for (int k = 0; k < n; ++k) {
    int64_t stride = 1;
    for (int d = p.rank - 1; d >= 0; --d) {
      bool repeated = in_dims[k][d] == 1 && dims[d] != 1;
      p.strides[k][d] = repeated ? 0 : stride;
      stride *= in_dims[k][d];
    }
  }
  return p;
}

}  // namespace cpu
}  // namespace kaiwu
