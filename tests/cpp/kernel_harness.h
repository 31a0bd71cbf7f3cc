// Runs one CPU kernel outside any plan, for kernel tests against naive references.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "alloc_counter.h"
#include "backends/kernel.h"
#include "plan/node_plan.h"
#include "ir/graph.h"

namespace kaiwu {
namespace testing {

/// A node of `op_type` with `num_inputs` inputs (ids 0..n-1) and `num_outputs` outputs.
inline Node MakeNode(const std::string& op_type, int num_inputs, int num_outputs,
                     std::map<std::string, Attribute> attrs = {}) {
  Node n;
  n.op_type = op_type;
  n.name = op_type + "_under_test";
  n.opset = 21;
  for (int i = 0; i < num_inputs; ++i) n.inputs.push_back(i);
  for (int i = 0; i < num_outputs; ++i) n.outputs.push_back(num_inputs + i);
  n.attrs = std::move(attrs);
  return n;
}

inline Attribute IntAttr(int64_t v) { Attribute a; a.kind = Attribute::Kind::kInt; a.i = v; return a; }
inline Attribute FloatAttr(float v) { Attribute a; a.kind = Attribute::Kind::kFloat; a.f = v; return a; }
inline Attribute StrAttr(std::string v) { Attribute a; a.kind = Attribute::Kind::kString; a.s = std::move(v); return a; }
inline Attribute IntsAttr(std::vector<int64_t> v) { Attribute a; a.kind = Attribute::Kind::kInts; a.ints = std::move(v); return a; }
inline Attribute FloatsAttr(std::vector<float> v) { Attribute a; a.kind = Attribute::Kind::kFloats; a.floats = std::move(v); return a; }

/// A tensor of uniform random floats in [lo, hi).
inline Tensor RandomTensor(Shape shape, std::mt19937& rng, float lo = -1.f, float hi = 1.f) {
  Tensor t(DType::kFloat32, std::move(shape));
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int64_t i = 0; i < t.size(); ++i) t.As<float>()[i] = dist(rng);
  return t;
}

template <typename T>
Tensor MakeTensor(Shape shape, const std::vector<T>& values) {
  Tensor t(DTypeOf<T>::value, std::move(shape));
  std::memcpy(t.data(), values.data(), t.bytes());
  return t;
}

/// A present input of `dtype` and `shape`, with plan-time `data` when given.
inline TensorInfo Info(DType dtype, Shape shape, const void* data = nullptr) {
  TensorInfo t;
  t.present = true;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = data;
  return t;
}

/// The op layer's shape inference alone (no kernel) on `inputs` (an info with
/// present = false omits an input). The context refers to `node`, which must outlive it;
/// Ctx = PrepareContext for a context a kernel can then be prepared on.
template <typename Ctx = OpContext>
Ctx Infer(const Node& node, std::vector<TensorInfo> inputs) {
  Ctx ctx(node);
  ctx.inputs = std::move(inputs);
  InferOp(ctx);
  return ctx;
}

/// Expects shape inference to fail with kModel and a message holding `text`.
inline void ExpectModelError(const Node& node, std::vector<TensorInfo> inputs,
                             const std::string& text) {
  try {
    Infer(node, std::move(inputs));
    ADD_FAILURE() << text << ": no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(StatusCode::kModel)) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
  }
}

/// The infos of `inputs` for a context (an undefined-dtype Tensor marks an
/// omitted optional input), with their data visible to Prepare.
inline std::vector<TensorInfo> InputInfos(const std::vector<Tensor>& inputs) {
  std::vector<TensorInfo> infos;
  for (const Tensor& t : inputs) {
    TensorInfo info;
    info.present = t.dtype() != DType::kUndefined;
    info.dtype = t.dtype();
    info.shape = t.shape();
    info.data = info.present ? t.data() : nullptr;
    infos.push_back(info);
  }
  return infos;
}

/// A node's CPU kernel inferred (op layer) and prepared on `inputs` (an
/// undefined-dtype Tensor marks an omitted optional input; all input data is
/// visible to Prepare), with its outputs, scratch and a pool of `threads`.
class HostKernelRun {
 public:
  HostKernelRun(const Node& node, const std::vector<Tensor>& inputs, int threads)
      : ctx_(node), pool_(threads) {
    ctx_.num_threads = threads;
    ctx_.inputs = InputInfos(inputs);
    for (const Tensor& t : inputs) in_ptrs_.push_back(t.data());
    InferOp(ctx_);
    kernel_ = PrepareHostKernel(ctx_);
    for (const TensorInfo& o : ctx_.outputs) {
      outputs_.emplace_back(o.present ? Tensor(o.dtype, o.shape) : Tensor());
      out_ptrs_.push_back(outputs_.back().data());
    }
    scratch_.resize(ctx_.scratch_bytes + 64);
  }
  HostKernelRun(const HostKernelRun&) = delete;
  HostKernelRun& operator=(const HostKernelRun&) = delete;

  void Run() {
    KernelIO io{in_ptrs_.data(), out_ptrs_.data(), scratch_.data(), &pool_};
    kernel_->Run(io);
  }
  std::vector<Tensor>& outputs() { return outputs_; }

 private:
  PrepareContext ctx_;
  ThreadPool pool_;
  std::unique_ptr<Kernel> kernel_;
  std::vector<const void*> in_ptrs_;
  std::vector<Tensor> outputs_;
  std::vector<void*> out_ptrs_;
  std::vector<char> scratch_;
};

/// Infers the node, prepares and runs its CPU kernel on `inputs` (HostKernelRun).
inline std::vector<Tensor> RunNode(const Node& node, const std::vector<Tensor>& inputs,
                                   int threads = 1) {
  HostKernelRun run(node, inputs, threads);
  run.Run();
  return std::move(run.outputs());
}

/// Heap allocations the calling thread makes over `runs` runs of the node's
/// CPU kernel (HostKernelRun), after one run that is not counted.
inline int64_t RunAllocations(const Node& node, const std::vector<Tensor>& inputs, int threads,
                              int runs) {
  HostKernelRun run(node, inputs, threads);
  run.Run();
  const int64_t before = ThreadAllocations();
  for (int r = 0; r < runs; ++r) run.Run();
  return ThreadAllocations() - before;
}

/// Expects `fn` to throw kaiwu::Error with `code`.
template <typename F>
void ExpectError(F fn, StatusCode code, const std::string& what) {
  try {
    fn();
    ADD_FAILURE() << what << ": no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(code)) << what << ": " << e.what();
  }
}

}  // namespace testing
}  // namespace kaiwu
