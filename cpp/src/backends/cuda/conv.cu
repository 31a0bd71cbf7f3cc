// Conv (1-D and 2-D, float32, and float16 / bfloat16 on tensor cores with
// float accumulation; groups, dilations, pads/auto_pad, bias, fused
// "_kaiwu_act"); NhwcConv, the channels-last form of half sessions, below.
// With cuDNN (built in, and KAIWU_CUDNN=1), convs with symmetric pads run
// cudnnConvolutionForward with the algorithm cuDNN's heuristics rank first
// among those without TF32 (FMA math) and within the workspace bound. Otherwise: im2col into device scratch, then one
// strided-batched cuBLAS GEMM per group over a chunk of images. Pointwise convs
// (1x1, stride 1, unpadded) skip im2col: the input already is the column
// matrix. Both paths end with one epilogue kernel for the bias and the
// activation.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>

#include "backends/cuda/conv_direct.h"
#include "backends/cuda/conv_family.h"
#include "backends/cuda/cuda_kernels.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/dnn.h"
#include "backends/cuda/gemm_util.h"
#include "backends/cuda/half.cuh"
#include "ops/conv.h"

namespace kaiwu {
namespace cuda {
namespace {

// Bound on the column matrices of one chunk of images (a single image whose
// columns exceed it still runs, alone).
constexpr int64_t kMaxScratchBytes = int64_t{128} << 20;
// Kernels index in int32 up to this many elements (a margin for the grid stride).
constexpr int64_t kInt32Elements = INT_MAX / 4;

// The 2-D window of a conv by value (a 1-D conv has H = OH = KH = 1).
struct ConvWindow {
  int64_t c, h, w, oh, ow, kh, kw;
  int64_t stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
};

// The channels-last column matrix: col[img * P + p][(kh * KW + kw) * C + c]
// = x[img][ih][iw][c] (0 in the padding), so reads and writes run along c. One
// thread per element; I as below.
template <typename I, typename T>
__global__ void Im2ColNhwcKernel(ConvWindow g, I images, const T* __restrict__ x,
                                 T* __restrict__ col) {
  const I C = static_cast<I>(g.c), H = static_cast<I>(g.h), W = static_cast<I>(g.w);
  const I OW = static_cast<I>(g.ow), KW = static_cast<I>(g.kw);
  const I P = static_cast<I>(g.oh) * OW, taps = static_cast<I>(g.kh) * KW;
  const I total = images * P * taps * C;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(blockDim.x) * gridDim.x) {
    const I c = i % C, r = i / C;
    const I tap = r % taps, pix = r / taps;  // pix = img * P + p
    const I p = pix % P, img = pix / P;
    const I ih = (p / OW) * static_cast<I>(g.stride_h) - static_cast<I>(g.pad_h) +
                 (tap / KW) * static_cast<I>(g.dil_h);
    const I iw = (p % OW) * static_cast<I>(g.stride_w) - static_cast<I>(g.pad_w) +
                 (tap % KW) * static_cast<I>(g.dil_w);
    col[i] = ih >= 0 && ih < H && iw >= 0 && iw < W ? x[((img * H + ih) * W + iw) * C + c] : T(0.f);
  }
}

// col[img][k][p] for images x + img * C * H * W, img < images: row
// k = (c * KH + kh) * KW + kw (the layout of W's [C, KH, KW]), column
// p = oh * OW + ow; taps in the padding read 0. One thread per (image,
// channel, output pixel) writes that pixel's KH * KW taps; I is int32 when
// every index fits (integer division is far cheaper than in 64 bits).
template <typename I, typename T>
__global__ void Im2ColKernel(ConvWindow g, I images, const T* __restrict__ x,
                             T* __restrict__ col) {
  const I C = static_cast<I>(g.c), H = static_cast<I>(g.h), W = static_cast<I>(g.w);
  const I OW = static_cast<I>(g.ow), KH = static_cast<I>(g.kh), KW = static_cast<I>(g.kw);
  const I P = static_cast<I>(g.oh) * OW, taps = KH * KW;
  const I sh = static_cast<I>(g.stride_h), sw = static_cast<I>(g.stride_w);
  const I ph = static_cast<I>(g.pad_h), pw = static_cast<I>(g.pad_w);
  const I dh = static_cast<I>(g.dil_h), dw = static_cast<I>(g.dil_w);
  const I total = images * C * P;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(blockDim.x) * gridDim.x) {
    const I p = i % P, plane = i / P;  // plane = img * C + c
    const I c = plane % C, img = plane / C;
    const I ih0 = (p / OW) * sh - ph, iw0 = (p % OW) * sw - pw;
    const T* xc = x + plane * H * W;
    T* out = col + ((img * C + c) * taps) * P + p;
    for (I kh = 0; kh < KH; ++kh) {
      const I ih = ih0 + kh * dh;
      const bool row_inside = ih >= 0 && ih < H;
      for (I kw = 0; kw < KW; ++kw, out += P) {
        const I iw = iw0 + kw * dw;
        *out = row_inside && iw >= 0 && iw < W ? xc[ih * W + iw] : T(0.f);
      }
    }
  }
}

#if KAIWU_WITH_CUDNN
// Most device scratch a cuDNN algorithm may use.
constexpr size_t kMaxDnnWorkspace = size_t{256} << 20;

// A conv's cuDNN descriptors and algorithm at one shape (one plan's).
struct DnnConv {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  size_t workspace = 0;

