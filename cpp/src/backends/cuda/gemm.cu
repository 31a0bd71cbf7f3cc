// Gemm and MatMul (float32, and float16 / bfloat16 on tensor cores with float
// accumulation) on cuBLAS, and the registration of the CUDA
// linear-algebra kernels. Both run a beta = 0 GEMM, then at most one epilogue
// kernel adds Gemm's broadcast C and applies the fused "_kaiwu_act" activation;
// a Gemm whose C is a column bias (and/or whose activation is ReLU) is one
// cuBLASLt matmul with that epilogue instead (gemm_lt.h), and a batched MatMul
// of a few rows per batch item one kernel of our own (SkinnyBatchedMatMulKernel).
#include <cstdlib>
#include <string>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/gemm_lt.h"
#include "backends/cuda/gemm_util.h"
#include "backends/cuda/half.cuh"
#include "backends/linalg_index.h"
#include "ops/linalg.h"

namespace kaiwu {
namespace cuda {
namespace {

// y[i] = act(y[i] + beta * C[row * c_row + col * c_col]) over y as [total / cols, cols];
// without C (c null) only the activation.
template <typename T>
__global__ void BiasActivationKernel(T* y, int64_t total, int64_t cols, const T* c,
                                     int64_t c_row, int64_t c_col, float beta,
                                     DeviceActivation act) {
  KAIWU_CUDA_LOOP(i, total) {
    float v = ToFloat(y[i]);
    if (c) {
      const int64_t row = i / cols, col = i - row * cols;
      v += beta * ToFloat(c[row * c_row + col * c_col]);
    }
    y[i] = FromFloat<T>(act(v));
  }
}

template <typename T>
void LaunchBiasActivation(const DeviceContext& dev, T* y, int64_t total, int64_t cols,
                          const T* c, int64_t c_row, int64_t c_col, float beta,
                          DeviceActivation act) {
  if (total == 0) return;
  BiasActivationKernel<<<GridFor(total), kBlock, 0, dev.stream>>>(y, total, cols, c, c_row, c_col,
                                                                  beta, act);
  CheckLaunch("Gemm/MatMul epilogue kernel");
}

// Y = act(alpha * op(A) * op(B) + beta * C), C broadcast unidirectionally to [M, N].
template <typename T>
class GemmKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const GemmParams& p = ctx.Params<GemmParams>();
    const Shape& a = ctx.in(0).shape;
    const Shape& b = ctx.in(1).shape;
    trans_a_ = p.trans_a;
    trans_b_ = p.trans_b;
    alpha_ = p.alpha;
    beta_ = p.beta;
    m_ = p.m;
    k_ = p.k;
    n_ = p.n;
    lda_ = a[1];
    ldb_ = b[1];
    // As on the CPU: beta == 0 ignores C entirely.
    use_c_ = p.has_c && beta_ != 0.f;
    c_row_stride_ = p.c_row_stride;
    c_col_stride_ = p.c_col_stride;
    act_ = DeviceActivation::From(p.act);
    CheckBlasInt(ctx, m_, "M");
    CheckBlasInt(ctx, n_, "N");
    CheckBlasInt(ctx, k_, "K");
    CheckBlasInt(ctx, lda_, "lda");
    CheckBlasInt(ctx, ldb_, "ldb");
    // A bias over columns (beta 1) and/or ReLU: in cuBLASLt's epilogue.
    using K = FusedActivation::Kind;
    const bool bias = use_c_ && beta_ == 1.f && c_row_stride_ == 0 && c_col_stride_ == 1;
    const bool relu = p.act.kind == K::kRelu;
    lt_ = LtGemm();
    if ((bias || (!use_c_ && relu)) && (relu || p.act.kind == K::kNone))
      lt_.Plan(CudaDataType<T>::value, trans_a_, trans_b_, m_, n_, k_, lda_, ldb_, n_, bias, relu);
  }

  void Run(const KernelIO& io) const override {
    const DeviceContext& dev = Dev(io);
    const T* a = static_cast<const T*>(io.inputs[0]);
    const T* b = static_cast<const T*>(io.inputs[1]);
    T* y = static_cast<T*>(io.outputs[0]);
    if (lt_.planned() && lt_.Run(dev, alpha_, a, b, y, use_c_ ? io.inputs[2] : nullptr)) return;
    RowMajorGemm<T>(dev, trans_a_, trans_b_, m_, n_, k_, alpha_, a, lda_, b, ldb_, y, n_);
    if (use_c_ || act_.active())
      LaunchBiasActivation<T>(dev, y, m_ * n_, n_,
                           use_c_ ? static_cast<const T*>(io.inputs[2]) : nullptr,
                           c_row_stride_, c_col_stride_, beta_, act_);
  }

