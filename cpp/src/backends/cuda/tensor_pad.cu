// Pad: modes constant / reflect / edge / wrap, from the op layer's PadParams
// (ops/tensor_pad.cc); the constant value (input 2) is read on the device.
// Negative pads crop. One thread per output element maps each coordinate
// (PadSourceCoord, shared with the CPU kernel).
#include <cstring>
#include <vector>

#include "backends/cuda/tensor_util.cuh"
#include "ops/tensor.h"

namespace kaiwu {
namespace cuda {
namespace tensor {
namespace {

struct PadGeometry {
  int n = 0;
  PadMode mode = PadMode::kConstant;
  int64_t out[kMaxDims];     // output dims
  int64_t in[kMaxDims];      // input dims
  int64_t stride[kMaxDims];  // input strides
  int64_t begin[kMaxDims];   // leading pad (negative: crop)
};

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
      const int64_t m = PadSourceCoord(rem - q * g.out[d] - g.begin[d], g.in[d], g.mode);
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
    const PadParams& p = ctx.Params<PadParams>();
    const TensorInfo& x = ctx.inputs[0];
    const int rank = x.rank();
    if (rank > kMaxDims) Unsupported(ctx, "rank ", rank, " (at most ", kMaxDims, ")");
    elem_ = DTypeSize(x.dtype);
    has_value_input_ = p.has_value_input;
    std::memcpy(default_value_, p.default_value, sizeof(default_value_));

    // A scalar is padded as a one-element vector.
    const Shape& out = ctx.outputs[0].shape;
    const std::vector<int64_t> strides = Strides(x.shape);
    geometry_ = PadGeometry{};
    geometry_.n = rank == 0 ? 1 : rank;
    geometry_.mode = p.mode;
    for (int d = 0; d < geometry_.n; ++d) {
      geometry_.out[d] = rank == 0 ? 1 : out[d];
      geometry_.in[d] = rank == 0 ? 1 : x.shape[d];
      geometry_.stride[d] = rank == 0 ? 1 : strides[d];
      geometry_.begin[d] = rank == 0 ? 0 : p.begin[d];
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
  r.Register(OpId::kPad, {KAIWU_ALL_DTYPES}, &MakeKernel<PadKernel>);
}

}  // namespace tensor
}  // namespace cuda
}  // namespace kaiwu
