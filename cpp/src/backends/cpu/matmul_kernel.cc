// MatMul with numpy semantics: 1-D operands are promoted (and the added dim
// removed again), leading batch dims broadcast. When B is a matrix, A's batch
// dims fold into M and the whole op is one GEMM.
#include <algorithm>

#include "backends/cpu/activation.h"
#include "backends/cpu/linalg_util.h"

namespace kaiwu {
namespace cpu {
namespace {

class MatMulKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    ctx.ExpectDType(0, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64});
    dtype_ = ctx.in(0).dtype;
    ctx.ExpectDType(1, {dtype_});
    Shape a = ctx.in(0).shape, b = ctx.in(1).shape;
    if (a.empty() || b.empty()) ctx.Error("MatMul operands must have rank >= 1");
    const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
    if (a_vec) a.insert(a.begin(), 1);
    if (b_vec) b.push_back(1);
    const size_t ra = a.size(), rb = b.size();
    gemm_ = BatchedGemm();
    gemm_.m = a[ra - 2];
    gemm_.k = a[ra - 1];
    gemm_.n = b[rb - 1];
    if (b[rb - 2] != gemm_.k)
      ctx.Error("inner dimensions differ: ", ShapeToString(ctx.in(0).shape), " x ",
                ShapeToString(ctx.in(1).shape));
    Shape a_batch(a.begin(), a.end() - 2), b_batch(b.begin(), b.end() - 2);
    Shape batch = BroadcastShapes(ctx, a_batch, b_batch);
    Shape out = batch;
    if (!a_vec) out.push_back(gemm_.m);
    if (!b_vec) out.push_back(gemm_.n);
    ctx.SetOutput(0, dtype_, out);
    out_size_ = NumElements(out);
    act_ = Activation::FromNode(ctx.node);
    if (act_.active() && dtype_ != DType::kFloat32)
      ctx.Error("a fused activation needs float32, got ", DTypeName(dtype_));

    const int64_t a_mat = gemm_.m * gemm_.k, b_mat = gemm_.k * gemm_.n;
    if (NumElements(b_batch) == 1 && dtype_ == DType::kFloat32) {
      // B is one matrix: fold every batch dim of A (broadcast or not) into M.
      gemm_.m *= NumElements(a_batch);
      gemm_.batch = 1;  // the output batch has exactly A's elements
      return;
    }
    gemm_.batch = NumElements(batch);
    if (a_batch == batch && b_batch == batch) {
      gemm_.a_stride = a_mat;
      gemm_.b_stride = b_mat;
      return;
    }
    // Broadcast batch: offset tables per output batch index.
    std::vector<int64_t> sa = BroadcastStrides(a_batch, batch);
    std::vector<int64_t> sb = BroadcastStrides(b_batch, batch);
    gemm_.a_off.assign(gemm_.batch, 0);
    gemm_.b_off.assign(gemm_.batch, 0);
    for (int64_t i = 0; i < gemm_.batch; ++i) {
      int64_t rem = i, oa = 0, ob = 0;
      for (int d = static_cast<int>(batch.size()) - 1; d >= 0; --d) {
        int64_t idx = rem % batch[d];
        rem /= batch[d];
        oa += idx * sa[d];
        ob += idx * sb[d];
      }
      gemm_.a_off[i] = oa * a_mat;
      gemm_.b_off[i] = ob * b_mat;
    }
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

void RegisterMatMulKernel(KernelRegistry& r) { r.Register(OpId::kMatMul, kAnyDType, &MakeKernel<MatMulKernel>); }

}  // namespace cpu
}  // namespace kaiwu
