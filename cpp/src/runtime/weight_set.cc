#include "runtime/weight_set.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <string>

#include "plan/node_plan.h"
#include "runtime/weight_pool.h"

namespace kaiwu {

WeightSet::~WeightSet() {
  if (pool) pool->Release(buffers);
}

StaticProgram::StaticProgram(const Graph& graph, std::vector<bool>* is_static,
                             std::vector<bool>* depends_on_weight) {
  is_static->assign(graph.values.size(), false);
  depends_on_weight->assign(graph.values.size(), false);
  for (size_t i = 0; i < graph.values.size(); ++i) {
    ValueKind k = graph.values[i].kind;
    (*is_static)[i] = k == ValueKind::kWeight || k == ValueKind::kConstant;
    (*depends_on_weight)[i] = k == ValueKind::kWeight;
  }
  position_.assign(graph.nodes.size(), -1);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    bool all_static = true, from_weight = false;
    for (int in : node.inputs) {
      if (in < 0) continue;
      all_static = all_static && (*is_static)[in];
      from_weight = from_weight || (*depends_on_weight)[in];
    }
    if (!all_static) continue;
    position_[n] = static_cast<int>(nodes_.size());
    nodes_.push_back(static_cast<int>(n));
    for (int out : node.outputs) {
      if (out < 0) continue;
      (*is_static)[out] = true;
      (*depends_on_weight)[out] = from_weight;
    }
  }
  from_weight_ = *depends_on_weight;
}

const PrepareContext* StaticProgram::prepared(int node) const {
  const int p = node >= 0 && node < static_cast<int>(position_.size()) ? position_[node] : -1;
  return p >= 0 ? contexts_[p].get() : nullptr;
}

void StaticProgram::Load(const Graph& graph, WeightSet* ws, ThreadPool* pool) {
  const size_t nv = graph.values.size();
  kernels_.resize(nodes_.size());
  contexts_.resize(nodes_.size());
  std::vector<const void*> ins;
  std::vector<void*> outs;
  std::vector<char> scratch;
  for (size_t s = 0; s < nodes_.size(); ++s) {
    const Node& node = graph.nodes[nodes_[s]];
    auto ctx = std::make_unique<PrepareContext>(node);
    ctx->num_threads = pool->num_threads();
    for (int in : node.inputs) {
      TensorInfo info;
      if (in >= 0) {
        const Tensor& t = *ws->values[in];
        info = TensorInfo{true, t.dtype(), t.shape(), t.data()};
      }
      ctx->inputs.push_back(info);
    }
    InferNode(*ctx);  // shape inference, outputs checked against the memory budget
    kernels_[s] = PrepareHostKernel(*ctx);
    max_scratch_ = std::max(max_scratch_, ctx->scratch_bytes);
    ins.clear();
    outs.clear();
    for (int in : node.inputs) ins.push_back(in >= 0 ? ws->values[in]->data() : nullptr);
    std::vector<std::shared_ptr<Tensor>> produced;
    for (size_t o = 0; o < node.outputs.size(); ++o) {
      const TensorInfo& info = ctx->outputs[o];
      if (node.outputs[o] < 0 || !info.present) {
        outs.push_back(nullptr);
        produced.push_back(nullptr);
        continue;
      }
      produced.push_back(std::make_shared<Tensor>(info.dtype, info.shape));
      outs.push_back(produced.back()->data());
    }
    scratch.resize(ctx->scratch_bytes + 64);
    kernels_[s]->Run(KernelIO{ins.data(), outs.data(), scratch.data(), pool});
    for (size_t o = 0; o < node.outputs.size(); ++o)
      if (produced[o]) ws->values[node.outputs[o]] = produced[o];
    // The input data seen here is this version's: later versions differ.
    for (TensorInfo& t : ctx->inputs) t.data = nullptr;
    contexts_[s] = std::move(ctx);
  }
  ws->pointers.assign(nv, nullptr);
  dtypes_.assign(nv, DType::kUndefined);
  shapes_.assign(nv, Shape{});
  for (size_t i = 0; i < nv; ++i) {
    if (!ws->values[i]) continue;
    ws->pointers[i] = ws->values[i]->data();
    dtypes_[i] = ws->values[i]->dtype();
    shapes_[i] = ws->values[i]->shape();
  }
  CompileCopies(graph, *ws);
}

