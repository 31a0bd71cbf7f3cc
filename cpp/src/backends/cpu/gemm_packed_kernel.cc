// PackedGemm (domain "kaiwu"): Y = act(A * B + bias) against B prepacked in
// column panels by the static program (passes/prepack_gemm.cc); the kernel
// only multiplies (backends/cpu/sgemm_packed.h).
#include "backends/cpu/activation.h"
#include "backends/cpu/linalg_util.h"
#include "backends/cpu/sgemm_packed.h"
#include "ops/linalg.h"

namespace kaiwu {
namespace cpu {
namespace {

class PackedGemmKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const PackedGemmParams& p = ctx.Params<PackedGemmParams>();
    m_ = p.m;
    n_ = p.n;
    k_ = p.k;
    has_bias_ = p.has_bias;
    act_ = p.act;
  }

  void Run(const KernelIO& io) const override {
    const float* a = static_cast<const float*>(io.inputs[0]);
    const float* b = static_cast<const float*>(io.inputs[1]);
    const float* bias = has_bias_ ? static_cast<const float*>(io.inputs[2]) : nullptr;
    SgemmPackedB(m_, n_, k_, a, k_, b, bias, act_, static_cast<float*>(io.outputs[0]), n_,
                 io.pool);
  }

 private:
  int64_t m_ = 0, n_ = 0, k_ = 0;
  bool has_bias_ = false;
  Activation act_;
};

}  // namespace

void RegisterPackedGemmKernel(KernelRegistry& r) {
  r.Register(OpId::kPackedGemm, DType::kFloat32, &MakeKernel<PackedGemmKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
