#include "backends/linalg_index.h"

namespace kaiwu {

std::vector<int64_t> BroadcastStrides(const Shape& shape, const Shape& out) {
  std::vector<int64_t> strides(out.size(), 0);
  int64_t s = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    size_t src = shape.size() - 1 - i, dst = out.size() - 1 - i;
    strides[dst] = shape[src] == 1 ? 0 : s;
    s *= shape[src];
  }
  return strides;
}

void BatchMatrixOffsets(const Shape& a_batch, const Shape& b_batch, const Shape& batch,
                        int64_t a_mat, int64_t b_mat, std::vector<int64_t>* a_off,
                        std::vector<int64_t>* b_off) {
  const int64_t count = NumElements(batch);
  const std::vector<int64_t> sa = BroadcastStrides(a_batch, batch);
  const std::vector<int64_t> sb = BroadcastStrides(b_batch, batch);
  a_off->assign(count, 0);
  b_off->assign(count, 0);
  for (int64_t i = 0; i < count; ++i) {
    int64_t rem = i, oa = 0, ob = 0;
    for (int d = static_cast<int>(batch.size()) - 1; d >= 0; --d) {
      const int64_t idx = rem % batch[d];
      rem /= batch[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    (*a_off)[i] = oa * a_mat;
    (*b_off)[i] = ob * b_mat;
  }
}

}  // namespace kaiwu