 private:
  bool trans_a_ = false, trans_b_ = false, use_c_ = false;
  float alpha_ = 1.f, beta_ = 1.f;
  int64_t m_ = 0, n_ = 0, k_ = 0, lda_ = 0, ldb_ = 0;
  int64_t c_row_stride_ = 0, c_col_stride_ = 0;
  DeviceActivation act_;
  LtGemm lt_;  // planned where cuBLASLt takes the bias / ReLU
};

// Batched products of a few rows each (m <= kSkinnyMaxRows, k * n small): one
// warp per batch item, its A rows staged in shared memory as float, each lane
// one output column at a time over all of k (B read in place, [k, n] or, with
// trans_b, [n, k]), float accumulation, the fused activation applied. A policy's
// single-query attention over units ([B, heads, 1, d] x [B, heads, d, N]) is
// thousands of such products, where cuBLAS's batched GEMM spends a 64-row tile
// on each (multi_input b1024: 14.7 us a MatMul).
constexpr int kSkinnyMaxRows = 4;
constexpr int kSkinnyWarps = 4;                 // batch items per block
constexpr int64_t kSkinnyMaxAElems = 1024;      // m * k staged per warp
constexpr int64_t kSkinnyMaxProduct = 16384;    // k * n per batch item

template <typename T, int M>
__global__ void __launch_bounds__(32 * kSkinnyWarps)
    SkinnyBatchedMatMulKernel(const T* __restrict__ a, int64_t a_stride, const T* __restrict__ b,
                              int64_t b_stride, T* __restrict__ y, int64_t batch, int n, int k,
                              int trans_b, DeviceActivation act) {
  __shared__ float staged[kSkinnyWarps][kSkinnyMaxAElems];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kSkinnyWarps + warp;
  if (item >= batch) return;  // whole warps only: nothing below waits for the block
  float* as = staged[warp];
  const T* ai = a + item * a_stride;
  const T* bi = b + item * b_stride;
  for (int i = lane; i < M * k; i += 32) as[i] = ToFloat(ai[i]);
  __syncwarp();
  T* yi = y + item * static_cast<int64_t>(M) * n;
  const int64_t col_step = trans_b ? k : 1, k_step = trans_b ? 1 : n;
  for (int j = lane; j < n; j += 32) {
    float acc[M];
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0.f;
    const T* bj = bi + j * col_step;
    for (int kk = 0; kk < k; ++kk) {
      const float bv = ToFloat(bj[kk * k_step]);
#pragma unroll
      for (int r = 0; r < M; ++r) acc[r] = fmaf(as[r * k + kk], bv, acc[r]);
    }
#pragma unroll
    for (int r = 0; r < M; ++r) yi[static_cast<int64_t>(r) * n + j] = FromFloat<T>(act(acc[r]));
  }
}

/// True unless KAIWU_SKINNY_MATMUL is "0" (read when a plan is made).
bool SkinnyMatMulEnabled() {
  const char* env = std::getenv("KAIWU_SKINNY_MATMUL");
  return !(env && std::string(env) == "0");
}

// MatMul with numpy semantics (1-D operands promoted, batch dims broadcast),
// then the fused activation.
template <typename T>
class MatMulKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const MatMulParams& p = ctx.Params<MatMulParams>();
    m_ = p.m;
    k_ = p.k;
    n_ = p.n;
    trans_b_ = p.trans_b;
    const int64_t a_count = NumElements(p.a_batch), b_count = NumElements(p.b_batch);
    batch_ = NumElements(p.batch);
    out_size_ = ctx.outputs[0].size();
    act_ = DeviceActivation::From(p.act);
    const int64_t a_mat = m_ * k_, b_mat = k_ * n_;
    a_off_.clear();
    b_off_.clear();
    if (b_count == 1) {
      // One B: every batch dim of A (broadcast or not) folds into M; the
      // output batch then has exactly A's elements.
      mode_ = Mode::kOneGemm;
      m_ *= a_count;
      batch_ = 1;
    } else if ((a_count == batch_ || a_count == 1) && b_count == batch_) {
      // A operand whose batch has as many elements as the output's is not
      // broadcast (each of its dims equals the output's), so it is dense;
      // one of a single matrix is broadcast along every batch dim: stride 0.
      mode_ = Mode::kStrided;
      a_stride_ = a_count == 1 ? 0 : a_mat;
      b_stride_ = b_mat;
    } else {
      // Partial broadcast: one GEMM per output batch index at offsets precomputed here.
      mode_ = Mode::kLoop;
      BatchMatrixOffsets(p.a_batch, p.b_batch, p.batch, a_mat, b_mat, &a_off_, &b_off_);
    }
    CheckBlasInt(ctx, m_, "M");
    CheckBlasInt(ctx, n_, "N");
    CheckBlasInt(ctx, k_, "K");
    CheckBlasInt(ctx, batch_, "batch count");
    skinny_ = mode_ == Mode::kStrided && m_ >= 1 && m_ <= kSkinnyMaxRows && k_ >= 1 &&
              m_ * k_ <= kSkinnyMaxAElems && k_ * n_ <= kSkinnyMaxProduct && SkinnyMatMulEnabled();
  }

  void Run(const KernelIO& io) const override {
    const DeviceContext& dev = Dev(io);
    const T* a = static_cast<const T*>(io.inputs[0]);
    const T* b = static_cast<const T*>(io.inputs[1]);
    T* y = static_cast<T*>(io.outputs[0]);
    const int64_t ldb = trans_b_ ? k_ : n_;  // B's row stride as stored
    switch (mode_) {
      case Mode::kOneGemm:
        RowMajorGemm<T>(dev, false, trans_b_, m_, n_, k_, 1.f, a, k_, b, ldb, y, n_);
        break;
      case Mode::kStrided:
        if (skinny_) return LaunchSkinny(dev, a, b, y);
        RowMajorGemmStridedBatched<T>(dev, m_, n_, k_, a, a_stride_, b, b_stride_, y, batch_, trans_b_);
        break;
      case Mode::kLoop:
        for (int64_t i = 0; i < batch_; ++i)
          RowMajorGemm<T>(dev, false, trans_b_, m_, n_, k_, 1.f, a + a_off_[i], k_, b + b_off_[i], ldb,
                          y + i * m_ * n_, n_);
        break;
    }
    if (act_.active())
      LaunchBiasActivation<T>(dev, y, out_size_, 1, static_cast<const T*>(nullptr), 0, 0, 0.f, act_);
  }

 private:
  void LaunchSkinny(const DeviceContext& dev, const T* a, const T* b, T* y) const {
    if (batch_ == 0 || n_ == 0) return;
    const unsigned blocks = static_cast<unsigned>((batch_ + kSkinnyWarps - 1) / kSkinnyWarps);
    const int n = static_cast<int>(n_), k = static_cast<int>(k_), tb = trans_b_ ? 1 : 0;
    switch (m_) {
#define KAIWU_SKINNY(M)                                                                       \
  case M:                                                                                     \
    SkinnyBatchedMatMulKernel<T, M><<<blocks, 32 * kSkinnyWarps, 0, dev.stream>>>(            \
        a, a_stride_, b, b_stride_, y, batch_, n, k, tb, act_);                               \
    break;
      KAIWU_SKINNY(1)
      KAIWU_SKINNY(2)
      KAIWU_SKINNY(3)
      KAIWU_SKINNY(4)
#undef KAIWU_SKINNY
    }
    CheckLaunch("MatMul (few rows a batch item) kernel");
  }

  enum class Mode { kOneGemm, kStrided, kLoop };
  Mode mode_ = Mode::kOneGemm;
  bool skinny_ = false;  // kStrided with few rows: SkinnyBatchedMatMulKernel
  int64_t m_ = 0, n_ = 0, k_ = 0, batch_ = 1, out_size_ = 0;
  int64_t a_stride_ = 0, b_stride_ = 0;
  bool trans_b_ = false;                // B stored [.., N, K]
  std::vector<int64_t> a_off_, b_off_;  // kLoop: element offsets per output batch index
  DeviceActivation act_;
};

}  // namespace

void RegisterLinalgKernels(KernelRegistry& r) {
  r.Register(OpId::kGemm, DType::kFloat32, &MakeKernel<GemmKernel<float>>);
  r.Register(OpId::kGemm, DType::kFloat16, &MakeKernel<GemmKernel<__half>>);
  r.Register(OpId::kGemm, DType::kBFloat16, &MakeKernel<GemmKernel<__nv_bfloat16>>);
  r.Register(OpId::kMatMul, DType::kFloat32, &MakeKernel<MatMulKernel<float>>);
  r.Register(OpId::kMatMul, DType::kFloat16, &MakeKernel<MatMulKernel<__half>>);
  r.Register(OpId::kMatMul, DType::kBFloat16, &MakeKernel<MatMulKernel<__nv_bfloat16>>);
  RegisterRnnKernels(r);
  RegisterEinsumKernel(r);
  RegisterFusedMlpKernel(r);
  RegisterAttentionKernel(r);
}

}  // namespace cuda
}  // namespace kaiwu