  DnnConv() = default;
  DnnConv(const DnnConv&) = delete;
  DnnConv& operator=(const DnnConv&) = delete;
  ~DnnConv() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

// Descriptors for y[n, m, oh, ow] = conv(x[n, c, h, w], W[m, c / group, kh, kw])
// with symmetric pads, or null when cuDNN cannot run it as we compute it
// (its output shape differs, or no FMA-math algorithm fits).
std::unique_ptr<DnnConv> MakeDnnConv(int64_t n, int64_t m, int64_t group, const ConvWindow& g,
                                     cudnnDataType_t type,
                                     cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW) {
  const bool half = type != CUDNN_DATA_FLOAT;
  for (int64_t v : {n, m, g.c, g.h, g.w, g.kh, g.kw, g.oh, g.ow})
    if (v <= 0 || v > INT_MAX) return nullptr;
  auto d = std::make_unique<DnnConv>();
  const auto i = [](int64_t v) { return static_cast<int>(v); };
  CheckDnn(cudnnCreateTensorDescriptor(&d->x), "cudnnCreateTensorDescriptor");
  CheckDnn(cudnnCreateTensorDescriptor(&d->y), "cudnnCreateTensorDescriptor");
  CheckDnn(cudnnCreateFilterDescriptor(&d->w), "cudnnCreateFilterDescriptor");
  CheckDnn(cudnnCreateConvolutionDescriptor(&d->conv), "cudnnCreateConvolutionDescriptor");
  CheckDnn(cudnnSetTensor4dDescriptor(d->x, format, type, i(n), i(g.c), i(g.h), i(g.w)),
           "cudnnSetTensor4dDescriptor (x)");
  CheckDnn(cudnnSetFilter4dDescriptor(d->w, type, format, i(m), i(g.c / group), i(g.kh),
                                      i(g.kw)),
           "cudnnSetFilter4dDescriptor");
  CheckDnn(cudnnSetConvolution2dDescriptor(d->conv, i(g.pad_h), i(g.pad_w), i(g.stride_h), i(g.stride_w),
                                           i(g.dil_h), i(g.dil_w), CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
           "cudnnSetConvolution2dDescriptor");
  CheckDnn(cudnnSetConvolutionGroupCount(d->conv, i(group)), "cudnnSetConvolutionGroupCount");
  // float32: no TF32 (FMA math only); half types: tensor cores.
  CheckDnn(cudnnSetConvolutionMathType(d->conv, half ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH),
           "cudnnSetConvolutionMathType");
  int on, om, ooh, oow;
  CheckDnn(cudnnGetConvolution2dForwardOutputDim(d->conv, d->x, d->w, &on, &om, &ooh, &oow),
           "cudnnGetConvolution2dForwardOutputDim");
  if (on != n || om != m || ooh != g.oh || oow != g.ow) return nullptr;
  CheckDnn(cudnnSetTensor4dDescriptor(d->y, format, type, on, om, ooh, oow),
           "cudnnSetTensor4dDescriptor (y)");
  bool found = false;
  WithQueryHandle([&](cudnnHandle_t h) {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int returned = 0;
    CheckDnn(cudnnGetConvolutionForwardAlgorithm_v7(h, d->x, d->w, d->conv, d->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                    &returned, perf),
             "cudnnGetConvolutionForwardAlgorithm_v7");
    for (int k = 0; k < returned && !found; ++k) {
      const cudnnConvolutionFwdAlgoPerf_t& p = perf[k];
      if (p.status != CUDNN_STATUS_SUCCESS || (!half && p.mathType != CUDNN_FMA_MATH)) continue;
      size_t bytes = 0;
      if (cudnnGetConvolutionForwardWorkspaceSize(h, d->x, d->w, d->conv, d->y, p.algo, &bytes) !=
              CUDNN_STATUS_SUCCESS ||
          bytes > kMaxDnnWorkspace)
        continue;
      d->algo = p.algo;
      d->workspace = bytes;
      found = true;
    }
  });
  if (!found) return nullptr;
  return d;
}
#endif

// y[n, m, p] = act(y[n, m, p] + bias[m]) (bias may be null); I as above.
template <typename I, typename T>
__global__ void BiasActivationKernel(I total, I M, I P, const T* __restrict__ bias,
                                     DeviceActivation act, T* __restrict__ y) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(blockDim.x) * gridDim.x) {
    float v = ToFloat(y[i]);
    if (bias) v += ToFloat(bias[(i / P) % M]);
    y[i] = FromFloat<T>(act(v));
  }
}

// Channels-last y[..., m] = act(y[..., m] + bias[m] + sum[..., m]) (bias and
// sum may be null; sum: a fused residual Add of y's shape); I as above.
template <typename I, typename T>
__global__ void BiasActivationNhwcKernel(I total, I M, const T* __restrict__ bias,
                                         const T* __restrict__ sum, DeviceActivation act,
                                         T* __restrict__ y) {
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<I>(blockDim.x) * gridDim.x) {
    float v = ToFloat(y[i]);
    if (bias) v += ToFloat(bias[i % M]);
    if (sum) v += ToFloat(sum[i]);
    y[i] = FromFloat<T>(act(v));
  }
}

