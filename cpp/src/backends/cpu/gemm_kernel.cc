// Gemm: Y = alpha * op(A) * op(B) + beta * C, C broadcast unidirectionally to [M, N].
#include <algorithm>

#include "backends/cpu/activation.h"
#include "backends/cpu/linalg_util.h"
#include "ops/linalg.h"

namespace kaiwu {
namespace cpu {
namespace {

class GemmKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const GemmParams& p = ctx.Params<GemmParams>();
    dtype_ = ctx.outputs[0].dtype;
    trans_a_ = p.trans_a;
    trans_b_ = p.trans_b;
    alpha_ = p.alpha;
    beta_ = p.beta;
    m_ = p.m;
    n_ = p.n;
    k_ = p.k;
    has_c_ = p.has_c;
    c_row_stride_ = p.c_row_stride;
    c_col_stride_ = p.c_col_stride;
    act_ = p.act;
  }

  void Run(const KernelIO& io) const override {
    switch (dtype_) {
      case DType::kFloat32: RunFloat(io); break;
      case DType::kFloat64: RunGeneric<double>(io); break;
      case DType::kInt32: RunGeneric<int32_t>(io); break;
      default: RunGeneric<int64_t>(io); break;
    }
  }

 private:
  template <typename T>
  void FillBias(const T* c, T* y, ThreadPool* pool) const {
    pool->ParallelFor(m_, static_cast<double>(n_), [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0; i < r1; ++i) {
        const T* crow = c + i * c_row_stride_;
        T* yrow = y + i * n_;
        T beta = static_cast<T>(beta_);
        if (c_col_stride_ == 0) {
          for (int64_t j = 0; j < n_; ++j) yrow[j] = beta * crow[0];
        } else {
          for (int64_t j = 0; j < n_; ++j) yrow[j] = beta * crow[j];
        }
      }
    });
  }

  void RunFloat(const KernelIO& io) const {
    const float* a = static_cast<const float*>(io.inputs[0]);
    const float* b = static_cast<const float*>(io.inputs[1]);
    float* y = static_cast<float*>(io.outputs[0]);
    bool use_c = has_c_ && beta_ != 0.f;
    if (use_c) FillBias(static_cast<const float*>(io.inputs[2]), y, io.pool);
    Sgemm(trans_a_, trans_b_, m_, n_, k_, alpha_, a, trans_a_ ? m_ : k_, b, trans_b_ ? k_ : n_,
          use_c ? 1.f : 0.f, y, n_, io.pool);
    if (act_.active())
      io.pool->ParallelFor(m_, 4.0 * n_, [&](int64_t r0, int64_t r1) { act_.Apply(y + r0 * n_, (r1 - r0) * n_); });
  }

  template <typename T>
  void RunGeneric(const KernelIO& io) const {
    const T* a = static_cast<const T*>(io.inputs[0]);
    const T* b = static_cast<const T*>(io.inputs[1]);
    T* y = static_cast<T*>(io.outputs[0]);
    bool use_c = has_c_ && beta_ != 0.f;
    if (use_c) FillBias(static_cast<const T*>(io.inputs[2]), y, io.pool);
    const int64_t as_row = trans_a_ ? 1 : k_, as_k = trans_a_ ? m_ : 1;
    const int64_t bs_k = trans_b_ ? 1 : n_, bs_col = trans_b_ ? k_ : 1;
    const T alpha = static_cast<T>(alpha_);
    io.pool->ParallelFor(m_, 2.0 * n_ * k_, [&](int64_t r0, int64_t r1) {
      for (int64_t i = r0; i < r1; ++i)
        for (int64_t j = 0; j < n_; ++j) {
          T acc = T(0);
          for (int64_t p = 0; p < k_; ++p) acc += a[i * as_row + p * as_k] * b[p * bs_k + j * bs_col];
          y[i * n_ + j] = alpha * acc + (use_c ? y[i * n_ + j] : T(0));
        }
    });
  }

  DType dtype_ = DType::kFloat32;
  Activation act_;
  bool trans_a_ = false, trans_b_ = false, has_c_ = false;
  float alpha_ = 1.f, beta_ = 1.f;
  int64_t m_ = 0, n_ = 0, k_ = 0;
  int64_t c_row_stride_ = 0, c_col_stride_ = 0;
};

}  // namespace

void RegisterGemmKernel(KernelRegistry& r) {
  r.Register(OpId::kGemm, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64},
             &MakeKernel<GemmKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
