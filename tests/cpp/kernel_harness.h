// Runs one CPU kernel outside any plan, for kernel tests against naive references.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

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

/// Infers the node (op layer), prepares and runs its CPU kernel on `inputs` (an undefined-dtype Tensor
/// marks an omitted optional input). All input data is visible to Prepare.
inline std::vector<Tensor> RunNode(const Node& node, const std::vector<Tensor>& inputs,
                                   int threads = 1) {
  PrepareContext ctx(node);
  ctx.num_threads = threads;
  for (const Tensor& t : inputs) {
    TensorInfo info;
    info.present = t.dtype() != DType::kUndefined;
    info.dtype = t.dtype();
    info.shape = t.shape();
    info.data = info.present ? t.data() : nullptr;
    ctx.inputs.push_back(info);
  }
  InferOp(ctx);
  std::unique_ptr<Kernel> kernel = PrepareHostKernel(ctx);
  std::vector<Tensor> outputs;
  std::vector<void*> out_ptrs;
  for (const TensorInfo& o : ctx.outputs) {
    outputs.emplace_back(o.present ? Tensor(o.dtype, o.shape) : Tensor());
    out_ptrs.push_back(outputs.back().data());
  }
  std::vector<const void*> in_ptrs;
  for (const Tensor& t : inputs) in_ptrs.push_back(t.data());
  std::vector<char> scratch(ctx.scratch_bytes + 64);
  ThreadPool pool(threads);
  KernelIO io{in_ptrs.data(), out_ptrs.data(), scratch.data(), &pool};
  kernel->Run(io);
  return outputs;
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
