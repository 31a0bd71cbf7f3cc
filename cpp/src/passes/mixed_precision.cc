#include "passes/mixed_precision.h"

#include <algorithm>
#include <set>
#include <unordered_map>

#include "passes/rewrite_util.h"

namespace kaiwu {

int MixedPrecisionReport::half_nodes() const {
  return static_cast<int>(std::count_if(nodes.begin(), nodes.end(), [](const Entry& e) { return e.half; }));
}

namespace {

enum class Role {
  kOther,     // dtype rules unknown here: never half, outputs as declared
  kCompute,   // half whenever eligible
  kMovement,  // half when an input already is
  kFloat32,   // keeps float32 on purpose; outputs have the type input's dtype
  kHalfIo,    // float32 math in the kernel, 16-bit storage when an input already is
              // half (bounded results: normalised rows, probabilities, erf, sqrt,
              // means and extrema), so a half chain needs no casts around it
};

struct OpRule {
  Role role;
  std::vector<int> t_inputs;  // inputs of the op's float type T; empty: all
  bool all_outputs = false;   // every output is T (else output 0 only)
};

const std::unordered_map<std::string, OpRule>& Rules() {
  static const std::unordered_map<std::string, OpRule> rules = [] {
    std::unordered_map<std::string, OpRule> r;
    for (const char* op : {"Conv", "Gemm", "MatMul", "Add", "Sub", "Mul", "Div", "Max", "Min", "Sum",
                           "Mean", "PRelu", "Relu", "LeakyRelu", "Elu", "Selu", "Celu", "Sigmoid",
                           "Tanh", "Gelu", "HardSwish", "HardSigmoid", "Softplus", "Softsign",
                           "Mish", "Neg", "Abs", "Clip", "MaxPool", "AveragePool",
                           "GlobalAveragePool", "GlobalMaxPool", "FusedElementwise"})
      r[op] = {Role::kCompute, {}, false};
    r["MaxPool"].t_inputs = {0};  // output 1 (Indices) is int64: output 0 only
    for (const char* op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Identity",
                           "Slice", "Gather", "Expand", "Tile", "DepthToSpace", "SpaceToDepth"})
      r[op] = {Role::kMovement, {0}, false};
    r["Concat"] = {Role::kMovement, {}, false};
    r["Pad"] = {Role::kMovement, {0, 2}, false};
    r["Split"] = {Role::kMovement, {0}, true};
    for (const char* op : {"LogSoftmax", "Hardmax", "BatchNormalization", "InstanceNormalization",
                           "GroupNormalization", "ReduceSum", "ReduceProd", "ReduceL1", "ReduceL2",
                           "ReduceLogSumExp", "ReduceSumSquare", "Exp", "Log", "Pow", "Reciprocal",
                           "Einsum", "CumSum", "Resize", "Dropout"})
      r[op] = {Role::kFloat32, {0}, false};
    // Their CUDA kernels load 16-bit values as float, compute in float and round
    // the result once; the results stay within the inputs' range (or [0, 1],
    // [-1, 1]), so 16-bit storage cannot overflow where the input did not.
    for (const char* op : {"Softmax", "LayerNormalization", "ReduceMean", "ReduceMax", "ReduceMin",
                           "Sqrt", "Erf"})
      r[op] = {Role::kHalfIo, {0}, false};
    for (const char* op : {"LSTM", "GRU", "RNN"}) r[op] = {Role::kFloat32, {0}, true};
    return r;
  }();
  return rules;
}

int OnnxCode(DType t) {
  switch (t) {
    case DType::kFloat16: return 10;
    case DType::kBFloat16: return 16;
    default: return 1;
  }
}

bool IsRecurrent(const std::string& op_type) {
  return op_type == "LSTM" || op_type == "GRU" || op_type == "RNN";
}

class Rewriter {
 public:
  Rewriter(Graph* g, const MixedPrecisionOptions& o) : g_(*g), o_(o) {
    const size_t n = g_.values.size();
    fp32_.assign(n, false);
    for (size_t v = 0; v < n; ++v) fp32_[v] = g_.values[v].dtype == DType::kFloat32;
    half_of_.assign(n, -1);
    pending_.assign(n, false);
    static_ = StaticValues(g_);
    planned_ = PlanTimeValues();
    keep_.insert(o_.keep_fp32.begin(), o_.keep_fp32.end());
  }

  MixedPrecisionReport Run() {
    const size_t count = g_.nodes.size();  // casts are appended past it
    for (size_t i = 0; i < count; ++i) Visit(i);
    for (int& out : g_.outputs)
      if (pending_[out]) Materialize(out);
    g_.Verify();  // producers and order first: RemoveDeadNodes walks them
    FoldIntegerCasts();
    g_.RemoveDeadNodes();
    g_.Verify();
    return std::move(report_);
  }

