// ArgMax and ArgMin (axis, keepdims, select_last_index) -> int64 indices.
// The input is viewed as [outer, n, inner]; with inner > 1 the scan runs on
// contiguous inner vectors (best values kept in scratch), in column chunks.
#include <algorithm>
#include <cstring>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/reduce_family.h"
#include "ops/reduce.h"

namespace kaiwu {
namespace cpu {
namespace {

constexpr int64_t kColumnChunk = 256;

class ArgReduceKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const ArgReduceParams& p = ctx.Params<ArgReduceParams>();
    is_max_ = p.is_max;
    last_ = p.select_last_index;
    dtype_ = ctx.in(0).dtype;
    const Shape& shape = ctx.in(0).shape;
    const int64_t rank = static_cast<int64_t>(shape.size());
    outer_ = inner_ = 1;
    n_ = shape[p.axis];
    for (int64_t d = 0; d < rank; ++d) {
      if (d < p.axis) outer_ *= shape[d];
      if (d > p.axis) inner_ *= shape[d];
    }
    if (inner_ > 1) ctx.scratch_bytes = static_cast<size_t>(outer_ * inner_) * DTypeSize(dtype_);
  }

  void Run(const KernelIO& io) const override {
    KAIWU_DISPATCH_ALL(dtype_, RunT<T>(io));
  }

 private:
  // True when v should replace the current best b.
  template <typename T>
  bool Better(T v, T b) const {
    if (is_max_) return last_ ? v >= b : v > b;
    return last_ ? v <= b : v < b;
  }

  template <typename T>
  void RunT(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    int64_t* y = static_cast<int64_t*>(io.outputs[0]);
    if (outer_ * inner_ == 0) return;
    if (inner_ == 1) {
      io.pool->ParallelFor(outer_, 2.0 * n_, [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          const T* row = x + o * n_;
          T best = row[0];
          int64_t idx = 0;
          for (int64_t i = 1; i < n_; ++i)
            if (Better(row[i], best)) { best = row[i]; idx = i; }
          y[o] = idx;
        }
      });
      return;
    }
    const int64_t chunks = (inner_ + kColumnChunk - 1) / kColumnChunk;
    T* best_all = static_cast<T*>(io.scratch);
    io.pool->ParallelFor(outer_ * chunks, 2.0 * n_ * std::min(inner_, kColumnChunk),
                         [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        int64_t o = item / chunks, c0 = (item % chunks) * kColumnChunk;
        int64_t len = std::min(kColumnChunk, inner_ - c0);
        const T* base = x + o * n_ * inner_ + c0;
        T* best = best_all + o * inner_ + c0;
        int64_t* idx = y + o * inner_ + c0;
        std::memcpy(best, base, static_cast<size_t>(len) * sizeof(T));
        std::fill(idx, idx + len, int64_t{0});
        for (int64_t i = 1; i < n_; ++i) {
          const T* xi = base + i * inner_;
          for (int64_t j = 0; j < len; ++j) {
            bool take = Better(xi[j], best[j]);
            best[j] = take ? xi[j] : best[j];
            idx[j] = take ? i : idx[j];
          }
        }
      }
    });
  }

  bool is_max_ = true;
  bool last_ = false;
  DType dtype_ = DType::kUndefined;
  int64_t outer_ = 1, n_ = 1, inner_ = 1;
};

}  // namespace

void RegisterArgReduceKernels(KernelRegistry& r) {
  for (OpId op : {OpId::kArgMax, OpId::kArgMin})
    r.Register(op, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kInt8,
                    DType::kUInt8, DType::kInt16},
               &MakeKernel<ArgReduceKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