void StaticProgram::RunKernel(const Step& step, const std::vector<const void*>& ptr,
                              void* const* outputs, void* scratch, ThreadPool* pool) const {
  const Node* node = &contexts_[position_[step.node]]->node;
  const void* ins[16];
  std::vector<const void*> heap;
  const void** in = ins;
  if (node->inputs.size() > 16) {
    heap.resize(node->inputs.size());
    in = heap.data();
  }
  for (size_t i = 0; i < node->inputs.size(); ++i)
    in[i] = node->inputs[i] >= 0 ? ptr[node->inputs[i]] : nullptr;
  kernels_[position_[step.node]]->Run(KernelIO{in, outputs, scratch, pool});
}

namespace {

// Ops that only move elements, and which of their inputs carry the elements
// (the others are shape operands: starts, axes, indices...).
bool IsMoveOp(const Node& n) {
  static const std::set<std::string> ops = {"Identity", "Reshape", "Flatten", "Squeeze",
                                            "Unsqueeze", "Transpose", "Slice", "Concat",
                                            "Split", "Gather", "Expand", "Tile"};
  return n.domain.empty() && ops.count(n.op_type) > 0;
}
bool IsDataInput(const Node& n, int i) { return n.op_type == "Concat" || i == 0; }

// Tags: element i of all tagged values together is the float32 with bits
// kTagBase + i (finite, and never changed by a kernel that only moves elements).
constexpr uint32_t kTagBase = 0x3F800B6D;
constexpr int64_t kTagLimit = 0x7F000000 - kTagBase;

}  // namespace

