// Concat and Split: along `axis` every tensor is (outer, rows_i * inner);
// both copy one contiguous block per (outer index, tensor).
#include <cstring>
#include <numeric>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"

namespace kaiwu {
namespace cpu {
namespace {

// outer = prod(shape[:axis]), inner = prod(shape[axis+1:]).
void OuterInner(const Shape& shape, int64_t axis, int64_t* outer, int64_t* inner) {
  *outer = 1;
  *inner = 1;
  for (int64_t d = 0; d < static_cast<int64_t>(shape.size()); ++d) {
    if (d < axis) *outer *= shape[d];
    if (d > axis) *inner *= shape[d];
  }
}

class ConcatKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    if (ctx.num_inputs() == 0) ctx.Error("needs at least one input");
    const TensorInfo& first = ctx.in(0);
    if (first.rank() == 0) ctx.Error("cannot concatenate scalars");
    if (!ctx.node.Has("axis")) ctx.Error("attribute 'axis' is required");
    int64_t axis = NormalizeAxis(ctx, ctx.node.GetInt("axis", 0), first.rank());
    Shape out = first.shape;
    out[axis] = 0;
    size_t elem = DTypeSize(first.dtype);
    row_bytes_.clear();
    for (int i = 0; i < ctx.num_inputs(); ++i) {
      const TensorInfo& t = ctx.in(i);
      if (t.dtype != first.dtype)
        ctx.Error("input ", i, " has dtype ", DTypeName(t.dtype), ", input 0 has ",
                  DTypeName(first.dtype));
      bool match = t.rank() == first.rank();
      for (int d = 0; match && d < t.rank(); ++d) match = d == axis || t.shape[d] == first.shape[d];
      if (!match)
        ctx.Error("input ", i, " has shape ", ShapeToString(t.shape), ", which does not match ",
                  ShapeToString(first.shape), " outside axis ", axis);
      out[axis] += t.shape[axis];
      int64_t outer, inner;
      OuterInner(t.shape, axis, &outer, &inner);
      row_bytes_.push_back(static_cast<size_t>(t.shape[axis] * inner) * elem);
    }
    OuterInner(out, axis, &outer_, &out_row_bytes_);
    out_row_bytes_ = static_cast<int64_t>(out[axis] * out_row_bytes_ * elem);
    ctx.SetOutput(0, first.dtype, std::move(out));
  }

  void Run(const KernelIO& io) const override {
    char* out = static_cast<char*>(io.outputs[0]);
    if (outer_ == 1) {  // axis 0 (or leading ones): one block per input
      size_t pos = 0;
      for (size_t i = 0; i < row_bytes_.size(); ++i) {
        ParallelCopy(out + pos, io.inputs[i], row_bytes_[i], io.pool);
        pos += row_bytes_[i];
      }
      return;
    }
    io.pool->ParallelFor(outer_, out_row_bytes_ / 4.0 + 4.0 * row_bytes_.size(),
                         [this, &io](int64_t b, int64_t e) {
      char* out = static_cast<char*>(io.outputs[0]);
      for (int64_t o = b; o < e; ++o) {
        char* dst = out + o * out_row_bytes_;
        for (size_t i = 0; i < row_bytes_.size(); ++i) {
          std::memcpy(dst, static_cast<const char*>(io.inputs[i]) + o * row_bytes_[i],
                      row_bytes_[i]);
          dst += row_bytes_[i];
        }
      }
    });
  }

 private:
  std::vector<size_t> row_bytes_;  // per input: bytes per outer index
  int64_t outer_ = 1;
  int64_t out_row_bytes_ = 0;
};

// Split: sizes from input 1 (opset 13+) or the `split` attribute (older), else
// num_outputs (opset 18+, last chunk smaller) or an equal split.
class SplitKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.in(0);
    if (x.rank() == 0) ctx.Error("cannot split a scalar");
    int64_t axis = NormalizeAxis(ctx, ctx.node.GetInt("axis", 0), x.rank());
    int64_t n = static_cast<int64_t>(ctx.node.outputs.size());
    int64_t dim = x.shape[axis];
    std::vector<int64_t> sizes;
    if (ctx.node.opset >= 13 && ctx.HasInput(1)) {
      sizes = ctx.ConstInts(1);
    } else if (ctx.node.opset < 13 && ctx.node.Has("split")) {
      sizes = ctx.node.GetInts("split");
    } else if (ctx.node.Has("num_outputs")) {
      int64_t k = ctx.node.GetInt("num_outputs", n);
      if (k != n) ctx.Error("num_outputs is ", k, " but the node has ", n, " outputs");
      int64_t chunk = (dim + n - 1) / n;
      if (chunk * (n - 1) > dim)
        ctx.Error("cannot split a dim of ", dim, " into ", n, " chunks of ", chunk);
      sizes.assign(n, chunk);
      sizes.back() = dim - chunk * (n - 1);
    } else {
      if (dim % n != 0) ctx.Error("cannot split a dim of ", dim, " into ", n, " equal parts");
      sizes.assign(n, dim / n);
    }
    if (static_cast<int64_t>(sizes.size()) != n)
      ctx.Error("split has ", sizes.size(), " entries but the node has ", n, " outputs");
    int64_t sum = 0;
    for (int64_t s : sizes) {
      if (s < 0) ctx.Error("split sizes must be non-negative");
      sum += s;
    }
    if (sum != dim) ctx.Error("split sizes sum to ", sum, " but axis ", axis, " has size ", dim);
    int64_t inner;
    OuterInner(x.shape, axis, &outer_, &inner);
    size_t elem = DTypeSize(x.dtype);
    in_row_bytes_ = static_cast<size_t>(dim * inner) * elem;
    row_bytes_.clear();
    for (int64_t i = 0; i < n; ++i) {
      row_bytes_.push_back(static_cast<size_t>(sizes[i] * inner) * elem);
      Shape out = x.shape;
      out[axis] = sizes[i];
      ctx.SetOutput(static_cast<int>(i), x.dtype, std::move(out));
    }
  }

  void Run(const KernelIO& io) const override {
    const char* in = static_cast<const char*>(io.inputs[0]);
    if (outer_ == 1) {
      size_t pos = 0;
      for (size_t i = 0; i < row_bytes_.size(); ++i) {
        if (io.outputs[i]) ParallelCopy(io.outputs[i], in + pos, row_bytes_[i], io.pool);
        pos += row_bytes_[i];
      }
      return;
    }
    io.pool->ParallelFor(outer_, in_row_bytes_ / 4.0 + 4.0 * row_bytes_.size(),
                         [this, &io](int64_t b, int64_t e) {
      const char* in = static_cast<const char*>(io.inputs[0]);
      for (int64_t o = b; o < e; ++o) {
        const char* src = in + o * in_row_bytes_;
        for (size_t i = 0; i < row_bytes_.size(); ++i) {
          if (io.outputs[i])
            std::memcpy(static_cast<char*>(io.outputs[i]) + o * row_bytes_[i], src, row_bytes_[i]);
          src += row_bytes_[i];
        }
      }
    });
  }

 private:
  std::vector<size_t> row_bytes_;  // per output: bytes per outer index
  size_t in_row_bytes_ = 0;
  int64_t outer_ = 1;
};

}  // namespace

void RegisterTensorConcatKernels(KernelRegistry& r) {
  r.Register(OpId::kConcat, kAnyDType, &MakeKernel<ConcatKernel>);
  r.Register(OpId::kSplit, kAnyDType, &MakeKernel<SplitKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