// dst[i] = max(src[i], 0): a conv's fused input ReLU where the direct kernel
// does not run the conv (cuDNN and im2col read the copy).
template <typename T>
__global__ void ReluCopyKernel(int64_t total, const T* __restrict__ src, T* __restrict__ dst) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    const float v = ToFloat(src[i]);
    dst[i] = v > 0.f ? src[i] : FromFloat<T>(0.f);
  }
}

// The same over 16-byte packs of V channels (M % V == 0, y aligned): packs
// never straddle a pixel, so pack i covers channels (i * V) % M onward.
template <int V, typename T>
struct alignas(sizeof(T) * V) ChannelPack {
  T v[V];
};

template <int V, typename T>
__global__ void BiasActivationNhwcPackKernel(int64_t packs, int64_t M, const T* __restrict__ bias,
                                             const T* __restrict__ sum, DeviceActivation act,
                                             T* __restrict__ y) {
  auto* yp = reinterpret_cast<ChannelPack<V, T>*>(y);
  const auto* sp = reinterpret_cast<const ChannelPack<V, T>*>(sum);
  const uint32_t m_packs = static_cast<uint32_t>(M / V);
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < packs;
       i += static_cast<int64_t>(blockDim.x) * gridDim.x) {
    ChannelPack<V, T> p = yp[i];
    ChannelPack<V, T> r{};
    if (sp) r = sp[i];
    const int64_t c0 = static_cast<int64_t>(static_cast<uint64_t>(i) % m_packs) * V;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      float v = ToFloat(p.v[j]);
      if (bias) v += ToFloat(bias[c0 + j]);
      if (sp) v += ToFloat(r.v[j]);
      p.v[j] = FromFloat<T>(act(v));
    }
    yp[i] = p;
  }
}