void StaticProgram::CompileCopies(const Graph& graph, const WeightSet& ws) {
  const size_t nv = graph.values.size();
  dropped_.assign(nv, false);
  steps_.clear();
  auto kernel_step = [&](int n) {  // node n run by its kernel
    Step s;
    s.node = n;
    for (int in : graph.nodes[n].inputs)
      if (in >= 0) s.sources.push_back(in);
    s.outputs = graph.nodes[n].outputs;
    return s;
  };
  auto kernel_steps = [&] {
    steps_.clear();
    std::fill(dropped_.begin(), dropped_.end(), false);
    for (int n : nodes_) steps_.push_back(kernel_step(n));
  };

  // Which static nodes only move float32 elements that come from weights.
  std::vector<bool> moves(graph.nodes.size(), false), moved(nv, false);
  const std::vector<bool>& weighty = from_weight_;
  for (int n : nodes_) {
    const Node& node = graph.nodes[n];
    bool ok = IsMoveOp(node), from_weight = false;
    for (int i = 0; i < node.num_inputs() && ok; ++i) {
      const int in = node.inputs[i];
      if (in < 0) continue;
      if (IsDataInput(node, i)) {
        ok = dtypes_[in] == DType::kFloat32;
        from_weight = from_weight || weighty[in];
      } else {
        ok = !weighty[in];
      }
    }
    for (int out : node.outputs) ok = ok && (out < 0 || dtypes_[out] == DType::kFloat32);
    if (!ok || !from_weight) continue;
    moves[n] = true;
    for (int out : node.outputs)
      if (out >= 0) moved[out] = true;
  }
  // Moved values something else reads are kept; the rest are dropped.
  std::vector<bool> needed(nv, false);
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    if (moves[n]) continue;
    for (int in : graph.nodes[n].inputs)
      if (in >= 0) needed[in] = true;
  }
  for (int v : graph.outputs) needed[v] = true;

  // Tag every value a move chain starts from, then run the chains on the tags.
  std::vector<int> roots;
  std::vector<int64_t> root_offset;  // first tag of each root
  std::vector<int> root_index(nv, -1);
  int64_t tags = 0;
  std::vector<std::shared_ptr<Tensor>> tagged(nv);
  for (int n : nodes_) {
    if (!moves[n]) continue;
    const Node& node = graph.nodes[n];
    for (int i = 0; i < node.num_inputs(); ++i) {
      const int in = node.inputs[i];
      if (in < 0 || !IsDataInput(node, i) || moved[in] || root_index[in] >= 0) continue;
      root_index[in] = static_cast<int>(roots.size());
      roots.push_back(in);
      root_offset.push_back(tags);
      tags += NumElements(shapes_[in]);
    }
  }
  if (roots.empty() || tags >= kTagLimit) {
    kernel_steps();
    return;
  }
  for (size_t r = 0; r < roots.size(); ++r) {
    auto t = std::make_shared<Tensor>(DType::kFloat32, shapes_[roots[r]]);
    uint32_t* bits = t->As<uint32_t>();
    for (int64_t i = 0; i < t->size(); ++i) bits[i] = kTagBase + static_cast<uint32_t>(root_offset[r] + i);
    tagged[roots[r]] = t;
  }
  std::vector<char> scratch(max_scratch_ + 64);
  std::vector<const void*> ins;
  std::vector<void*> outs;
  ThreadPool inline_pool(1);
  for (int n : nodes_) {
    if (!moves[n]) continue;
    const Node& node = graph.nodes[n];
    ins.clear();
    outs.clear();
    for (int i = 0; i < node.num_inputs(); ++i) {
      const int in = node.inputs[i];
      ins.push_back(in < 0 ? nullptr : IsDataInput(node, i) ? tagged[in]->data() : ws.pointers[in]);
    }
    for (int out : node.outputs) {
      if (out >= 0) tagged[out] = std::make_shared<Tensor>(dtypes_[out], shapes_[out]);
      outs.push_back(out >= 0 ? tagged[out]->data() : nullptr);
    }
    kernels_[position_[n]]->Run(KernelIO{ins.data(), outs.data(), scratch.data(), &inline_pool});
  }

  // Each kept moved value: its tags name the root element of every element.
  std::vector<Step> copies(nv);
  for (size_t v = 0; v < nv; ++v) {
    if (!moved[v] || !needed[v]) continue;
    const int64_t count = NumElements(shapes_[v]);
    const uint32_t* bits = tagged[v]->As<uint32_t>();
    std::vector<int32_t> src(static_cast<size_t>(count));
    std::vector<int64_t> index(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i) {
      const int64_t tag = static_cast<int64_t>(bits[i]) - kTagBase;
      if (tag < 0 || tag >= tags) {  // not a pure move after all
        kernel_steps();
        return;
      }
      const int r = static_cast<int>(
          std::upper_bound(root_offset.begin(), root_offset.end(), tag) - root_offset.begin() - 1);
      src[i] = r;
      index[i] = tag - root_offset[r];
    }
    Step& s = copies[v];
    s.copy = true;
    s.outputs = {static_cast<int>(v)};
    s.blocks = CompressElementMap(src.data(), index.data(), count);
    // Sources: the roots the blocks read, renumbered in order of first use.
    std::vector<int> local(roots.size(), -1);
    for (CopyBlock& b : s.blocks) {
      if (local[b.src] < 0) {
        local[b.src] = static_cast<int>(s.sources.size());
        s.sources.push_back(roots[b.src]);
      }
      b.src = local[b.src];
    }
    // The blocks must reproduce what the kernels computed, bit for bit.
    std::vector<const void*> from;
    for (int r : s.sources) from.push_back(ws.pointers[r]);
    Tensor check(dtypes_[v], shapes_[v]);
    CopyFault fault;
    CopyBlocks(s.blocks, from.data(), check.data(), dtypes_[v], false, &fault);
    if (std::memcmp(check.data(), ws.pointers[v], check.bytes()) != 0) {
      kernel_steps();
      return;
    }
  }
  for (int n : nodes_) {
    if (!moves[n]) {
      steps_.push_back(kernel_step(n));
      continue;
    }
    for (int out : graph.nodes[n].outputs) {
      if (out < 0) continue;
      if (needed[out]) steps_.push_back(std::move(copies[out]));
      else dropped_[out] = true;
    }
  }
}

}  // namespace kaiwu
