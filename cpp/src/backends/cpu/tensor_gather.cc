// Gather (slices along an axis; axis 0 is an embedding lookup of whole rows)
// and GatherElements (one element per index). Indices are validated on the
// calling thread before any copy: an out-of-range index throws kRuntime.
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"
#include "ops/tensor.h"

namespace kaiwu {
namespace cpu {
namespace {

template <typename I>
void CheckIndices(const I* idx, int64_t n, int64_t dim, const std::string& desc) {
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < -dim || idx[i] >= dim)
      Fail(StatusCode::kRuntime, desc, ": index ", static_cast<int64_t>(idx[i]), " (at position ",
           i, ") is out of range for an axis of size ", dim);
  }
}

// Gather with one element per index: out[o, j] = data[o, idx[j]] for outer
// rows [b, e) and indices [jb, je), with elements of type U.
template <typename U, typename I>
void GatherElems(const KernelIO& io, int64_t b, int64_t e, int64_t jb, int64_t je, int64_t count,
                 int64_t dim) {
  const U* src = static_cast<const U*>(io.inputs[0]);
  const I* idx = static_cast<const I*>(io.inputs[1]);
  U* dst = static_cast<U*>(io.outputs[0]);
  for (int64_t o = b; o < e; ++o) {
    const U* s = src + o * dim;
    U* d = dst + o * count;
    for (int64_t j = jb; j < je; ++j) {
      int64_t k = idx[j] < 0 ? idx[j] + dim : idx[j];
      d[j] = s[k];
    }
  }
}

// Gather: out[outer, j, inner] = data[outer, indices[j], inner].
class GatherKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.inputs[0];
    const TensorInfo& ind = ctx.inputs[1];
    const int64_t axis = ctx.Params<AxisParams>().axis;
    outer_ = NumElements(Shape(x.shape.begin(), x.shape.begin() + axis));
    inner_ = NumElements(Shape(x.shape.begin() + axis + 1, x.shape.end()));
    dim_ = x.shape[axis];
    count_ = ind.size();
    elem_ = DTypeSize(x.dtype);
    index64_ = ind.dtype == DType::kInt64;
    desc_ = ctx.node.Describe();
    view_bytes_ = ctx.alias[0] == 0 && !ctx.alias_offset.empty()
                      ? ctx.alias_offset[0] * static_cast<int64_t>(elem_) : -1;
  }

  void Run(const KernelIO& io) const override {
    // The planner made the output a view of the data (one index known when planned).
    if (view_bytes_ >= 0 && io.outputs[0] == static_cast<const char*>(io.inputs[0]) + view_bytes_) return;
    if (index64_) {
      RunTyped(io, static_cast<const int64_t*>(io.inputs[1]));
    } else {
      RunTyped(io, static_cast<const int32_t*>(io.inputs[1]));
    }
  }

 private:
  template <typename I>
  void RunTyped(const KernelIO& io, const I* idx) const {
    CheckIndices(idx, count_, dim_, desc_);
    const char* src = static_cast<const char*>(io.inputs[0]);
    char* dst = static_cast<char*>(io.outputs[0]);
    if (outer_ * count_ * inner_ == 0) return;
    if (inner_ == 1) {  // gather on the last axis: element copies, split over
      // the outer rows, or over the indices for a 1-D gather
      bool by_rows = outer_ > 1;
      io.pool->ParallelFor(by_rows ? outer_ : count_, by_rows ? 2.0 * count_ : 2.0,
                           [this, &io](int64_t b, int64_t e) {
        int64_t ob = outer_ > 1 ? b : 0, oe = outer_ > 1 ? e : 1;
        int64_t jb = outer_ > 1 ? 0 : b, je = outer_ > 1 ? count_ : e;
        switch (elem_) {
          case 1: GatherElems<uint8_t, I>(io, ob, oe, jb, je, count_, dim_); break;
          case 2: GatherElems<uint16_t, I>(io, ob, oe, jb, je, count_, dim_); break;
          case 4: GatherElems<uint32_t, I>(io, ob, oe, jb, je, count_, dim_); break;
          default: GatherElems<uint64_t, I>(io, ob, oe, jb, je, count_, dim_); break;
        }
      });
      return;
    }
    // One contiguous block of inner_ elements per (outer, index) pair; axis 0
    // is the embedding-lookup case (outer_ == 1, one row per index).
    struct Args {
      const char* src;
      char* dst;
      const I* idx;
    } a{src, dst, idx};
    io.pool->ParallelFor(outer_ * count_, static_cast<double>(inner_) + 4.0,
                         [this, &a](int64_t b, int64_t e) {
      const size_t row = static_cast<size_t>(inner_) * elem_;
      for (int64_t item = b; item < e; ++item) {
        int64_t o = item / count_, j = item % count_;
        int64_t k = a.idx[j] < 0 ? a.idx[j] + dim_ : a.idx[j];
        std::memcpy(a.dst + item * row, a.src + (o * dim_ + k) * row, row);
      }
    });
  }

  int64_t outer_ = 1, inner_ = 1, dim_ = 0, count_ = 0, view_bytes_ = -1;
  size_t elem_ = 4;
  bool index64_ = true;
  std::string desc_;
};