#if KAIWU_WITH_CUDNN
template <typename T> constexpr cudnnDataType_t kDnnType = CUDNN_DATA_FLOAT;
template <> constexpr cudnnDataType_t kDnnType<__half> = CUDNN_DATA_HALF;
template <> constexpr cudnnDataType_t kDnnType<__nv_bfloat16> = CUDNN_DATA_BFLOAT16;
#endif

template <typename T>
class ConvKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    const T* x = static_cast<const T*>(io.inputs[0]);
    const T* w = static_cast<const T*>(io.inputs[1]);
    const T* bias = has_bias_ ? static_cast<const T*>(io.inputs[2]) : nullptr;
    T* y = static_cast<T*>(io.outputs[0]);
    const DeviceContext& dev = Dev(io);
    const int64_t total = n_ * m_ * p_;
    if (total == 0) return;
#if KAIWU_WITH_CUDNN
    if (dnn_) {
      if (!dev.dnn) Fail(StatusCode::kInternal, "Conv: the run context has no cuDNN handle");
      const float one = 1.f, zero = 0.f;
      CheckDnn(cudnnConvolutionForward(static_cast<cudnnHandle_t>(dev.dnn), &one, dnn_->x, x, dnn_->w, w,
                                       dnn_->conv, dnn_->algo, io.scratch, dnn_->workspace, &zero, dnn_->y, y),
               "Conv cudnnConvolutionForward");
    } else
#endif
    if (k_ == 0) {  // no input channels: the products are all 0
      CheckCuda(cudaMemsetAsync(y, 0, total * sizeof(T), dev.stream), "Conv memset");
    } else {
      const int64_t in_image = win_.c * win_.h * win_.w;
      const int64_t col_image = group_ * k_ * p_;  // == in_image when pointwise
      const int64_t mg = m_ / group_;
      for (int64_t n0 = 0; n0 < n_; n0 += chunk_) {
        const int64_t images = std::min(chunk_, n_ - n0);
        const T* col = x + n0 * in_image;
        if (!pointwise_) {
          T* scratch = static_cast<T*>(io.scratch);
          const int64_t threads = images * win_.c * p_;
          if (images * std::max(in_image, col_image) <= kInt32Elements)
            Im2ColKernel<int32_t><<<GridFor(threads), kBlock, 0, dev.stream>>>(
                win_, static_cast<int32_t>(images), col, scratch);
          else
            Im2ColKernel<int64_t><<<GridFor(threads), kBlock, 0, dev.stream>>>(win_, images, col,
                                                                               scratch);
          CheckLaunch("Conv im2col kernel");
          col = scratch;
        }
        // Row-major per image and group: y[mg, P] = W_g[mg, K] x col_g[K, P],
        // i.e. column-major y^T[P, mg] = col_g^T[P, K] x W_g^T[K, mg].
        for (int64_t g = 0; g < group_; ++g) {
          GemmStridedBatched<T>(dev, CUBLAS_OP_N, CUBLAS_OP_N, p_, mg, k_, 1.f, col + g * k_ * p_,
                                p_, col_image, w + g * mg * k_, k_, 0,
                                y + (n0 * m_ + g * mg) * p_, p_, m_ * p_, images,
                                "Conv GEMM");
        }
      }
    }
    if (bias || act_.active()) {
      if (total <= kInt32Elements)
        BiasActivationKernel<int32_t><<<GridFor(total), kBlock, 0, dev.stream>>>(
            static_cast<int32_t>(total), static_cast<int32_t>(m_), static_cast<int32_t>(p_), bias,
            act_, y);
      else
        BiasActivationKernel<int64_t><<<GridFor(total), kBlock, 0, dev.stream>>>(total, m_, p_,
                                                                                  bias, act_, y);
      CheckLaunch("Conv bias/activation kernel");
    }
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const ConvParams& p = ctx.Params<ConvParams>();
    const Shape& x = ctx.in(0).shape;
    const Shape& w = ctx.in(1).shape;
    if (x.size() > 4)
      Unsupported(ctx, "3-D Conv");
    const SpatialGeometry& geo = p.geo;
    n_ = x[0];
    m_ = w[0];
    group_ = p.group;
    // The geometry's spatial dims are (D, H, W): D = 1 here, and H = 1 in 1-D.
    win_.c = x[1];
    win_.h = geo.in[1];
    win_.w = geo.in[2];
    win_.oh = geo.out[1];
    win_.ow = geo.out[2];
    win_.kh = geo.kernel[1];
    win_.kw = geo.kernel[2];
    win_.stride_h = geo.stride[1];
    win_.stride_w = geo.stride[2];
    win_.pad_h = geo.pad_begin[1];
    win_.pad_w = geo.pad_begin[2];
    win_.dil_h = geo.dilation[1];
    win_.dil_w = geo.dilation[2];
    p_ = geo.out_size();
    k_ = w[1] * geo.kernel_size();
    pointwise_ = geo.IsPointwise();
    has_bias_ = p.has_bias;
    act_ = DeviceActivation::From(p.act);
    if (p_ > INT_MAX || k_ > INT_MAX || m_ > INT_MAX)
      Fail(StatusCode::kUnsupported, ctx.node.Describe(),
           ": Conv GEMM dimensions beyond 32-bit are not supported by the CUDA backend");
    // Column floats per image, all groups: C * KH * KW rows of P.
    const int64_t per_image = group_ * k_ * p_;
    const int64_t fit = kMaxScratchBytes / static_cast<int64_t>(sizeof(T)) /
                        std::max<int64_t>(per_image, 1);
    chunk_ = std::max<int64_t>(1, std::min<int64_t>({n_, fit, INT_MAX}));
    ctx.scratch_bytes = pointwise_ ? 0 : static_cast<size_t>(chunk_ * per_image) * sizeof(T);