 private:
  // Values the plan computes once per input shape on the host (execution_plan's
  // FoldsAtPlanTime with the host's kernels, which are float32): what Shape and
  // Size make, and what nodes make from those, constants and weights only. A
  // half node there would have no host kernel (e.g. attention's 1 / sqrt(head
  // dim) from the query's shape).
  std::vector<bool> PlanTimeValues() const {
    std::vector<bool> planned(g_.values.size(), false);
    for (const Node& n : g_.nodes) {  // topologically sorted
      bool all = n.op_type == "Shape" || n.op_type == "Size";
      if (!all) {
        bool any = false;
        all = true;
        for (int in : n.inputs) {
          if (in < 0) continue;
          all = all && (planned[in] || static_[in]);
          any = any || planned[in];
        }
        all = all && any;  // all-static nodes are static_ already
      }
      if (all)
        for (int o : n.outputs)
          if (o >= 0) planned[o] = true;
    }
    return planned;
  }

  bool WritesGraphOutput(const Node& n) const {
    for (int v : n.outputs)
      if (v >= 0 && IsGraphOutput(g_, v)) return true;
    return false;
  }

  bool IsFp32(int v) const { return v >= 0 && v < static_cast<int>(fp32_.size()) && fp32_[v]; }

  std::vector<int> TInputs(const Node& n, const OpRule& rule) const {
    std::vector<int> idx;
    if (rule.t_inputs.empty()) {
      for (int k = 0; k < n.num_inputs(); ++k) idx.push_back(k);
    } else {
      for (int k : rule.t_inputs)
        if (k < n.num_inputs()) idx.push_back(k);
    }
    return idx;
  }

  std::vector<int> TOutputs(const Node& n, const OpRule& rule) const {
    std::vector<int> idx;
    for (int j = 0; j < static_cast<int>(n.outputs.size()); ++j)
      if ((j == 0 || rule.all_outputs) && n.outputs[j] >= 0) idx.push_back(j);
    return idx;
  }

