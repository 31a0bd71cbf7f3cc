// Pad: modes constant / reflect / edge / wrap; pads from input 1 (opset 11+,
// the `pads` attribute before), constant_value from input 2 (read in Run),
// axes from input 3 (opset 18+). Negative pads crop.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"

namespace kaiwu {
namespace cpu {
namespace {

enum class PadMode { kConstant, kReflect, kEdge, kWrap };

// Source coordinate of output coordinate `o` (before subtracting the leading
// pad: i = o - pad_begin), or -1 for the constant.
int64_t MapCoord(int64_t i, int64_t dim, PadMode mode) {
  if (i >= 0 && i < dim) return i;
  switch (mode) {
    case PadMode::kConstant: return -1;
    case PadMode::kEdge: return i < 0 ? 0 : dim - 1;
    case PadMode::kWrap: return ((i % dim) + dim) % dim;
    case PadMode::kReflect: {
      if (dim == 1) return 0;
      int64_t period = 2 * (dim - 1);
      int64_t p = (i < 0 ? -i : i) % period;
      return p < dim ? p : period - p;
    }
  }
  return -1;
}

class PadKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.in(0);
    const int rank = x.rank();
    std::string mode = ctx.node.GetString("mode", "constant");
    if (mode == "constant") mode_ = PadMode::kConstant;
    else if (mode == "reflect") mode_ = PadMode::kReflect;
    else if (mode == "edge") mode_ = PadMode::kEdge;
    else if (mode == "wrap") mode_ = PadMode::kWrap;
    else ctx.Error("unknown mode '", mode, "'");

    elem_ = DTypeSize(x.dtype);
    std::memset(default_value_, 0, sizeof(default_value_));
    std::vector<int64_t> pads, axes;
    if (ctx.node.opset >= 11) {
      pads = ctx.ConstInts(1);
      has_value_input_ = ctx.HasInput(2) && ctx.in(2).size() > 0;
      if (has_value_input_ && (ctx.in(2).dtype != x.dtype || ctx.in(2).size() != 1))
        ctx.Error("constant_value must be one ", DTypeName(x.dtype), " element");
      if (ctx.HasInput(3)) axes = ctx.ConstInts(3);
    } else {
      pads = ctx.node.GetInts("pads");
      float v = ctx.node.GetFloat("value", 0.f);
      if (v != 0.f) KAIWU_DISPATCH_ALL(x.dtype, {
        T t = static_cast<T>(v);
        std::memcpy(default_value_, &t, sizeof(T));
      });
    }
    if (axes.empty()) {
      for (int d = 0; d < rank; ++d) axes.push_back(d);
    }
    if (pads.size() != 2 * axes.size())
      ctx.Error("pads has ", pads.size(), " entries, expected ", 2 * axes.size());
    std::vector<int64_t> begin(rank, 0), end(rank, 0);
    std::vector<bool> seen(rank, false);
    for (size_t i = 0; i < axes.size(); ++i) {
      int64_t a = NormalizeAxis(ctx, axes[i], rank);
      if (seen[a]) ctx.Error("axis ", axes[i], " is repeated");
      seen[a] = true;
      begin[a] = pads[i];
      end[a] = pads[i + axes.size()];
    }

    Shape out(rank);
    maps_.assign(rank, {});
    for (int d = 0; d < rank; ++d) {
      const int64_t dim = x.shape[d];
      out[d] = dim + begin[d] + end[d];
      if (out[d] < 0) ctx.Error("pads make axis ", d, " negative");
      if (dim == 0 && out[d] > 0 && mode_ != PadMode::kConstant)
        ctx.Error("cannot pad an empty axis in ", mode, " mode");
      for (int64_t o = 0; o < out[d]; ++o) maps_[d].push_back(MapCoord(o - begin[d], dim, mode_));
    }
    // Internally a scalar is a one-element vector.
    shape_ = rank == 0 ? Shape{1} : out;
    in_strides_ = rank == 0 ? std::vector<int64_t>{1} : Strides(x.shape);
    if (rank == 0) maps_.assign(1, std::vector<int64_t>(1, 0));
    const int r = static_cast<int>(shape_.size());
    const int64_t last = shape_[r - 1];
    const int64_t lead = rank == 0 ? 0 : begin[r - 1];
    const int64_t last_dim = rank == 0 ? 1 : x.shape[r - 1];
    copy_lo_ = std::clamp<int64_t>(lead, 0, last);
    copy_hi_ = std::clamp<int64_t>(lead + last_dim, copy_lo_, last);
    total_ = NumElements(shape_);
    ctx.SetOutput(0, x.dtype, std::move(out));
  }

  void Run(const KernelIO& io) const override {
    if (total_ == 0) return;
    unsigned char value[8];
    std::memcpy(value, has_value_input_ && io.inputs[2] ? io.inputs[2] : default_value_, elem_);
    const int64_t last = shape_.back();
    struct Args {
      const char* src;
      char* dst;
      const unsigned char* value;
    } a{static_cast<const char*>(io.inputs[0]), static_cast<char*>(io.outputs[0]), value};
    io.pool->ParallelFor(total_ / last, static_cast<double>(last) + 4.0 * shape_.size(),
                         [this, &a](int64_t b, int64_t e) {
                           RunRows(a.src, a.dst, a.value, b, e);
                         });
  }

 private:
  void RunRows(const char* src, char* dst, const unsigned char* value, int64_t b,
               int64_t e) const {
    const int r = static_cast<int>(shape_.size());
    const int64_t last = shape_[r - 1];
    const std::vector<int64_t>& last_map = maps_[r - 1];
    for (int64_t row = b; row < e; ++row) {
      char* out = dst + row * last * elem_;
      int64_t rem = row, off = 0;
      bool inside = true;
      for (int d = r - 2; d >= 0; --d) {
        int64_t m = maps_[d][rem % shape_[d]];
        rem /= shape_[d];
        if (m < 0) {
          inside = false;
          break;
        }
        off += m * in_strides_[d];
      }
      if (!inside) {
        FillElements(out, value, last, elem_);
        continue;
      }
      const char* in = src + off * elem_;
      for (int64_t j = 0; j < copy_lo_; ++j) CopyOne(out, in, j, last_map[j], value);
      if (copy_hi_ > copy_lo_)
        std::memcpy(out + copy_lo_ * elem_, in + last_map[copy_lo_] * elem_,
                    (copy_hi_ - copy_lo_) * elem_);
      for (int64_t j = copy_hi_; j < last; ++j) CopyOne(out, in, j, last_map[j], value);
    }
  }

  void CopyOne(char* out, const char* in, int64_t j, int64_t m,
               const unsigned char* value) const {
    std::memcpy(out + j * elem_, m < 0 ? static_cast<const void*>(value) : in + m * elem_, elem_);
  }

  PadMode mode_ = PadMode::kConstant;
  size_t elem_ = 4;
  bool has_value_input_ = false;
  unsigned char default_value_[8];
  Shape shape_;                              // output shape (rank >= 1)
  std::vector<int64_t> in_strides_;
  std::vector<std::vector<int64_t>> maps_;   // per dim: output coord -> input coord or -1
  int64_t copy_lo_ = 0, copy_hi_ = 0;        // last-dim range copied contiguously
  int64_t total_ = 0;
};

}  // namespace

void RegisterTensorPadKernels(KernelRegistry& r) {
  r.Register(OpId::kPad, kAnyDType, &MakeKernel<PadKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