#if KAIWU_WITH_CUDNN
    dnn_.reset();
    const bool symmetric = geo.pad_begin[1] == geo.pad_end[1] && geo.pad_begin[2] == geo.pad_end[2];
    if (DnnEnabled() && symmetric && !pointwise_) {
      try {
        dnn_ = MakeDnnConv(n_, m_, group_, win_, kDnnType<T>);
      } catch (const Error&) {
        dnn_.reset();  // cuDNN refused this conv: im2col runs it
      }
      if (dnn_) {
        ctx.scratch_bytes = dnn_->workspace;
        ctx.device_needs |= kNeedDnnHandle;
      }
    }
#endif
  }

 private:
  ConvWindow win_{};
  DeviceActivation act_;
  int64_t n_ = 0, m_ = 0, group_ = 1;
  int64_t p_ = 0, k_ = 0;  // output pixels per image; GEMM depth (C / group * KH * KW)
  int64_t chunk_ = 1;      // images per im2col + GEMM round
  bool pointwise_ = false, has_bias_ = false;
#if KAIWU_WITH_CUDNN
  std::unique_ptr<DnnConv> dnn_;  // set: cuDNN runs this conv
#endif
};

// NhwcConv (passes/layout_nhwc.cc): X [N, H, W, C], W [M, KH, KW, C] -> Y
// [N, OH, OW, M], group 1, with an optional residual input 4 (added before the
// activation) and "_kaiwu_input_relu" (the conv reads max(X, 0)). 16-bit
// floats with C and M up to 32 and enough output tiles: the direct
// tensor-core kernel (conv_direct.h), everything fused. Otherwise cuDNN's channels-last kernels
// when cuDNN is built and the pads are symmetric, else a channels-last im2col
// and one GEMM per chunk of images (Y[pixels, M] = col[pixels, K] x W[M, K]^T);
// then the bias / residual / activation epilogue (a fused input ReLU: a ReLU'd
// copy of X in scratch first).
template <typename T>
class NhwcConvKernel : public CudaKernel {
 public:
  void Run(const KernelIO& io) const override {
    const T* x = static_cast<const T*>(io.inputs[0]);
    const T* w = static_cast<const T*>(io.inputs[1]);
    const T* bias = has_bias_ ? static_cast<const T*>(io.inputs[2]) : nullptr;
    const T* sum = has_sum_ ? static_cast<const T*>(io.inputs[4]) : nullptr;
    T* y = static_cast<T*>(io.outputs[0]);
    const DeviceContext& dev = Dev(io);
    const int64_t total = n_ * p_ * m_;
    if (total == 0) return;
    if constexpr (!std::is_same_v<T, float>) {
      if (direct_.valid()) {
        LaunchDirectConv(shape_, direct_, DirectConvIO{x, w, bias, sum, y, act_, input_relu_},
                         std::is_same_v<T, __nv_bfloat16>, dev.stream);
        return;
      }
    }
    void* scratch_base = io.scratch;
    if (input_relu_) {  // the other paths read a ReLU'd copy, after it in scratch
      const int64_t in_total = n_ * win_.h * win_.w * win_.c;
      T* copy = static_cast<T*>(io.scratch);
      ReluCopyKernel<T><<<GridFor(in_total), kBlock, 0, dev.stream>>>(in_total, x, copy);
      CheckLaunch("NhwcConv input ReLU kernel");
      x = copy;
      scratch_base = static_cast<char*>(io.scratch) + relu_bytes_;
    }
#if KAIWU_WITH_CUDNN
    if (dnn_) {
      if (!dev.dnn) Fail(StatusCode::kInternal, "NhwcConv: the run context has no cuDNN handle");
      const float one = 1.f, zero = 0.f;
      if (fused_ && !sum) {
        // y = act(conv(x) + 0 * y + bias): the epilogue in cuDNN's kernel.
        CheckDnn(cudnnConvolutionBiasActivationForward(
                     static_cast<cudnnHandle_t>(dev.dnn), &one, dnn_->x, x, dnn_->w, w, dnn_->conv, dnn_->algo,
                     scratch_base, dnn_->workspace, &zero, dnn_->y, y, fused_->bias, bias, fused_->act, dnn_->y, y),
                 "NhwcConv cudnnConvolutionBiasActivationForward");
        return;
      }
      CheckDnn(cudnnConvolutionForward(static_cast<cudnnHandle_t>(dev.dnn), &one, dnn_->x, x, dnn_->w, w,
                                       dnn_->conv, dnn_->algo, scratch_base, dnn_->workspace, &zero, dnn_->y, y),
               "NhwcConv cudnnConvolutionForward");
    } else
#endif
    if (k_ == 0) {
      CheckCuda(cudaMemsetAsync(y, 0, total * sizeof(T), dev.stream), "NhwcConv memset");
    } else {
      const int64_t in_image = win_.h * win_.w * win_.c;
      for (int64_t n0 = 0; n0 < n_; n0 += chunk_) {
        const int64_t images = std::min(chunk_, n_ - n0);
        const T* col = x + n0 * in_image;
        if (!pointwise_) {
          T* scratch = static_cast<T*>(scratch_base);
          const int64_t threads = images * p_ * k_;
          if (threads <= kInt32Elements)
            Im2ColNhwcKernel<int32_t><<<GridFor(threads), kBlock, 0, dev.stream>>>(
                win_, static_cast<int32_t>(images), col, scratch);
          else
            Im2ColNhwcKernel<int64_t><<<GridFor(threads), kBlock, 0, dev.stream>>>(win_, images, col,
                                                                                   scratch);
          CheckLaunch("NhwcConv im2col kernel");
          col = scratch;
        }
        // Column-major Y^T[M, pixels] = W^T... as cuBLAS sees it: op(A) = W
        // (K x M stored, transposed), B = col (K x pixels).
        GemmStridedBatched<T>(dev, CUBLAS_OP_T, CUBLAS_OP_N, m_, images * p_, k_, 1.f, w, k_, 0, col,
                              k_, 0, y + n0 * p_ * m_, m_, 0, 1, "NhwcConv GEMM");
      }
    }
    constexpr int V = 16 / sizeof(T);
    const bool aligned = reinterpret_cast<uintptr_t>(y) % 16 == 0 && reinterpret_cast<uintptr_t>(sum) % 16 == 0;
    if ((bias || sum || act_.active()) && m_ % V == 0 && aligned) {
      BiasActivationNhwcPackKernel<V, T><<<GridFor(total / V), kBlock, 0, dev.stream>>>(
          total / V, m_, bias, sum, act_, y);
      CheckLaunch("NhwcConv bias/activation kernel");
    } else if (bias || sum || act_.active()) {
      if (total <= kInt32Elements)
        BiasActivationNhwcKernel<int32_t><<<GridFor(total), kBlock, 0, dev.stream>>>(
            static_cast<int32_t>(total), static_cast<int32_t>(m_), bias, sum, act_, y);
      else
        BiasActivationNhwcKernel<int64_t><<<GridFor(total), kBlock, 0, dev.stream>>>(total, m_, bias,
                                                                                      sum, act_, y);
      CheckLaunch("NhwcConv bias/activation kernel");
    }
  }

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const ConvParams& p = ctx.Params<ConvParams>();
    const Shape& x = ctx.in(0).shape;
    const Shape& w = ctx.in(1).shape;
    if (p.group != 1) Unsupported(ctx, "grouped NhwcConv");
    const SpatialGeometry& geo = p.geo;
    n_ = x[0];
    m_ = w[0];
    win_.c = x[3];
    win_.h = geo.in[1];
    win_.w = geo.in[2];
    win_.oh = geo.out[1];
    win_.ow = geo.out[2];
    win_.kh = geo.kernel[1];
    win_.kw = geo.kernel[2];
    win_.stride_h = geo.stride[1];
    win_.stride_w = geo.stride[2];
    win_.pad_h = geo.pad_begin[1];
    win_.pad_w = geo.pad_begin[2];
    win_.dil_h = geo.dilation[1];
    win_.dil_w = geo.dilation[2];
    p_ = geo.out_size();
    k_ = win_.c * geo.kernel_size();
    pointwise_ = geo.IsPointwise();
    has_bias_ = p.has_bias;
    has_sum_ = ctx.HasInput(4);
    input_relu_ = ctx.node.GetInt("_kaiwu_input_relu", 0) != 0;
    act_ = DeviceActivation::From(p.act);
    if (p_ > INT_MAX || k_ > INT_MAX || m_ > INT_MAX)
      Fail(StatusCode::kUnsupported, ctx.node.Describe(),
           ": Conv GEMM dimensions beyond 32-bit are not supported by the CUDA backend");
    // The same window in the direct kernel's terms (field order of DirectConvShape).
    shape_ = DirectConvShape{n_,       win_.h,        win_.w,        win_.c,     m_,
                             win_.oh,  win_.ow,       win_.kh,       win_.kw,    win_.stride_h,
                             win_.stride_w, win_.pad_h, win_.pad_w,  win_.dil_h, win_.dil_w};
    direct_ = DirectConvPlan{};
    if constexpr (!std::is_same_v<T, float>) direct_ = PlanDirectConv(shape_, std::is_same_v<T, __nv_bfloat16>, has_sum_ || input_relu_);
#if KAIWU_WITH_CUDNN
    dnn_.reset();
    fused_.reset();
#endif
    if (direct_.valid()) {
      ctx.scratch_bytes = 0;
      return;
    }
    // The input ReLU copy, 256-byte aligned, ahead of the conv's own scratch.
    relu_bytes_ = input_relu_ ? (static_cast<size_t>(n_ * win_.h * win_.w * win_.c) * sizeof(T) + 255) & ~size_t{255}
                              : 0;
    const int64_t per_image = p_ * k_;
    const int64_t fit = kMaxScratchBytes / static_cast<int64_t>(sizeof(T)) /
                        std::max<int64_t>(per_image, 1);
    chunk_ = std::max<int64_t>(1, std::min<int64_t>({n_, fit, INT_MAX / std::max<int64_t>(p_, 1)}));
    ctx.scratch_bytes = pointwise_ ? 0 : static_cast<size_t>(chunk_ * per_image) * sizeof(T);
#if KAIWU_WITH_CUDNN
    const bool symmetric = geo.pad_begin[1] == geo.pad_end[1] && geo.pad_begin[2] == geo.pad_end[2];
    if (DnnChannelsLast() && symmetric) {
      try {
        dnn_ = MakeDnnConv(n_, m_, 1, win_, kDnnType<T>, CUDNN_TENSOR_NHWC);
      } catch (const Error&) {
        dnn_.reset();  // cuDNN refused this conv: im2col runs it
      }
      if (dnn_) {
        ctx.scratch_bytes = dnn_->workspace;
        ctx.device_needs |= kNeedDnnHandle;
        fused_ = MakeDnnBiasActivation(*dnn_, m_, kDnnType<T>, p);
      }
    }
#endif
    ctx.scratch_bytes += relu_bytes_;
  }

 private:
