// Direct channels-last convolution of 16-bit floats on tensor cores for the
// narrow convs of RL image policies (C and M up to 32: IMPALA's 16- and
// 32-channel blocks, multi-input planes; Atari's 64-channel convs stay on cuDNN). One block stages the
// weights in shared memory once, then for each output tile of one image it
// stages the input window (halo included, the padding as zeros, max(x, 0)
// when the conv's input ReLU is fused) and accumulates every tap with
// mma.sync m16n8k16 in float; the epilogue adds the bias, the residual input
// (a fused Add) and applies the activation before one 16-byte store per eight
// channels. No im2col, no separate bias / activation / Add / ReLU passes.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "backends/cuda/device_util.cuh"

namespace kaiwu {
namespace cuda {

/// One NhwcConv's shape: X [n, h, w, c], W [m, kh, kw, c], Y [n, oh, ow, m].
struct DirectConvShape {
  int64_t n = 0, h = 0, w = 0, c = 0, m = 0, oh = 0, ow = 0;
  int64_t kh = 0, kw = 0, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  int64_t dil_h = 1, dil_w = 1;
};

/// How the direct kernel runs one shape (PlanDirectConv); valid() false: it
/// does not (over 32 channels, a window too wide for shared memory, dilation,
/// M not a multiple of 8, an element count beyond int32, fewer output tiles
/// than half the SMs, a device before sm_80).
struct DirectConvPlan {
  int cp = 0;        // channels staged per pixel: c rounded up to 16 or 32
  int nt = 0;        // output-channel tiles of 8: 2 or 4
  int th = 0, tw = 0;  // output tile (th * tw pixels, 32 per warp)
  int in_rows = 0, in_cols = 0;  // input window of a tile
  int64_t tiles = 0;             // n * tiles_y * tiles_x
  int tiles_y = 0, tiles_x = 0;
  int grid = 0;
  size_t smem = 0;  // dynamic shared memory bytes
  bool valid() const { return cp > 0; }
};

/// The plan for `s` (bfloat16 or float16 elements), or an invalid plan; `fused`:
/// the conv has a fused residual input or input ReLU. KAIWU_CONV_DIRECT=0 makes
/// every plan invalid (cuDNN / im2col run instead), =fused every unfused one.
DirectConvPlan PlanDirectConv(const DirectConvShape& s, bool bfloat16, bool fused);

/// What one launch reads and writes; sum (Y's shape) and bias may be null.
struct DirectConvIO {
  const void* x = nullptr;
  const void* w = nullptr;
  const void* bias = nullptr;
  const void* sum = nullptr;
  void* y = nullptr;
  DeviceActivation act;
  bool input_relu = false;
};

/// Y = act(conv(relu?(X), W) + bias + sum) on `stream`; T = __half or
/// __nv_bfloat16 (bfloat16 selects). Throws kRuntime on a launch error.
void LaunchDirectConv(const DirectConvShape& s, const DirectConvPlan& plan, const DirectConvIO& io,
                      bool bfloat16, cudaStream_t stream);

}  // namespace cuda
}  // namespace kaiwu
