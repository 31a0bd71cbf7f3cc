#include "plan/node_plan.h"

#include <vector>

#include "core/memory_budget.h"

namespace kaiwu {

namespace {

void CheckOutputBudget(const PrepareContext& ctx, const OutputBudget& budget) {
  for (size_t o = 0; o < ctx.outputs.size(); ++o) {
    const TensorInfo& t = ctx.outputs[o];
    if (!t.present) continue;
    uint64_t bytes = 0;
    if (!TensorBytes(t.shape, t.dtype, &bytes))
      Fail(budget.code, ctx.node.Describe(), ": output ", o, " would have shape ",
           ShapeToString(t.shape), ", whose size in bytes does not fit in 64 bits", budget.cause);
    if (bytes > budget.bytes)
      Fail(budget.code, ctx.node.Describe(), ": output ", o, " would have shape ",
           ShapeToString(t.shape), " (", DTypeName(t.dtype), ", ", FormatBytes(bytes),
           "), more than ", BudgetText(budget.bytes), budget.cause);
  }
}

}  // namespace

void InferNode(PrepareContext& ctx, const OutputBudget* budget) {
  InferOp(ctx);
  if (budget) {
    CheckOutputBudget(ctx, *budget);
  } else {
    CheckOutputBudget(ctx, OutputBudget{CurrentMemoryBudget(), StatusCode::kModel, ""});
  }
}

std::unique_ptr<Kernel> PrepareKernel(const KernelRegistry& kernels, const std::string& backend,
                                      PrepareContext& ctx, Precision precision) {
  const OpId op = NodeOp(ctx.node);
  const DType dtype = KernelKeyDType(ctx);
  KernelFactory factory = kernels.Find(op, dtype, precision);
  if (!factory) {
    if (!kernels.Has(op))
      Fail(StatusCode::kUnsupported, ctx.node.Describe(), ": the ", backend,
           " backend has no kernel for ", ctx.node.op_type);
    const int ti = GetOpDef(op).type_input;
    Fail(StatusCode::kUnsupported, ctx.node.Describe(), ": dtype ", DTypeName(dtype),
         ti >= 0 ? " of input " + std::to_string(ti) : std::string(" of the output"),
         precision == Precision::kFloat32 ? "" : std::string(" in ") + PrecisionName(precision),
         " is not supported by the ", backend, " backend");
  }
  std::unique_ptr<Kernel> kernel = factory(ctx.node);
  ctx.scratch_bytes = 0;
  ctx.device_needs = 0;
  kernel->Prepare(ctx);
  return kernel;
}

bool FoldsAtPlanTime(const PrepareContext& ctx) {
  const OpId op = NodeOp(ctx.node);
  if (op != OpId::kCount && GetOpDef(op).eval) return true;
  if (ctx.shape_only) return true;
  for (const TensorInfo& t : ctx.inputs)
    if (t.present && !t.data) return false;
  return true;
}

namespace {

/// Runs an op's EvalFn on what its shape inference computed.
class EvalKernel : public Kernel {
 public:
  explicit EvalKernel(EvalFn eval) : eval_(eval) {}
  void Prepare(PrepareContext& ctx) override {
    params_ = ctx.params;
    outputs_ = ctx.outputs;
  }
  void Run(const KernelIO& io) const override {
    static const OpParams kNone;
    eval_(params_ ? *params_ : kNone, outputs_, io.outputs);
  }

 private:
  EvalFn eval_;
  std::shared_ptr<const OpParams> params_;
  std::vector<TensorInfo> outputs_;
};

}  // namespace

std::unique_ptr<Kernel> PrepareHostKernel(PrepareContext& ctx) {
  const OpId op = NodeOp(ctx.node);
  if (op != OpId::kCount && GetOpDef(op).eval) {
    auto kernel = std::make_unique<EvalKernel>(GetOpDef(op).eval);
    kernel->Prepare(ctx);
    return kernel;
  }
  return PrepareKernel(CpuKernels(), "cpu", ctx);
}

void EvaluateOnHost(PrepareContext& ctx, void* const* outputs) {
  std::unique_ptr<Kernel> kernel = PrepareHostKernel(ctx);
  std::vector<const void*> ins;
  for (const TensorInfo& t : ctx.inputs) ins.push_back(t.data);
  std::vector<char> scratch(ctx.scratch_bytes + 64);
  ThreadPool inline_pool(1);
  kernel->Run(KernelIO{ins.data(), outputs, scratch.data(), &inline_pool});
}

}  // namespace kaiwu