#if KAIWU_WITH_CUDNN
  // Bias and ReLU (or none) folded into cuDNN's conv kernel: cuDNN runs the
  // identity only with IMPLICIT_PRECOMP_GEMM. KAIWU_CUDNN_FUSE=0 turns it off.
  struct DnnBiasActivation {
    cudnnTensorDescriptor_t bias = nullptr;
    cudnnActivationDescriptor_t act = nullptr;
    ~DnnBiasActivation() {
      if (bias) cudnnDestroyTensorDescriptor(bias);
      if (act) cudnnDestroyActivationDescriptor(act);
    }
  };
  static std::unique_ptr<DnnBiasActivation> MakeDnnBiasActivation(const DnnConv& d, int64_t m,
                                                                   cudnnDataType_t type, const ConvParams& p) {
    const char* env = std::getenv("KAIWU_CUDNN_FUSE");
    if (env && std::string(env) == "0") return nullptr;
    if (!p.has_bias) return nullptr;
    const bool relu = p.act.kind == FusedActivation::Kind::kRelu;
    if (!relu && (p.act.active() || d.algo != CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM)) return nullptr;
    auto f = std::make_unique<DnnBiasActivation>();
    if (cudnnCreateTensorDescriptor(&f->bias) != CUDNN_STATUS_SUCCESS ||
        cudnnSetTensor4dDescriptor(f->bias, CUDNN_TENSOR_NCHW, type, 1, static_cast<int>(m), 1, 1) !=
            CUDNN_STATUS_SUCCESS ||
        cudnnCreateActivationDescriptor(&f->act) != CUDNN_STATUS_SUCCESS ||
        cudnnSetActivationDescriptor(f->act, relu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_IDENTITY,
                                     CUDNN_NOT_PROPAGATE_NAN, 0.0) != CUDNN_STATUS_SUCCESS)
      return nullptr;
    return f;
  }
  std::unique_ptr<DnnBiasActivation> fused_;
