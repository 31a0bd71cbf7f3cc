// FusedMlp as separate GEMMs, for shapes past the node's max_rows (ops/linalg.h):
// where many rows fill the GPU, cuBLAS's tensor-core GEMMs beat the fused
// kernel, which stages every weight per block of rows. Still one graph op: X
// cast to 16 bits once when it is float32, then per layer a cuBLAS GEMM into
// scratch and one epilogue kernel that adds the bias, applies the activation
// and writes the layer's rows for later layers and/or its output (float32 or
// 16-bit). A layer whose bias and activation (none or ReLU) cuBLASLt applies,
// and whose rows go to one place in the weights' type, is one cuBLASLt GEMM
// writing there.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/gemm_lt.h"
#include "ops/linalg.h"

namespace kaiwu {
namespace cuda {

struct MlpGemmPlan {
  struct Layer {
    int input = -1;
    bool trans_b = true, has_bias = false;
    int64_t k = 0, n = 0;
    DeviceActivation act;
    bool kept = false;  // a later layer reads it
    size_t buf = 0;     // byte offset of its [m, n] rows in scratch
    LtGemm lt;          // planned: the whole layer, into scratch (kept) or its output
  };
  int64_t m = 0, k0 = 0;
  bool x_float = false;
  size_t x_buf = 0;  // byte offset of X in 16 bits (x_float only)
  std::vector<Layer> layers;
  size_t scratch_bytes = 0;
};

/// Scratch layout for `p` over X [m, k0] (float32 or the weights' type
/// `type`, CUDA_R_16F or CUDA_R_16BF); y_float[l]: layer l's output is float32.
MlpGemmPlan PlanMlpGemms(const FusedMlpParams& p, bool x_float, int64_t k0, cudaDataType_t type,
                         const std::vector<bool>& y_float);

/// Runs the plan: w[l], b[l] (null: no bias) per layer; y[l] the layer's
/// output or null, y_float[l] whether it is float32.
template <typename T>
void RunMlpGemms(const DeviceContext& dev, const MlpGemmPlan& plan, const void* x, const void* const* w,
                 const void* const* b, void* const* y, const std::vector<bool>& y_float, void* scratch);

}  // namespace cuda
}  // namespace kaiwu
