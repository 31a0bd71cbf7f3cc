// Gemm and MatMul (float32) on cuBLAS, and the registration of the CUDA
// linear-algebra kernels. Both run a beta = 0 GEMM, then at most one epilogue
// kernel adds Gemm's broadcast C and applies the fused "_kaiwu_act" activation.
#include "backends/cpu/linalg_util.h"
#include "backends/cuda/device_util.cuh"
#include "backends/cuda/gemm_util.h"

namespace kaiwu {
namespace cuda {
namespace {

// y[i] = act(y[i] + beta * C[row * c_row + col * c_col]) over y as [total / cols, cols];
// without C (c null) only the activation.
__global__ void BiasActivationKernel(float* y, int64_t total, int64_t cols, const float* c,
                                     int64_t c_row, int64_t c_col, float beta,
                                     DeviceActivation act) {
  KAIWU_CUDA_LOOP(i, total) {
    float v = y[i];
    if (c) {
      const int64_t row = i / cols, col = i - row * cols;
      v += beta * c[row * c_row + col * c_col];
    }
    y[i] = act(v);
  }
}

void LaunchBiasActivation(const DeviceContext& dev, float* y, int64_t total, int64_t cols,
                          const float* c, int64_t c_row, int64_t c_col, float beta,
                          DeviceActivation act) {
  if (total == 0) return;
  BiasActivationKernel<<<GridFor(total), kBlock, 0, dev.stream>>>(y, total, cols, c, c_row, c_col,
                                                                  beta, act);
  CheckLaunch("Gemm/MatMul epilogue kernel");
}

void RequireFloat32(const PrepareContext& ctx) {
  for (int i : {0, 1}) RequireDType(ctx, i, {DType::kFloat32});
}

// Y = act(alpha * op(A) * op(B) + beta * C), C broadcast unidirectionally to [M, N].
class GemmKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const Node& node = ctx.node;
    RequireFloat32(ctx);
    const Shape& a = ctx.in(0).shape;
    const Shape& b = ctx.in(1).shape;
    trans_a_ = node.GetInt("transA", 0) != 0;
    trans_b_ = node.GetInt("transB", 0) != 0;
    alpha_ = node.GetFloat("alpha", 1.f);
    beta_ = node.GetFloat("beta", 1.f);
    m_ = trans_a_ ? a[1] : a[0];
    k_ = trans_a_ ? a[0] : a[1];
    n_ = trans_b_ ? b[0] : b[1];
    lda_ = a[1];
    ldb_ = b[1];
    // As on the CPU: beta == 0 ignores C entirely.
    use_c_ = ctx.HasInput(2) && beta_ != 0.f;
    if (use_c_) {
      const Shape& c = ctx.in(2).shape;  // rank <= 2, broadcastable (checked by the CPU Prepare)
      const int64_t cm = c.size() == 2 ? c[0] : 1;
      const int64_t cn = c.empty() ? 1 : c.back();
      c_row_stride_ = cm == 1 ? 0 : cn;
      c_col_stride_ = cn == 1 ? 0 : 1;
    }
    act_ = DeviceActivation::From(cpu::Activation::FromNode(node));
    CheckBlasInt(ctx, m_, "M");
    CheckBlasInt(ctx, n_, "N");
    CheckBlasInt(ctx, k_, "K");
    CheckBlasInt(ctx, lda_, "lda");
    CheckBlasInt(ctx, ldb_, "ldb");
  }

  void Run(const KernelIO& io) const override {
    const DeviceContext& dev = Dev(io);
    const float* a = static_cast<const float*>(io.inputs[0]);
    const float* b = static_cast<const float*>(io.inputs[1]);
    float* y = static_cast<float*>(io.outputs[0]);
    RowMajorSgemm(dev, trans_a_, trans_b_, m_, n_, k_, alpha_, a, lda_, b, ldb_, y, n_);
    if (use_c_ || act_.active())
      LaunchBiasActivation(dev, y, m_ * n_, n_,
                           use_c_ ? static_cast<const float*>(io.inputs[2]) : nullptr,
                           c_row_stride_, c_col_stride_, beta_, act_);
  }

