// Pad: the op layer (ops/tensor_pad.cc) checked the mode and pads; Prepare maps
// every output coordinate to its source (PadSourceCoord), Run copies rows and
// fills with the constant (input 2, read in Run, or the params' default).
#include <algorithm>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/tensor_util.h"
#include "ops/tensor.h"

namespace kaiwu {
namespace cpu {
namespace {

class PadKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const PadParams& p = ctx.Params<PadParams>();
    const TensorInfo& x = ctx.inputs[0];
    const Shape& out = ctx.outputs[0].shape;
    const int rank = x.rank();
    elem_ = DTypeSize(x.dtype);
    has_value_input_ = p.has_value_input;
    std::memcpy(default_value_, p.default_value, sizeof(default_value_));
    maps_.assign(rank, {});
    for (int d = 0; d < rank; ++d)
      for (int64_t o = 0; o < out[d]; ++o)
        maps_[d].push_back(PadSourceCoord(o - p.begin[d], x.shape[d], p.mode));
    // Internally a scalar is a one-element vector.
    shape_ = rank == 0 ? Shape{1} : out;
    in_strides_ = rank == 0 ? std::vector<int64_t>{1} : Strides(x.shape);
    if (rank == 0) maps_.assign(1, std::vector<int64_t>(1, 0));
    const int r = static_cast<int>(shape_.size());
    const int64_t last = shape_[r - 1];
    const int64_t lead = rank == 0 ? 0 : p.begin[r - 1];
    const int64_t last_dim = rank == 0 ? 1 : x.shape[r - 1];
    copy_lo_ = std::clamp<int64_t>(lead, 0, last);
    copy_hi_ = std::clamp<int64_t>(lead + last_dim, copy_lo_, last);
    total_ = NumElements(shape_);
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
  r.Register(OpId::kPad, {KAIWU_ALL_DTYPES}, &MakeKernel<PadKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
