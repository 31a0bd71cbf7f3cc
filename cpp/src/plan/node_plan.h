// Planning one node, the same way for every caller (execution plans, the
// static weight program, kernel tests): the op layer's shape inference once,
// then either plan-time evaluation on the host or the backend's kernel for
// (op, dtype, precision), prepared.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backends/kernel.h"

namespace kaiwu {

/// How InferNode checks a node's outputs against the memory budget, and what a
/// failure says: every output must fit in `bytes` on its own, else an error of
/// `code` naming the node, the output and its shape, followed by `cause`.
struct OutputBudget {
  uint64_t bytes = 0;
  StatusCode code = StatusCode::kModel;
  std::string cause;  ///< e.g. "; input 'obs' dimension 0 ('batch') is 100000000"
};

/// Shape inference of ctx.node (InferOp, ops/op.h), then each output's size
/// checked against `budget` (default: CurrentMemoryBudget(), kModel), before
/// anything of that size is allocated. Execution plans and the static weight
/// program infer through it.
void InferNode(PrepareContext& ctx, const OutputBudget* budget = nullptr);

/// The kernel of `kernels` for an inferred node, prepared. Throws kUnsupported
/// naming the node, the dtype and `backend` when the table has no entry.
std::unique_ptr<Kernel> PrepareKernel(const KernelRegistry& kernels, const std::string& backend,
                                      PrepareContext& ctx,
                                      Precision precision = Precision::kFloat32);

/// True when the node's outputs are computed at plan time: the op is evaluated
/// by the op layer (OpDef::eval), its outputs depend only on shapes, or every
/// input is known.
bool FoldsAtPlanTime(const PrepareContext& ctx);

/// A host kernel for an inferred node, prepared: one that runs the op's
/// EvalFn when the op layer evaluates it, else the CPU kernel.
std::unique_ptr<Kernel> PrepareHostKernel(PrepareContext& ctx);

/// Computes an inferred node's outputs on the host from known inputs
/// (ctx.inputs[i].data), with PrepareHostKernel.
void EvaluateOnHost(PrepareContext& ctx, void* const* outputs);

}  // namespace kaiwu
