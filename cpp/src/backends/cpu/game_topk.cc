// TopK(X, K; axis, largest, sorted) -> values, int64 indices. Each line along
// the axis is copied into per-chunk scratch and partially sorted by (value,
// index): ties keep the lower index first, as ONNX specifies. NaN ranks above
// every number (first for largest, last for smallest). Results are always
// sorted, which sorted=0 (unspecified order) also allows.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backends/cpu/game_util.h"

namespace kaiwu {
namespace cpu {
namespace {

// a ranks before b in ascending numeric order, NaN last.
template <typename T>
inline bool Less(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
  }
  return a < b;
}

constexpr int64_t kInsertionK = 32;  // up to this K: one scan with sorted insertion

class TopKKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TopKParams& p = ctx.Params<TopKParams>();
    const TensorInfo& x = ctx.in(0);
    dim_ = x.shape[p.axis];
    k_ = p.k;
    largest_ = p.largest;
    outer_ = NumElements(Shape(x.shape.begin(), x.shape.begin() + p.axis));
    inner_ = NumElements(Shape(x.shape.begin() + p.axis + 1, x.shape.end()));
    dtype_ = x.dtype;
    lines_ = outer_ * inner_;
    chunks_ = std::max<int64_t>(1, std::min<int64_t>(lines_, ctx.num_threads));
    ctx.scratch_bytes = static_cast<size_t>(chunks_ * dim_) * 2 * sizeof(int64_t);  // Entry<T>
  }

  void Run(const KernelIO& io) const override {
    if (lines_ == 0 || k_ == 0) return;
    switch (dtype_) {
      case DType::kFloat32: RunTyped<float>(io); break;
      case DType::kFloat64: RunTyped<double>(io); break;
      case DType::kInt64: RunTyped<int64_t>(io); break;
      case DType::kInt32: RunTyped<int32_t>(io); break;
      case DType::kInt8: RunTyped<int8_t>(io); break;
      case DType::kUInt8: RunTyped<uint8_t>(io); break;
      default: RunTyped<int16_t>(io); break;
    }
  }

 private:
  template <typename T>
  struct Entry {
    T v;
    int64_t i;
  };

  template <typename T>
  void RunTyped(const KernelIO& io) const {
    const double cost = static_cast<double>(lines_ * dim_) *
                        (2.0 + std::log2(static_cast<double>(k_) + 1)) / chunks_;
    io.pool->ParallelFor(chunks_, cost, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        Entry<T>* entries = static_cast<Entry<T>*>(io.scratch) + c * dim_;
        for (int64_t line = lines_ * c / chunks_; line < lines_ * (c + 1) / chunks_; ++line) {
          if (largest_) {
            Line<T, true>(io, line, entries);
          } else {
            Line<T, false>(io, line, entries);
          }
        }
      }
    });
  }

  template <typename T, bool kLargest>
  void Line(const KernelIO& io, int64_t line, Entry<T>* e) const {
    const int64_t o = line / inner_, i = line % inner_;
    const T* x = static_cast<const T*>(io.inputs[0]) + o * dim_ * inner_ + i;
    // a ranks strictly before b (ties are decided by index).
    auto better = [](T a, T b) { return kLargest ? Less(b, a) : Less(a, b); };
    if (k_ <= kInsertionK) {
      // Keep the best k seen so far, sorted, in e[0, n): a scan in index order
      // inserts a value after every kept value not worse than it.
      int64_t n = 0;
      for (int64_t j = 0; j < dim_; ++j) {
        const T v = x[j * inner_];
        if (n == k_ && !better(v, e[n - 1].v)) continue;
        int64_t p = n < k_ ? n++ : n - 1;
        for (; p > 0 && better(v, e[p - 1].v); --p) e[p] = e[p - 1];
        e[p] = {v, j};
      }
    } else {
      for (int64_t j = 0; j < dim_; ++j) e[j] = {x[j * inner_], j};
      auto before = [&](const Entry<T>& a, const Entry<T>& b) {
        if (better(a.v, b.v)) return true;
        if (better(b.v, a.v)) return false;
        return a.i < b.i;  // equal (or both NaN): lower index first
      };
      if (k_ < dim_) std::nth_element(e, e + k_ - 1, e + dim_, before);
      std::sort(e, e + k_, before);
    }
    T* y = static_cast<T*>(io.outputs[0]) + o * k_ * inner_ + i;
    int64_t* yi_base = static_cast<int64_t*>(io.outputs[1]);  // null when not requested
    int64_t* yi = yi_base ? yi_base + o * k_ * inner_ + i : nullptr;
    for (int64_t j = 0; j < k_; ++j) {
      y[j * inner_] = e[j].v;
      if (yi) yi[j * inner_] = e[j].i;
    }
  }

  int64_t dim_ = 0, k_ = 0, outer_ = 1, inner_ = 1, lines_ = 0, chunks_ = 1;
  bool largest_ = true;
  DType dtype_ = DType::kFloat32;
};

}  // namespace

void RegisterGameTopKKernels(KernelRegistry& r) {
  r.Register(OpId::kTopK,
             {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kInt32, DType::kInt8,
              DType::kUInt8, DType::kInt16},
             &MakeKernel<TopKKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