  void Visit(size_t i) {
    const Node snapshot = g_.nodes[i];
    auto it = Rules().find(snapshot.op_type);
    const bool known = it != Rules().end() && snapshot.domain == (snapshot.op_type == "FusedElementwise" ? "kaiwu" : "");
    const OpRule rule = known ? it->second : OpRule{Role::kOther, {}, false};
    bool any_fp32_input = false;
    for (int v : snapshot.inputs) any_fp32_input = any_fp32_input || IsFp32(v);

    std::string reason;
    bool half = false, half_io = false, half_r = false;
    if (rule.role == Role::kCompute || rule.role == Role::kMovement || rule.role == Role::kHalfIo) {
      const std::vector<int> t_in = TInputs(snapshot, rule);
      bool all_fp32 = !t_in.empty(), any_half = false, all_static = true;
      for (int k : t_in) {
        const int v = snapshot.inputs[k];
        if (v < 0) continue;
        all_fp32 = all_fp32 && IsFp32(v);
        any_half = any_half || pending_[v] || (half_of_[v] >= 0 && produced_half_.count(v));
        all_static = all_static && static_[v];
      }
      bool all_planned = true;
      for (int v : snapshot.inputs) {
        all_static = all_static && (v < 0 || static_[v]);
        all_planned = all_planned && (v < 0 || static_[v] || planned_[v]);
      }
      if (!all_fp32) reason = "inputs are not float32";
      else if (all_static) reason = "computed from weights at load";
      else if (all_planned) reason = "computed from shapes when planned";
      else if (keep_.count(snapshot.name) || keep_.count(snapshot.op_type)) reason = "keep_fp32";
      else if (!o_.has_kernel(NodeOp(snapshot), o_.half))
        reason = std::string("no ") + DTypeName(o_.half) + " kernel";
      else if (rule.role == Role::kMovement && !any_half) reason = "moves float32 data";
      else if (rule.role == Role::kHalfIo && (!any_half || WritesGraphOutput(snapshot)))
        reason = "float32 by rule";  // a result the user reads is computed and kept in float32
      else half = true;
    } else if (rule.role == Role::kFloat32) {
      const bool kept = keep_.count(snapshot.name) || keep_.count(snapshot.op_type);
      reason = kept ? "keep_fp32" : "float32 by rule";
      // A recurrent cell keeps float32 state and gate math, but its GEMMs run on
      // tensor cores with 10-bit-mantissa operands, as the session's half GEMMs.
      if (!kept && any_fp32_input && IsRecurrent(snapshot.op_type)) {
        g_.nodes[i].tf32_gemms = true;
        reason = "float32 by rule, GEMMs on tensor cores";
        // X already made in half: the input projection reads X and W (cast with
        // the weights) in 16 bits and Y is written in 16 bits, so neither X nor Y
        // is cast; R, B, the states and Y_h / Y_c stay float32.
        if (RecurrentHalfIo(snapshot)) {
          half_io = true;
          half_r = FragmentR(snapshot);
          reason += std::string(half_r ? ", X, W, R and Y in " : ", X, W and Y in ") +
                    DTypeName(o_.half);
        }
      }
    } else {
      reason = "float32 by rule";
    }

    if (half_io) {
      g_.nodes[i].inputs[0] = HalfVersion(snapshot.inputs[0]);
      g_.nodes[i].inputs[1] = HalfVersion(snapshot.inputs[1]);
      if (half_r) g_.nodes[i].inputs[2] = HalfVersion(snapshot.inputs[2]);
      for (int k = half_r ? 3 : 2; k < snapshot.num_inputs(); ++k) {
        const int v = snapshot.inputs[k];
        if (v >= 0 && pending_[v]) Materialize(v);
      }
      const int y = snapshot.outputs.empty() ? -1 : snapshot.outputs[0];
      if (y >= 0) {
        const int yh = NewHalfValue(y);
        g_.nodes[i].outputs[0] = yh;
        Mark(y);
        half_of_[y] = yh;
        produced_half_.insert(y);
        pending_[y] = true;
      }
      for (size_t j = 1; j < snapshot.outputs.size(); ++j) Mark(snapshot.outputs[j]);
    } else if (half) {
      for (int k : TInputs(snapshot, rule)) {
        const int v = snapshot.inputs[k];
        if (v >= 0) g_.nodes[i].inputs[k] = HalfVersion(v);
      }
      for (int j : TOutputs(snapshot, rule)) {
        const int v = snapshot.outputs[j];
        const int vh = NewHalfValue(v);
        g_.nodes[i].outputs[j] = vh;
        Mark(v);  // still a float32 value of the model, now made in half
        half_of_[v] = vh;
        produced_half_.insert(v);
        pending_[v] = true;
      }
    } else {
      // Shape and Size read only the shape: the half value serves, no float32 copy of a
      // tensor the size of the activations (torch's attention export takes the shape of
      // q, k, v and the projections five times a layer).
      const bool shape_only =
          snapshot.domain.empty() && (snapshot.op_type == "Shape" || snapshot.op_type == "Size");
      for (int k = 0; k < snapshot.num_inputs(); ++k) {
        const int v = snapshot.inputs[k];
        if (v < 0 || !pending_[v]) continue;
        if (shape_only && half_of_[v] >= 0) g_.nodes[i].inputs[k] = half_of_[v];
        else Materialize(v);
      }
      // Outputs of float32 nodes keep their dtype; a T-preserving op over a
      // float32 type input makes float32 outputs.
      if (rule.role != Role::kOther) {
        const std::vector<int> t_in = TInputs(snapshot, rule);
        if (!t_in.empty() && IsFp32(snapshot.inputs[t_in[0]]))
          for (int j : TOutputs(snapshot, rule)) Mark(snapshot.outputs[j]);
      } else if (snapshot.op_type == "Cast" && snapshot.GetInt("to", 0) == 1) {
        Mark(snapshot.outputs[0]);
      } else if (snapshot.op_type == "Where" && snapshot.domain.empty() && snapshot.num_inputs() == 3 &&
                 (IsFp32(snapshot.inputs[1]) || IsFp32(snapshot.inputs[2]))) {
        // X and Y share Where's output type: an attention mask made of 0 and -inf
        // (torch's key_padding_mask) is float32, so the scores' Add can run in half.
        Mark(snapshot.outputs[0]);
      }
    }
    if (any_fp32_input)
      report_.nodes.push_back({snapshot.name, snapshot.op_type, half, half ? "" : reason});
  }

  // A recurrent node whose X (input 0) a half node already made, with a float32
  // W, where the backend has the op's half kernel (keyed by X): it reads X and
  // W in half and writes Y in half.
  bool RecurrentHalfIo(const Node& n) const {
    if (n.num_inputs() < 2 || n.inputs[0] < 0 || n.inputs[1] < 0) return false;
    const int x = n.inputs[0], w = n.inputs[1];
    const bool x_half = pending_[x] || (half_of_[x] >= 0 && produced_half_.count(x));
    return x_half && IsFp32(w) && static_[w] && o_.has_kernel(NodeOp(n), o_.half);
  }

