// ones_like / zeros_like / full_like written as arithmetic become a fill that
// does not read x's data: Shape(x) -> ConstantOfShape(value). The Shape is
// known at plan time, so the planner computes the fill once per shape.
//
// Choice (exactness over reach): x - x and x * 0 are NaN for NaN or infinite
// floats, so those two forms fire only when x has an integer dtype (declared,
// or produced by Shape/Size/ArgMax/ArgMin or an integer Cast). Forms that are
// exact for every dtype fire everywhere:
//   Expand(c, shape), c a structural scalar constant -> ConstantOfShape(shape, c)
//   Add(ConstantOfShape(s, 0), c), c a structural scalar -> ConstantOfShape(s, c)
// Refittable weights (float initializers) never become attributes, so a fill
// whose value is a weight is left alone: refit stays exact.
#include <cstring>

#include "passes/match_util.h"
#include "passes/rewrite_util.h"
#include "passes/rules.h"

namespace kaiwu {

namespace {

bool IsIntegerDType(DType t) {
  return t == DType::kInt8 || t == DType::kUInt8 || t == DType::kInt16 || t == DType::kInt32 ||
         t == DType::kInt64;
}

// The integer dtype of `v`, or kUndefined when it is not known to be an integer.
DType IntegerDType(const Graph& g, const std::vector<int>& producer, int v) {
  if (IsIntegerDType(g.values[v].dtype)) return g.values[v].dtype;
  if (producer[v] < 0) return DType::kUndefined;
  const Node& n = g.nodes[producer[v]];
  if (n.op_type == "Shape" || n.op_type == "Size" || n.op_type == "ArgMax" || n.op_type == "ArgMin")
    return DType::kInt64;
  if (n.op_type == "Cast") {
    switch (n.GetInt("to", 0)) {  // TensorProto codes
      case 2: return DType::kUInt8;
      case 3: return DType::kInt8;
      case 5: return DType::kInt16;
      case 6: return DType::kInt32;
      case 7: return DType::kInt64;
      default: break;
    }
  }
  return DType::kUndefined;
}

// A structural one-element constant whose broadcast leaves a rank-`rank` shape
// unchanged (rank -1: unknown, then only a rank-0 constant qualifies).
bool ScalarOperand(const Graph& g, int v, int rank) {
  if (v < 0) return false;
  const Value& val = g.values[v];
  if (val.kind != ValueKind::kConstant || !val.data || val.data->size() != 1) return false;
  const int r = static_cast<int>(val.data->shape().size());
  return r == 0 || (rank >= 0 && r <= rank);
}

Attribute FillValue(const Tensor* src, DType dtype) {
  auto t = std::make_shared<Tensor>(dtype, Shape{1});
  if (src) {
    std::memcpy(t->data(), src->data(), DTypeSize(dtype));
  } else {
    std::memset(t->data(), 0, DTypeSize(dtype));
  }
  Attribute a;
  a.kind = Attribute::Kind::kTensor;
  a.t = t;
  return a;
}

// Turns node `i` into ConstantOfShape(shape_value) with the given value.
void MakeFill(Graph* g, size_t i, int shape_value, Attribute value) {
  Node& n = g->nodes[i];
  n.op_type = "ConstantOfShape";
  n.domain.clear();
  n.attrs.clear();
  n.attrs["value"] = std::move(value);
  n.inputs = {shape_value};
}

}  // namespace

int FoldConstantFill(Graph* g) {
  int fired = 0;
  std::vector<int> producer = Producers(*g);
  const size_t original = g->nodes.size();
  for (size_t i = 0; i < original; ++i) {
    const Node& n = g->nodes[i];
    if (!n.domain.empty() || n.outputs.size() != 1 || n.num_inputs() != 2) continue;
    const int a = n.inputs[0], b = n.inputs[1];
    if (a < 0 || b < 0) continue;
    if (n.op_type == "Sub" || n.op_type == "Mul") {
      int x = -1;
      if (n.op_type == "Sub" && a == b) x = a;
      if (n.op_type == "Mul" && IsConstScalar(*g, b, 0.0) && ScalarOperand(*g, b, KnownRank(*g, a))) x = a;
      if (n.op_type == "Mul" && IsConstScalar(*g, a, 0.0) && ScalarOperand(*g, a, KnownRank(*g, b))) x = b;
      if (x < 0) continue;
      DType dt = IntegerDType(*g, producer, x);
      if (dt == DType::kUndefined) continue;
      // The other operand of x * 0 must have x's dtype too (ONNX requires it).
      int shape = AddOp(g, "Shape", {x}, g->nodes[i].name + "_shape");
      MakeFill(g, i, shape, FillValue(nullptr, dt));
      ++fired;
    } else if (n.op_type == "Expand") {
      if (!ScalarOperand(*g, a, -1)) continue;
      const Tensor* c = g->values[a].data.get();
      MakeFill(g, i, b, FillValue(c, c->dtype()));
      ++fired;
    } else if (n.op_type == "Add") {
      int fill = -1, c = -1;
      for (int k = 0; k < 2; ++k) {
        int p = producer[n.inputs[k]];
        if (p >= 0 && g->nodes[p].op_type == "ConstantOfShape" && g->nodes[p].domain.empty()) {
          fill = p;
          c = n.inputs[1 - k];
        }
      }
      if (fill < 0 || !ScalarOperand(*g, c, -1)) continue;
      const Node& f = g->nodes[fill];
      const Tensor* zero = f.Has("value") ? f.attrs.at("value").t.get() : nullptr;
      const Tensor* ct = g->values[c].data.get();
      // Default value is float 0; an explicit one must be a zero of c's dtype.
      DType fdt = zero ? zero->dtype() : DType::kFloat32;
      if (fdt != ct->dtype() || (zero && !TensorIsScalar(*zero, 0.0))) continue;
      MakeFill(g, i, f.inputs[0], FillValue(ct, ct->dtype()));
      ++fired;
    }
  }
  if (fired) g->Verify();
  return fired;
}

}  // namespace kaiwu
