#include "runtime/weight_set.h"

#include "plan/node_plan.h"

namespace kaiwu {

StaticProgram::StaticProgram(const Graph& graph, std::vector<bool>* is_static,
                             std::vector<bool>* depends_on_weight) {
  is_static->assign(graph.values.size(), false);
  depends_on_weight->assign(graph.values.size(), false);
  for (size_t i = 0; i < graph.values.size(); ++i) {
    ValueKind k = graph.values[i].kind;
    (*is_static)[i] = k == ValueKind::kWeight || k == ValueKind::kConstant;
    (*depends_on_weight)[i] = k == ValueKind::kWeight;
  }
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    bool all_static = true, from_weight = false;
    for (int in : node.inputs) {
      if (in < 0) continue;
      all_static = all_static && (*is_static)[in];
      from_weight = from_weight || (*depends_on_weight)[in];
    }
    if (!all_static) continue;
    nodes_.push_back(static_cast<int>(n));
    for (int out : node.outputs) {
      if (out < 0) continue;
      (*is_static)[out] = true;
      (*depends_on_weight)[out] = from_weight;
    }
  }
}

void StaticProgram::Evaluate(const Graph& graph, WeightSet* next, const WeightSet* prev,
                             ThreadPool* pool) {
  if (kernels_.empty()) {
    kernels_.resize(nodes_.size());
    output_info_.resize(nodes_.size());
    scratch_bytes_.resize(nodes_.size());
    Run(graph, next, prev, pool, /*prepare=*/true);
    return;
  }
  Run(graph, next, prev, pool, false);
}

void StaticProgram::Evaluate(const Graph& graph, WeightSet* next, const WeightSet* prev,
                             ThreadPool* pool) const {
  KAIWU_CHECK(kernels_.size() == nodes_.size(), StatusCode::kInternal,
              "static program evaluated before it was prepared");
  const_cast<StaticProgram*>(this)->Run(graph, next, prev, pool, false);
}

void StaticProgram::Run(const Graph& graph, WeightSet* next, const WeightSet* prev,
                        ThreadPool* pool, bool first) {
  std::vector<const void*> ins;
  std::vector<void*> outs;
  std::vector<char> scratch;
  for (size_t s = 0; s < nodes_.size(); ++s) {
    const Node& node = graph.nodes[nodes_[s]];
    if (first) {
      PrepareContext ctx(node);
      ctx.num_threads = pool->num_threads();
      for (int in : node.inputs) {
        TensorInfo info;
        if (in >= 0) {
          const Tensor& t = *next->values[in];
          info = TensorInfo{true, t.dtype(), t.shape(), t.data()};
        }
        ctx.inputs.push_back(info);
      }
      InferNode(ctx);  // shape inference, outputs checked against the memory budget
      kernels_[s] = PrepareHostKernel(ctx);
      output_info_[s] = ctx.outputs;
      scratch_bytes_[s] = ctx.scratch_bytes;
    }
    if (prev) {
      bool changed = false;
      for (int in : node.inputs)
        if (in >= 0 && next->values[in] != prev->values[in]) changed = true;
      if (!changed) {
        for (int out : node.outputs)
          if (out >= 0) next->values[out] = prev->values[out];
        continue;
      }
    }
    ins.clear();
    outs.clear();
    for (int in : node.inputs) ins.push_back(in >= 0 ? next->values[in]->data() : nullptr);
    std::vector<std::shared_ptr<Tensor>> produced;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const TensorInfo& info = output_info_[s][o];
      if (node.outputs[o] < 0 || !info.present) {
        outs.push_back(nullptr);
        produced.push_back(nullptr);
        continue;
      }
      produced.push_back(std::make_shared<Tensor>(info.dtype, info.shape));
      outs.push_back(produced.back()->data());
    }
    scratch.resize(scratch_bytes_[s] + 64);
    KernelIO io{ins.data(), outs.data(), scratch.data(), pool};
    kernels_[s]->Run(io);
    for (size_t o = 0; o < node.outputs.size(); ++o)
      if (produced[o]) next->values[node.outputs[o]] = produced[o];
  }
  next->pointers.assign(next->values.size(), nullptr);
  for (size_t i = 0; i < next->values.size(); ++i)
    if (next->values[i]) next->pointers[i] = next->values[i]->data();
}

}  // namespace kaiwu
