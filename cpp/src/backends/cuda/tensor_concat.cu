// Concat and Split: along `axis` every tensor is (outer, rows_i * inner), so
// each input (Concat) or output (Split) is one pitched 2-D device copy of
// `outer` rows between its own buffer and its column slab of the whole.
#include <vector>

#include "backends/cuda/tensor_util.cuh"
#include "ops/tensor.h"

namespace kaiwu {
namespace cuda {
namespace tensor {
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

// Copies `rows` rows of `width` bytes between buffers of row pitches dpitch and spitch.
void Copy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, int64_t rows,
            cudaStream_t stream, const char* what) {
  if (width == 0 || rows == 0) return;
  if (rows == 1 || (dpitch == width && spitch == width)) {
    CopyAsync(dst, src, width * static_cast<size_t>(rows), stream, what);
    return;
  }
  CheckCuda(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, static_cast<size_t>(rows),
                              cudaMemcpyDeviceToDevice, stream),
            what);
}

class ConcatKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    char* out = static_cast<char*>(io.outputs[0]);
    size_t pos = 0;
    for (size_t i = 0; i < row_bytes_.size(); ++i) {
      Copy2D(out + pos, out_row_bytes_, io.inputs[i], row_bytes_[i], row_bytes_[i], outer_,
             Dev(io).stream, "Concat copy");
      pos += row_bytes_[i];
    }
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const int64_t axis = ctx.Params<AxisParams>().axis;
    const size_t elem = DTypeSize(ctx.outputs[0].dtype);
    int64_t inner = 1;
    row_bytes_.clear();
    for (const TensorInfo& t : ctx.inputs) {
      const Shape& s = t.shape;
      OuterInner(s, axis, &outer_, &inner);
      row_bytes_.push_back(static_cast<size_t>(s[axis] * inner) * elem);
    }
    const Shape& out = ctx.outputs[0].shape;
    OuterInner(out, axis, &outer_, &inner);
    out_row_bytes_ = static_cast<size_t>(out[axis] * inner) * elem;
  }

 private:
  std::vector<size_t> row_bytes_;  // per input: bytes per outer index
  size_t out_row_bytes_ = 0;
  int64_t outer_ = 1;
};

class SplitKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    const char* in = static_cast<const char*>(io.inputs[0]);
    size_t pos = 0;
    for (size_t i = 0; i < row_bytes_.size(); ++i) {
      if (io.outputs[i])
        Copy2D(io.outputs[i], row_bytes_[i], in + pos, in_row_bytes_, row_bytes_[i], outer_,
               Dev(io).stream, "Split copy");
      pos += row_bytes_[i];
    }
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const TensorInfo& x = ctx.inputs[0];
    const int64_t axis = ctx.Params<AxisParams>().axis;
    const size_t elem = DTypeSize(x.dtype);
    int64_t inner = 1;
    OuterInner(x.shape, axis, &outer_, &inner);
    in_row_bytes_ = static_cast<size_t>(x.shape[axis] * inner) * elem;
    row_bytes_.clear();
    for (const TensorInfo& o : ctx.outputs)
      row_bytes_.push_back(static_cast<size_t>(o.shape[axis] * inner) * elem);
  }

 private:
  std::vector<size_t> row_bytes_;  // per output: bytes per outer index
  size_t in_row_bytes_ = 0;
  int64_t outer_ = 1;
};

}  // namespace

void RegisterTensorConcatKernels(KernelRegistry& r) {
  r.Register(OpId::kConcat, {KAIWU_ALL_DTYPES}, &MakeKernel<ConcatKernel>);
  r.Register(OpId::kSplit, {KAIWU_ALL_DTYPES}, &MakeKernel<SplitKernel>);
}

}  // namespace tensor
}  // namespace cuda
}  // namespace kaiwu