#endif
  ConvWindow win_{};
  DeviceActivation act_;
  int64_t n_ = 0, m_ = 0;
  int64_t p_ = 0, k_ = 0;  // output pixels per image; GEMM depth (KH * KW * C)
  int64_t chunk_ = 1;      // images per im2col + GEMM round
  bool pointwise_ = false, has_bias_ = false;
  // Fused by passes/fuse_conv_add.cc (input 4 added before the activation) and
  // passes/fuse_relu_into_nhwc_conv.cc (max(x, 0) read instead of x).
  bool has_sum_ = false, input_relu_ = false;
  size_t relu_bytes_ = 0;  // scratch for the ReLU'd input when the direct kernel does not run
  DirectConvShape shape_;
  DirectConvPlan direct_;  // valid: the direct tensor-core kernel runs this conv
#if KAIWU_WITH_CUDNN
  std::unique_ptr<DnnConv> dnn_;
#endif
};

}  // namespace

void RegisterConvKernels(KernelRegistry& r) {
  r.Register(OpId::kNhwcConv, DType::kFloat32, &MakeKernel<NhwcConvKernel<float>>);
  r.Register(OpId::kNhwcConv, DType::kFloat16, &MakeKernel<NhwcConvKernel<__half>>);
  r.Register(OpId::kNhwcConv, DType::kBFloat16, &MakeKernel<NhwcConvKernel<__nv_bfloat16>>);
  r.Register(OpId::kConv, DType::kFloat32, &MakeKernel<ConvKernel<float>>);
  r.Register(OpId::kConv, DType::kFloat16, &MakeKernel<ConvKernel<__half>>);
  r.Register(OpId::kConv, DType::kBFloat16, &MakeKernel<ConvKernel<__nv_bfloat16>>);
  RegisterPoolKernels(r);
  RegisterNormKernels(r);
}

}  // namespace cuda
}  // namespace kaiwu