// GatherElements: out[i..] = data[i.. with i_axis replaced by indices[i..]].
class GatherElementsKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.inputs[0];
    const TensorInfo& ind = ctx.inputs[1];
    axis_ = static_cast<int>(ctx.Params<AxisParams>().axis);
    shape_ = ind.shape;
    data_strides_ = Strides(x.shape);
    dim_ = x.shape[axis_];
    count_ = ind.size();
    elem_ = DTypeSize(x.dtype);
    index64_ = ind.dtype == DType::kInt64;
    desc_ = ctx.node.Describe();
  }

  void Run(const KernelIO& io) const override {
    switch (elem_) {
      case 1: Dispatch<uint8_t>(io); break;
      case 2: Dispatch<uint16_t>(io); break;
      case 4: Dispatch<uint32_t>(io); break;
      default: Dispatch<uint64_t>(io); break;
    }
  }

 private:
  template <typename U>
  void Dispatch(const KernelIO& io) const {
    if (index64_) {
      RunTyped<U, int64_t>(io);
    } else {
      RunTyped<U, int32_t>(io);
    }
  }

  template <typename U, typename I>
  void RunTyped(const KernelIO& io) const {
    CheckIndices(static_cast<const I*>(io.inputs[1]), count_, dim_, desc_);
    if (count_ == 0) return;
    const int r = static_cast<int>(shape_.size());
    const int64_t last = shape_[r - 1];
    io.pool->ParallelFor(count_ / last, static_cast<double>(last) * 2 + 8,
                         [this, &io](int64_t b, int64_t e) {
      const U* src = static_cast<const U*>(io.inputs[0]);
      const I* idx = static_cast<const I*>(io.inputs[1]);
      U* dst = static_cast<U*>(io.outputs[0]);
      const int r = static_cast<int>(shape_.size());
      const int64_t last = shape_[r - 1];
      const int64_t axis_stride = data_strides_[axis_];
      const int64_t last_stride = axis_ == r - 1 ? 0 : data_strides_[r - 1];
      for (int64_t row = b; row < e; ++row) {
        int64_t rem = row, base = 0;  // data offset of the row, axis coordinate excluded
        for (int d = r - 2; d >= 0; --d) {
          int64_t p = rem % shape_[d];
          rem /= shape_[d];
          if (d != axis_) base += p * data_strides_[d];
        }
        const I* ir = idx + row * last;
        U* out = dst + row * last;
        for (int64_t j = 0; j < last; ++j) {
          int64_t k = ir[j] < 0 ? ir[j] + dim_ : ir[j];
          out[j] = src[base + j * last_stride + k * axis_stride];
        }
      }
    });
  }

  Shape shape_;                        // indices (= output) shape
  std::vector<int64_t> data_strides_;
  int axis_ = 0;
  int64_t dim_ = 0, count_ = 0;
  size_t elem_ = 4;
  bool index64_ = true;
  std::string desc_;
};

}  // namespace

void RegisterTensorGatherKernels(KernelRegistry& r) {
  r.Register(OpId::kGather, {KAIWU_ALL_DTYPES}, &MakeKernel<GatherKernel>);
  r.Register(OpId::kGatherElements, {KAIWU_ALL_DTYPES}, &MakeKernel<GatherElementsKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
