// Broadcasting comparisons (Equal Less Greater LessOrEqual GreaterOrEqual) and
// logical ops on bool (And Or Xor Not). All produce bool.
#include <cstring>

#include "backends/cpu/elementwise_util.h"

namespace kaiwu {
namespace cpu {
namespace {

enum class CmpOp { kEqual, kLess, kGreater, kLessEqual, kGreaterEqual, kAnd, kOr, kXor };

class CompareKernel : public Kernel {
 public:
  explicit CompareKernel(CmpOp op) : op_(op) {}

  void Prepare(PrepareContext& ctx) override {
    dtype_ = ctx.in(0).dtype;
    plan_ = MakeBroadcastPlan(ctx, {ctx.in(0).shape, ctx.in(1).shape}, ctx.outputs[0].shape);
  }

  void Run(const KernelIO& io) const override {
    bool* o = static_cast<bool*>(io.outputs[0]);
    if (dtype_ == DType::kBool) {
      // Bytes holding 0/1, so the loops run on uint8_t and vectorise.
      const uint8_t* a = static_cast<const uint8_t*>(io.inputs[0]);
      const uint8_t* b = static_cast<const uint8_t*>(io.inputs[1]);
      uint8_t* z = reinterpret_cast<uint8_t*>(o);
      switch (op_) {
        case CmpOp::kAnd: return Loop(a, b, z, [](uint8_t x, uint8_t y) { return uint8_t(x & y); }, io);
        case CmpOp::kOr: return Loop(a, b, z, [](uint8_t x, uint8_t y) { return uint8_t(x | y); }, io);
        case CmpOp::kXor: return Loop(a, b, z, [](uint8_t x, uint8_t y) { return uint8_t(x ^ y); }, io);
        default: return Loop(a, b, z, [](uint8_t x, uint8_t y) { return uint8_t(x == y); }, io);
      }
    }
    KAIWU_DISPATCH_NUMERIC(dtype_, RunTyped<T>(io));
  }

 private:
  template <typename A, typename O, typename F>
  void Loop(const A* a, const A* b, O* o, const F& f, const KernelIO& io) const {
    BinaryLoop(plan_, a, b, o, f, io.pool);
  }

  template <typename T>
  void RunTyped(const KernelIO& io) const {
    const T* a = static_cast<const T*>(io.inputs[0]);
    const T* b = static_cast<const T*>(io.inputs[1]);
    bool* o = static_cast<bool*>(io.outputs[0]);
    switch (op_) {
      case CmpOp::kEqual: return Loop(a, b, o, [](T x, T y) { return x == y; }, io);
      case CmpOp::kLess: return Loop(a, b, o, [](T x, T y) { return x < y; }, io);
      case CmpOp::kGreater: return Loop(a, b, o, [](T x, T y) { return x > y; }, io);
      case CmpOp::kLessEqual: return Loop(a, b, o, [](T x, T y) { return x <= y; }, io);
      case CmpOp::kGreaterEqual: return Loop(a, b, o, [](T x, T y) { return x >= y; }, io);
      default: Fail(StatusCode::kInternal, "comparison on a non-bool logical op");
    }
  }

  CmpOp op_;
  DType dtype_ = DType::kUndefined;
  BroadcastPlan plan_;
};

class NotKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override { size_ = ctx.in(0).size(); }

  void Run(const KernelIO& io) const override {
    const uint8_t* x = static_cast<const uint8_t*>(io.inputs[0]);
    uint8_t* y = static_cast<uint8_t*>(io.outputs[0]);
    ParallelElements(io.pool, size_, 0.25, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = x[i] ^ 1;
    });
  }

 private:
  int64_t size_ = 0;
};

template <CmpOp kOp>
std::unique_ptr<Kernel> MakeCompare(const Node&) {
  return std::make_unique<CompareKernel>(kOp);
}

}  // namespace

void RegisterCompareKernels(KernelRegistry& r) {
  const std::initializer_list<DType> numeric = {DType::kFloat32, DType::kFloat64, DType::kInt8,
                                                DType::kUInt8,   DType::kInt16,   DType::kInt32,
                                                DType::kInt64};
  const std::initializer_list<DType> numeric_bool = {
      DType::kFloat32, DType::kFloat64, DType::kInt8,  DType::kUInt8,
      DType::kInt16,   DType::kInt32,   DType::kInt64, DType::kBool};
  r.Register(OpId::kEqual, numeric_bool, &MakeCompare<CmpOp::kEqual>);
  r.Register(OpId::kLess, numeric, &MakeCompare<CmpOp::kLess>);
  r.Register(OpId::kGreater, numeric, &MakeCompare<CmpOp::kGreater>);
  r.Register(OpId::kLessOrEqual, numeric, &MakeCompare<CmpOp::kLessEqual>);
  r.Register(OpId::kGreaterOrEqual, numeric, &MakeCompare<CmpOp::kGreaterEqual>);
  r.Register(OpId::kAnd, DType::kBool, &MakeCompare<CmpOp::kAnd>);
  r.Register(OpId::kOr, DType::kBool, &MakeCompare<CmpOp::kOr>);
  r.Register(OpId::kXor, DType::kBool, &MakeCompare<CmpOp::kXor>);
  r.Register(OpId::kNot, DType::kBool, &MakeKernel<NotKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
