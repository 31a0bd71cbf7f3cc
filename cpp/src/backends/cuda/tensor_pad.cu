// Pad: modes constant / reflect / edge / wrap, as the CPU kernel: pads from
// input 1 (opset 11+, the `pads` attribute before) and axes from input 3 are
// known at Prepare; the constant value (input 2) is read on the device.
// Negative pads crop. One thread per output element maps each coordinate.
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cuda/tensor_util.cuh"

namespace kaiwu {
namespace cuda {
namespace tensor {
namespace {

enum PadMode { kConstant, kReflect, kEdge, kWrap };

struct PadGeometry {
  int n = 0;
  int mode = kConstant;
  int64_t out[kMaxDims];     // output dims
  int64_t in[kMaxDims];      // input dims
  int64_t stride[kMaxDims];  // input strides
  int64_t begin[kMaxDims];   // leading pad (negative: crop)
};

// Source coordinate of i = output coordinate - leading pad, or -1 for the constant.
__device__ inline int64_t MapCoord(int64_t i, int64_t dim, int mode) {
  if (i >= 0 && i < dim) return i;
  switch (mode) {
    case kEdge: return i < 0 ? 0 : dim - 1;
    case kWrap: return ((i % dim) + dim) % dim;
    case kReflect: {
      if (dim == 1) return 0;
      const int64_t period = 2 * (dim - 1);
      const int64_t p = (i < 0 ? -i : i) % period;
      return p < dim ? p : period - p;
    }
    default: return -1;
  }
}

// value_in: the constant_value input on the device, or null for `fallback`.
template <typename U>
__global__ void PadGpu(const U* __restrict__ src, U* __restrict__ dst, PadGeometry g,
                          const U* value_in, U fallback, int64_t total) {
  const U value = value_in ? *value_in : fallback;
  KAIWU_CUDA_LOOP(i, total) {
    int64_t rem = i, off = 0;
    bool inside = true;
    for (int d = g.n - 1; d >= 0; --d) {
      const int64_t q = rem / g.out[d];
      const int64_t m = MapCoord(rem - q * g.out[d] - g.begin[d], g.in[d], g.mode);
      rem = q;
      inside = inside && m >= 0;
      off += m * g.stride[d];
    }
    dst[i] = inside ? src[off] : value;
  }
}

class PadKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (total_ == 0) return;
    const void* value_in = has_value_input_ ? io.inputs[2] : nullptr;
    KAIWU_CUDA_BY_ELEM(elem_, {
      U fallback;
      std::memcpy(&fallback, default_value_, sizeof(U));
      PadGpu<U><<<GridFor(total_), kBlock, 0, Dev(io).stream>>>(
          static_cast<const U*>(io.inputs[0]), static_cast<U*>(io.outputs[0]), geometry_,
          static_cast<const U*>(value_in), fallback, total_);
    });
    CheckLaunch("Pad kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.in(0);
    const int rank = x.rank();
    if (rank > kMaxDims) Unsupported(ctx, "rank ", rank, " (at most ", kMaxDims, ")");
    const std::string mode = ctx.node.GetString("mode", "constant");
    elem_ = DTypeSize(x.dtype);
    std::memset(default_value_, 0, sizeof(default_value_));
    std::vector<int64_t> pads, axes;
    if (ctx.node.opset >= 11) {
      pads = ctx.ConstInts(1);
      has_value_input_ = ctx.HasInput(2) && ctx.in(2).size() > 0;
      if (ctx.HasInput(3)) axes = ctx.ConstInts(3);
    } else {
      has_value_input_ = false;
      pads = ctx.node.GetInts("pads");
      const float v = ctx.node.GetFloat("value", 0.f);
      if (v != 0.f) KAIWU_DISPATCH_ALL(x.dtype, {
        T t = static_cast<T>(v);
        std::memcpy(default_value_, &t, sizeof(T));
      });
    }
    if (axes.empty())
      for (int d = 0; d < rank; ++d) axes.push_back(d);
    std::vector<int64_t> begin(rank, 0);
    for (size_t i = 0; i < axes.size(); ++i) begin[axes[i] < 0 ? axes[i] + rank : axes[i]] = pads[i];

    // A scalar is padded as a one-element vector.
    const Shape& out = ctx.outputs[0].shape;
    const std::vector<int64_t> strides = Strides(x.shape);
    geometry_ = PadGeometry{};
    geometry_.n = rank == 0 ? 1 : rank;
    geometry_.mode = mode == "reflect" ? kReflect : mode == "edge" ? kEdge
                   : mode == "wrap"    ? kWrap    : kConstant;
    for (int d = 0; d < geometry_.n; ++d) {
      geometry_.out[d] = rank == 0 ? 1 : out[d];
      geometry_.in[d] = rank == 0 ? 1 : x.shape[d];
      geometry_.stride[d] = rank == 0 ? 1 : strides[d];
      geometry_.begin[d] = rank == 0 ? 0 : begin[d];
    }
    total_ = NumElements(out);
  }

 private:
  PadGeometry geometry_;
  size_t elem_ = 4;
  bool has_value_input_ = false;
  unsigned char default_value_[8];
  int64_t total_ = 0;
};

}  // namespace

void RegisterTensorPadKernels(KernelRegistry& r) {
  r.Register(OpId::kPad, kAnyDType, &MakeKernel<PadKernel>);
}

}  // namespace tensor
}  // namespace cuda
}  // namespace kaiwu