  // With RecurrentHalfIo, a float16 GRU whose recurrent products the device
  // runs on FP16 operands read from R (linear_before_reset, hidden <= 128 and a
  // multiple of 16: its tensor-core sequence kernels) also takes R in float16,
  // cast with the weights: those kernels then load each pair of R as one word
  // instead of rounding float32 R at every launch.
  bool FragmentR(const Node& n) const {
    if (o_.half != DType::kFloat16 || n.op_type != "GRU" ||
        n.GetInt("linear_before_reset", 0) != 1 || n.num_inputs() < 3 || n.inputs[2] < 0)
      return false;
    const int r = n.inputs[2];
    const Value& rv = g_.values[r];
    if (!IsFp32(r) || !static_[r] || !rv.has_shape || rv.dims.size() != 3) return false;
    const int64_t hidden = rv.dims[2].value;
    return hidden > 0 && hidden <= 128 && hidden % 16 == 0;
  }

  void Mark(int v) {
    if (v >= 0 && v < static_cast<int>(fp32_.size())) fp32_[v] = true;
  }

  int NewHalfValue(int v) {
    const Value src = g_.values[v];
    const int vh = AddIntermediate(&g_, src.name + "/" + (o_.half == DType::kBFloat16 ? "bf16" : "fp16"));
    Value& dst = g_.values[vh];
    dst.dtype = o_.half;
    dst.has_shape = src.has_shape;
    dst.dims = src.dims;
    Grow();
    return vh;
  }

  void Grow() {
    const size_t n = g_.values.size();
    fp32_.resize(n, false);
    planned_.resize(n, false);
    half_of_.resize(n, -1);
    pending_.resize(n, false);
    static_.resize(n, false);
  }

  int AddCast(int from, int to_value, DType to) {
    // Both ends carry their dtype, so later passes (fuse_mlp) can fold the cast.
    for (int v : {from, to_value})
      if (g_.values[v].dtype == DType::kUndefined && fp32_[v]) g_.values[v].dtype = DType::kFloat32;
    Node c;
    c.op_type = "Cast";
    c.name = g_.values[to_value].name + "/cast";
    c.opset = g_.opset;
    c.inputs = {from};
    c.outputs = {to_value};
    c.attrs["to"] = IntAttr(OnnxCode(to));
    ++report_.casts;
    return g_.AddNode(std::move(c));
  }

  // The half version of float32 value v: the value a half node made, or a Cast.
  int HalfVersion(int v) {
    if (half_of_[v] >= 0) return half_of_[v];
    const bool st = static_[v];
    const int vh = NewHalfValue(v);
    AddCast(v, vh, o_.half);
    half_of_[v] = vh;
    static_[vh] = st;
    return vh;
  }

  // A value now made in half by its producer is needed in float32: cast back.
  void Materialize(int v) {
    AddCast(half_of_[v], v, DType::kFloat32);
    pending_[v] = false;
  }

  // Cast(u8 -> float32) feeding only Cast(float32 -> half): one exact cast.
  void FoldIntegerCasts() {
    std::vector<int> producer(g_.values.size(), -1);
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      for (int o : g_.nodes[i].outputs)
        if (o >= 0) producer[o] = static_cast<int>(i);
    for (Node& c : g_.nodes) {
      if (c.op_type != "Cast" || c.GetInt("to", 0) != OnnxCode(o_.half) || c.inputs.empty()) continue;
      const int mid = c.inputs[0];
      if (mid < 0 || producer[mid] < 0) continue;
      const Node& p = g_.nodes[producer[mid]];
      if (p.op_type != "Cast" || p.GetInt("to", 0) != 1 || p.inputs.empty() || p.inputs[0] < 0) continue;
      const DType src = g_.values[p.inputs[0]].dtype;
      if (src != DType::kUInt8 && src != DType::kInt8 && src != DType::kBool) continue;
      c.inputs[0] = p.inputs[0];  // the float32 cast dies if nothing else reads it
    }
  }

  Graph& g_;
  const MixedPrecisionOptions& o_;
  std::vector<bool> fp32_, pending_, static_;
  std::vector<bool> planned_;  // PlanTimeValues
  std::vector<int> half_of_;
  std::set<int> produced_half_;
  std::set<std::string> keep_;
  MixedPrecisionReport report_;
};

}  // namespace

MixedPrecisionReport ApplyMixedPrecision(Graph* g, const MixedPrecisionOptions& options) {
  if (options.half != DType::kFloat16 && options.half != DType::kBFloat16)
    Fail(StatusCode::kInternal, "mixed precision needs float16 or bfloat16, got ",
         DTypeName(options.half));
  return Rewriter(g, options).Run();
}

}  // namespace kaiwu
