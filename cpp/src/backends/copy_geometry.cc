// Host-side geometry of the strided copies (see copy_geometry.h).
#include "backends/copy_geometry.h"

namespace kaiwu {

void MergeCopyDims(const Shape& out_shape, const std::vector<int64_t>& in_strides,
                   std::vector<int64_t>* shape, std::vector<int64_t>* strides) {
  shape->clear();
  strides->clear();
  for (size_t d = 0; d < out_shape.size(); ++d) {
    if (out_shape[d] == 1) continue;  // size-1 dims never move the source
    if (!shape->empty() && strides->back() == in_strides[d] * out_shape[d]) {
      shape->back() *= out_shape[d];  // contiguous with the previous dim: merge
      strides->back() = in_strides[d];
    } else {
      shape->push_back(out_shape[d]);
      strides->push_back(in_strides[d]);
    }
  }
  if (shape->empty()) {
    shape->push_back(1);
    strides->push_back(1);
  }
}

CopyView TransposeCopyView(const Shape& in, const TransposeParams& p) {
  const std::vector<int64_t> in_strides = Strides(in);
  const size_t rank = p.perm.size();
  CopyView v;
  v.shape.resize(rank);
  v.strides.resize(rank);
  for (size_t d = 0; d < rank; ++d) {
    v.shape[d] = in[p.perm[d]];
    v.strides[d] = in_strides[p.perm[d]];
  }
  return v;
}

CopyView SliceCopyView(const Shape& in, const SliceParams& p, const Shape& out) {
  const std::vector<int64_t> in_strides = Strides(in);
  CopyView v;
  v.shape = out;
  v.strides.resize(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    v.strides[d] = in_strides[d] * p.steps[d];
    v.offset += p.starts[d] * in_strides[d];
  }
  if (NumElements(out) == 0) v.offset = 0;
  return v;
}

CopyView ExpandCopyView(const Shape& in, const Shape& out) {
  const size_t lead = out.size() - in.size();
  const std::vector<int64_t> in_strides = Strides(in);
  CopyView v;
  v.shape = out;
  v.strides.assign(out.size(), 0);
  for (size_t d = lead; d < out.size(); ++d)
    v.strides[d] = in[d - lead] == 1 ? 0 : in_strides[d - lead];
  return v;
}

CopyView TileCopyView(const Shape& in, const TileParams& p) {
  const std::vector<int64_t> in_strides = Strides(in);
  CopyView v;
  for (size_t d = 0; d < in.size(); ++d) {
    v.shape.push_back(p.repeats[d]);
    v.strides.push_back(0);
    v.shape.push_back(in[d]);
    v.strides.push_back(in_strides[d]);
  }
  return v;
}

}  // namespace kaiwu
