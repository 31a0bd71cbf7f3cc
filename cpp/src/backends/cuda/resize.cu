// Resize on the device. Prepare takes the per-axis taps that shape inference
// computed for both backends (ResizeParams, ops/resize.h: every mode,
// nearest_mode, coordinate transformation, cubic_coeff_a, exclude_outside,
// scales or sizes with axes and keep_aspect_ratio_policy, tf_crop_and_resize's
// roi), so both backends read the same input offsets with the same float
// weights, and copies them once into a device table that the kernel object
// owns. Run launches one thread per output element: a gather of any element
// size when every axis is one weight-1 tap (nearest), else the CPU's weighted
// sum in the CPU's order (float32 / float64): the source rows are the products
// of the outer axes' taps, the last axis's taps are summed within each row.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "backends/cuda/tensor_util.cuh"
#include "ops/resize.h"

namespace kaiwu {
namespace cuda {
namespace tensor {
namespace {

constexpr int kMaxRank = kMaxResizeRank;

// One axis of the output, by value for kernels.
struct ResizeAxis {
  int64_t out = 1;           // output size
  int64_t stride = 1;        // input element stride (read only for identity axes)
  int64_t table = -1;        // this axis's first entry in offset[] / weight[]; -1: identity
  int64_t outside = -1;      // this axis's first flag in outside[]; -1: none
  int64_t combo_stride = 1;  // outer axes: source-row index step of this axis's taps
  int taps = 1;              // taps per output coordinate
};

// The taps of every axis: per axis, output coordinate o reads input element
// offset offset[table + o * taps + k] (an index times the axis stride) with
// weight weight[table + o * taps + k]; outside[outside + o] marks coordinates
// that take the extrapolation value (tf_crop_and_resize).
struct ResizeTables {
  int rank = 0;
  ResizeAxis axis[kMaxRank];
  const int64_t* offset = nullptr;
  const float* weight = nullptr;
  const uint8_t* outside = nullptr;
};

__device__ inline int64_t TapOffset(const ResizeTables& t, int d, int64_t o, int k) {
  const ResizeAxis& a = t.axis[d];
  return a.table < 0 ? o * a.stride : t.offset[a.table + o * a.taps + k];
}

__device__ inline float TapWeight(const ResizeTables& t, int d, int64_t o, int k) {
  const ResizeAxis& a = t.axis[d];
  return a.table < 0 ? 1.f : t.weight[a.table + o * a.taps + k];
}

// y[i] = x[sum_d offset_d(o_d)]: every axis one weight-1 tap.
template <typename U>
__global__ void ResizeGatherGpu(const U* __restrict__ x, U* __restrict__ y, ResizeTables t,
                                int64_t total) {
  KAIWU_CUDA_LOOP(i, total) {
    int64_t rest = i, off = 0;
    for (int d = t.rank - 1; d >= 0; --d) {
      const int64_t q = rest / t.axis[d].out;
      off += TapOffset(t, d, rest - q * t.axis[d].out, 0);
      rest = q;
    }
    y[i] = x[off];
  }
}

// Source row c of the output row at `coord` (c in row-major order over the
// outer axes' taps, the last outer axis fastest, as the CPU expands them): its
// input offset and its weight, the product of the axes' weights in axis order.
__device__ inline void SourceRow(const ResizeTables& t, const int64_t* coord, int c,
                                 int64_t* offset, float* weight) {
  int64_t off = 0;
  float w = 1.f;
  for (int d = 0; d < t.rank - 1; ++d) {
    const int k = (c / static_cast<int>(t.axis[d].combo_stride)) % t.axis[d].taps;
    off += TapOffset(t, d, coord[d], k);
    w *= TapWeight(t, d, coord[d], k);
  }
  *offset = off;
  *weight = w;
}

// y[i] = sum over source rows c of w_c * (sum_k w_k * x[row_c + offset_k]) with
// the last axis's taps k, or the extrapolation value where an axis is outside
// the roi. The sums run in the CPU kernel's order (ResizeKernel::WeightedRow).
template <typename T>
__global__ void ResizeWeightedGpu(const T* __restrict__ x, T* __restrict__ y, ResizeTables t,
                                  int rows, float extrapolation, int64_t total) {
  KAIWU_CUDA_LOOP(i, total) {
    int64_t coord[kMaxRank];
    int64_t rest = i;
    bool outside = false;
    for (int d = t.rank - 1; d >= 0; --d) {
      const ResizeAxis& a = t.axis[d];
      const int64_t q = rest / a.out;
      coord[d] = rest - q * a.out;
      rest = q;
      if (a.outside >= 0 && t.outside[a.outside + coord[d]]) outside = true;
    }
    if (outside) {
      y[i] = static_cast<T>(extrapolation);
      continue;
    }
    const int last = t.rank - 1, taps = t.axis[last].taps;
    const int64_t o = coord[last];
    if (rows == 2 && taps == 2) {  // bilinear, as the CPU's one-pass row
      int64_t r0, r1;
      float w0, w1;
      SourceRow(t, coord, 0, &r0, &w0);
      SourceRow(t, coord, 1, &r1, &w1);
      const int64_t a = TapOffset(t, last, o, 0), b = TapOffset(t, last, o, 1);
      const T wa = static_cast<T>(TapWeight(t, last, o, 0));
      const T wb = static_cast<T>(TapWeight(t, last, o, 1));
      y[i] = static_cast<T>(w0) * (wa * x[r0 + a] + wb * x[r0 + b]) +
             static_cast<T>(w1) * (wa * x[r1 + a] + wb * x[r1 + b]);
      continue;
    }
    T sum = 0;
    for (int c = 0; c < rows; ++c) {
      int64_t row;
      float w;
      SourceRow(t, coord, c, &row, &w);
      if (w == 0.f) continue;
      T acc = 0;
      for (int k = 0; k < taps; ++k)
        acc += static_cast<T>(TapWeight(t, last, o, k)) * x[row + TapOffset(t, last, o, k)];
      sum += static_cast<T>(w) * acc;
    }
    y[i] = sum;
  }
}

struct DeviceFree {
  void operator()(void* p) const { cudaFree(p); }
};

class ResizeKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    if (total_ == 0) return;
    const cudaStream_t stream = Dev(io).stream;
    const unsigned grid = GridFor(total_);
    if (gather_) {
      KAIWU_CUDA_BY_ELEM(elem_, {
        ResizeGatherGpu<U><<<grid, kBlock, 0, stream>>>(static_cast<const U*>(io.inputs[0]),
                                                        static_cast<U*>(io.outputs[0]), tables_,
                                                        total_);
      });
    } else if (dtype_ == DType::kFloat64) {
      ResizeWeightedGpu<double><<<grid, kBlock, 0, stream>>>(
          static_cast<const double*>(io.inputs[0]), static_cast<double*>(io.outputs[0]), tables_,
          rows_, extrapolation_, total_);
    } else {
      ResizeWeightedGpu<float><<<grid, kBlock, 0, stream>>>(
          static_cast<const float*>(io.inputs[0]), static_cast<float*>(io.outputs[0]), tables_,
          rows_, extrapolation_, total_);
    }
    CheckLaunch("Resize kernel");
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const ResizeParams& plan = ctx.Params<ResizeParams>();
    const TensorInfo& x = ctx.in(0);
    dtype_ = x.dtype;
    elem_ = DTypeSize(dtype_);
    extrapolation_ = plan.extrapolation;
    total_ = NumElements(plan.out);
    gather_ = true;
    for (const AxisTaps& a : plan.axes) gather_ = gather_ && a.identity_weights();
    // Weighted sums take float data. The one other non-gather Resize is nearest
    // with tf_crop_and_resize, whose CPU kernel runs it as float sums.
    if (!gather_ && dtype_ != DType::kFloat32 && dtype_ != DType::kFloat64)
      Unsupported(ctx, "tf_crop_and_resize of ", DTypeName(dtype_), " data");

