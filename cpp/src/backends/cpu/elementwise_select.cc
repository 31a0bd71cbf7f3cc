// Where(condition, X, Y) with three-way numpy broadcasting, for any dtype:
// a select only moves elements, so it runs on unsigned words of the dtype's size.
#include "backends/cpu/elementwise_util.h"

namespace kaiwu {
namespace cpu {
namespace {

class WhereKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    dtype_ = ctx.in(1).dtype;
    plan_ = MakeBroadcastPlan(ctx, {ctx.in(0).shape, ctx.in(1).shape, ctx.in(2).shape},
                              ctx.outputs[0].shape);
  }

  void Run(const KernelIO& io) const override {
    switch (DTypeSize(dtype_)) {
      case 1: return RunTyped<uint8_t>(io);
      case 2: return RunTyped<uint16_t>(io);
      case 4: return RunTyped<uint32_t>(io);
      case 8: return RunTyped<uint64_t>(io);
      default: Fail(StatusCode::kInternal, "Where: unsupported element size");
    }
  }

 private:
  template <typename W>
  void RunTyped(const KernelIO& io) const {
    TernaryLoop(plan_, static_cast<const uint8_t*>(io.inputs[0]),
                static_cast<const W*>(io.inputs[1]), static_cast<const W*>(io.inputs[2]),
                static_cast<W*>(io.outputs[0]), [](uint8_t c, W x, W y) { return c ? x : y; },
                io.pool);
  }

  DType dtype_ = DType::kUndefined;
  BroadcastPlan plan_;
};

}  // namespace

// Keyed on X's dtype (Where's type input is 1): every dtype has a word size.
void RegisterSelectKernels(KernelRegistry& r) {
  r.Register(OpId::kWhere,
             {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,
              DType::kUInt8, DType::kInt16, DType::kInt32, DType::kInt64, DType::kBool},
             &MakeKernel<WhereKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