 private:
  bool trans_a_ = false, trans_b_ = false, use_c_ = false;
  float alpha_ = 1.f, beta_ = 1.f;
  int64_t m_ = 0, n_ = 0, k_ = 0, lda_ = 0, ldb_ = 0;
  int64_t c_row_stride_ = 0, c_col_stride_ = 0;
  DeviceActivation act_;
};

// MatMul with numpy semantics (1-D operands promoted, batch dims broadcast),
// then the fused activation.
class MatMulKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    RequireFloat32(ctx);
    Shape a = ctx.in(0).shape, b = ctx.in(1).shape;  // ranks >= 1 (checked by the CPU Prepare)
    if (a.size() == 1) a.insert(a.begin(), 1);
    if (b.size() == 1) b.push_back(1);
    m_ = a[a.size() - 2];
    k_ = a.back();
    n_ = b.back();
    const Shape a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
    const Shape batch = BroadcastShapes(ctx, a_batch, b_batch);
    const int64_t a_count = NumElements(a_batch), b_count = NumElements(b_batch);
    batch_ = NumElements(batch);
    out_size_ = ctx.outputs[0].size();
    act_ = DeviceActivation::From(cpu::Activation::FromNode(ctx.node));
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
      const std::vector<int64_t> sa = cpu::BroadcastStrides(a_batch, batch);
      const std::vector<int64_t> sb = cpu::BroadcastStrides(b_batch, batch);
      a_off_.assign(batch_, 0);
      b_off_.assign(batch_, 0);
      for (int64_t i = 0; i < batch_; ++i) {
        int64_t rem = i, oa = 0, ob = 0;
        for (int d = static_cast<int>(batch.size()) - 1; d >= 0; --d) {
          const int64_t idx = rem % batch[d];
          rem /= batch[d];
          oa += idx * sa[d];
          ob += idx * sb[d];
        }
        a_off_[i] = oa * a_mat;
        b_off_[i] = ob * b_mat;
      }
    }
    CheckBlasInt(ctx, m_, "M");
    CheckBlasInt(ctx, n_, "N");
    CheckBlasInt(ctx, k_, "K");
    CheckBlasInt(ctx, batch_, "batch count");
  }

  void Run(const KernelIO& io) const override {
    const DeviceContext& dev = Dev(io);
    const float* a = static_cast<const float*>(io.inputs[0]);
    const float* b = static_cast<const float*>(io.inputs[1]);
    float* y = static_cast<float*>(io.outputs[0]);
    switch (mode_) {
      case Mode::kOneGemm:
        RowMajorSgemm(dev, false, false, m_, n_, k_, 1.f, a, k_, b, n_, y, n_);
        break;
      case Mode::kStrided:
        RowMajorSgemmStridedBatched(dev, m_, n_, k_, a, a_stride_, b, b_stride_, y, batch_);
        break;
      case Mode::kLoop:
        for (int64_t i = 0; i < batch_; ++i)
          RowMajorSgemm(dev, false, false, m_, n_, k_, 1.f, a + a_off_[i], k_, b + b_off_[i], n_,
                        y + i * m_ * n_, n_);
        break;
    }
    if (act_.active()) LaunchBiasActivation(dev, y, out_size_, 1, nullptr, 0, 0, 0.f, act_);
  }

 private:
  enum class Mode { kOneGemm, kStrided, kLoop };
  Mode mode_ = Mode::kOneGemm;
  int64_t m_ = 0, n_ = 0, k_ = 0, batch_ = 1, out_size_ = 0;
  int64_t a_stride_ = 0, b_stride_ = 0;
  std::vector<int64_t> a_off_, b_off_;  // kLoop: element offsets per output batch index
  DeviceActivation act_;
};

}  // namespace

void RegisterLinalgKernels(KernelRegistry& r) {
  r.Register(OpId::kGemm, kAnyDType, &MakeKernel<GemmKernel>);
  r.Register(OpId::kMatMul, kAnyDType, &MakeKernel<MatMulKernel>);
  RegisterRnnKernels(r);
  RegisterEinsumKernel(r);
}

}  // namespace cuda
}  // namespace kaiwu