    // Identity axes need no table; the others append their taps.
    const int r = x.rank();
    const std::vector<int64_t> strides = Strides(x.shape);
    std::vector<int64_t> offsets;
    std::vector<float> weights;
    std::vector<uint8_t> outside;
    tables_ = ResizeTables{};
    tables_.rank = r;
    int64_t combo_stride = 1;
    rows_ = 1;
    for (int d = r - 1; d >= 0; --d) {
      const AxisTaps& a = plan.axes[d];
      ResizeAxis& axis = tables_.axis[d];
      axis.out = plan.out[d];
      axis.stride = strides[d];
      axis.taps = a.taps;
      if (!a.identity) {
        axis.table = static_cast<int64_t>(offsets.size());
        offsets.insert(offsets.end(), a.offset.begin(), a.offset.end());
        weights.insert(weights.end(), a.weight.begin(), a.weight.end());
      }
      if (!a.outside.empty()) {
        axis.outside = static_cast<int64_t>(outside.size());
        outside.insert(outside.end(), a.outside.begin(), a.outside.end());
      }
      if (d < r - 1) {  // an outer axis: its taps multiply the source rows
        axis.combo_stride = combo_stride;
        combo_stride *= a.taps;
        rows_ *= a.taps;
      }
    }

    // One device allocation: offsets (int64), then weights (float), then flags.
    const size_t offset_bytes = offsets.size() * sizeof(int64_t);
    const size_t weight_bytes = weights.size() * sizeof(float);
    const size_t bytes = offset_bytes + weight_bytes + outside.size();
    table_.reset();
    if (bytes == 0) return;
    std::vector<char> host(bytes);
    std::memcpy(host.data(), offsets.data(), offset_bytes);
    std::memcpy(host.data() + offset_bytes, weights.data(), weight_bytes);
    std::memcpy(host.data() + offset_bytes + weight_bytes, outside.data(), outside.size());
    void* table = nullptr;
    CheckCuda(cudaMalloc(&table, bytes), "cudaMalloc (Resize taps)");
    table_.reset(table);
    CheckCuda(cudaMemcpy(table, host.data(), bytes, cudaMemcpyHostToDevice),
              "copy of the Resize taps");
    char* base = static_cast<char*>(table);
    tables_.offset = reinterpret_cast<const int64_t*>(base);
    tables_.weight = reinterpret_cast<const float*>(base + offset_bytes);
    tables_.outside = reinterpret_cast<const uint8_t*>(base + offset_bytes + weight_bytes);
  }

 private:
  DType dtype_ = DType::kFloat32;
  size_t elem_ = 4;
  bool gather_ = true;
  float extrapolation_ = 0.f;
  int64_t total_ = 0;
  int rows_ = 1;  // source rows per output row: the product of the outer axes' taps
  ResizeTables tables_;
  std::unique_ptr<void, DeviceFree> table_;  // the device memory tables_ points into
};

}  // namespace

// Nearest gathers elements of every size (1, 2, 4 or 8 bytes); linear and cubic
// (float32 / float64, checked by shape inference) sum weighted rows.
void RegisterResizeKernel(KernelRegistry& r) {
  r.Register(OpId::kResize,
             {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,
              DType::kUInt8, DType::kInt16, DType::kInt32, DType::kInt64, DType::kBool},
             &MakeKernel<ResizeKernel>);
}

}  // namespace tensor
}  // namespace cuda
}  // namespace kaiwu
