// MatMul with numpy semantics: 1-D operands are promoted (and the added dim
// removed again), leading batch dims broadcast. When B is a matrix, A's batch
// dims fold into M and the whole op is one GEMM.
#include <algorithm>

#include "backends/cpu/activation.h"
#include "backends/cpu/linalg_util.h"
#include "backends/linalg_index.h"
#include "ops/linalg.h"

namespace kaiwu {
namespace cpu {
namespace {

class MatMulKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const MatMulParams& p = ctx.Params<MatMulParams>();
    dtype_ = ctx.outputs[0].dtype;
    out_size_ = ctx.outputs[0].size();
    act_ = p.act;
    gemm_ = BatchedGemm();
    gemm_.m = p.m;
    gemm_.k = p.k;
    gemm_.n = p.n;
    gemm_.trans_b = p.trans_b;  // B as [.., N, K]: the float32 GEMM reads it transposed
    if (p.trans_b && dtype_ != DType::kFloat32)
      Fail(StatusCode::kUnsupported, ctx.node.Describe(), ": a transposed B (_kaiwu_trans_b) on ",
           DTypeName(dtype_), " (float32 only)");
    const int64_t a_mat = gemm_.m * gemm_.k, b_mat = gemm_.k * gemm_.n;
    if (NumElements(p.b_batch) == 1 && dtype_ == DType::kFloat32) {
      // B is one matrix: fold every batch dim of A (broadcast or not) into M.
      gemm_.m *= NumElements(p.a_batch);
      gemm_.batch = 1;  // the output batch has exactly A's elements
      return;
    }
    gemm_.batch = NumElements(p.batch);
    if (p.a_batch == p.batch && p.b_batch == p.batch) {
      gemm_.a_stride = a_mat;
      gemm_.b_stride = b_mat;
      return;
    }
    // Broadcast batch: offset tables per output batch index.
    BatchMatrixOffsets(p.a_batch, p.b_batch, p.batch, a_mat, b_mat, &gemm_.a_off, &gemm_.b_off);
  }

  void Run(const KernelIO& io) const override {
    switch (dtype_) {
      case DType::kFloat32:
        gemm_.Run(static_cast<const float*>(io.inputs[0]), static_cast<const float*>(io.inputs[1]),
                  static_cast<float*>(io.outputs[0]), io.pool);
        if (act_.active()) {
          float* y = static_cast<float*>(io.outputs[0]);
          io.pool->ParallelFor(out_size_, 4.0, [&](int64_t b, int64_t e) { act_.Apply(y + b, e - b); });
        }
        break;
      case DType::kFloat64: RunGeneric<double>(io); break;
      case DType::kInt32: RunGeneric<int32_t>(io); break;
      default: RunGeneric<int64_t>(io); break;
    }
  }

 private:
  template <typename T>
  void RunGeneric(const KernelIO& io) const {
    BatchedGemmNaive(gemm_, static_cast<const T*>(io.inputs[0]),
                     static_cast<const T*>(io.inputs[1]), static_cast<T*>(io.outputs[0]),
                     io.pool);
  }

  DType dtype_ = DType::kFloat32;
  BatchedGemm gemm_;
  Activation act_;
  int64_t out_size_ = 0;
};

}  // namespace

void RegisterMatMulKernel(KernelRegistry& r) {
  r.Register(OpId::kMatMul, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64},
             &MakeKernel<MatMulKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
