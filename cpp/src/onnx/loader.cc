#include "onnx/loader.h"

#include <fstream>
#include <limits>
#include <new>
#include <set>
#include <sstream>
#include <stdexcept>

#include "core/memory_budget.h"
#include "core/utf8.h"
#include "onnx.pb.h"
#include "onnx/tensor_proto.h"
#include "ops/op.h"

namespace kaiwu {

using kaiwu_onnx::AttributeProto;
using kaiwu_onnx::ModelProto;
using kaiwu_onnx::NodeProto;
using kaiwu_onnx::ValueInfoProto;

std::string ReadFileBytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) Fail(StatusCode::kFileNotFound, "model file '", path, "' cannot be opened");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

namespace {

bool IsDefaultDomain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

// Names and strings reach Python, which decodes them strictly: refuse bad UTF-8
// here, naming the place, with the offending bytes escaped.
void CheckText(const std::string& text, const std::string& what) {
  if (!IsValidUtf8(text))
    Fail(StatusCode::kModel, what, " is not valid UTF-8 ('", EscapeInvalidUtf8(text), "')");
}

void CheckValueInfoText(const ValueInfoProto& vi, const char* role) {
  CheckText(vi.name(), std::string("the name of a graph ") + role);
  if (!vi.has_type() || !vi.type().has_tensor_type() || !vi.type().tensor_type().has_shape())
    return;
  for (const auto& d : vi.type().tensor_type().shape().dim())
    if (d.has_dim_param())
      CheckText(d.dim_param(), std::string(role) + " '" + vi.name() + "': a dimension name");
}

class Importer {
 public:
  Importer(const ModelProto& model, std::string base_dir)
      : model_(model), base_dir_(std::move(base_dir)) {}

  Graph Run() {
    ReadOpsets();
    const auto& g = model_.graph();
    CheckText(g.name(), "the graph's name");
    graph_.name = g.name();
    for (const auto& prop : model_.metadata_props()) {
      CheckText(prop.key(), "a metadata key");
      CheckText(prop.value(), "metadata '" + prop.key() + "'");
      graph_.metadata[prop.key()] = prop.value();
    }
    graph_.opset = opsets_[""];
    for (const auto& init : g.initializer()) AddInitializer(init);
    for (const auto& in : g.input()) {
      CheckValueInfoText(in, "input");
      int id = graph_.Find(in.name());
      if (id >= 0) continue;  // an initializer listed as an input (IR < 4): keep the constant
      id = ValueId(in.name());
      graph_.values[id].kind = ValueKind::kInput;
      ApplyType(in, &graph_.values[id]);
      graph_.inputs.push_back(id);
    }
    std::vector<std::string> unsupported;
    for (const NodeProto& n : g.node()) ImportNode(n, &unsupported);
    if (!unsupported.empty()) {
      std::ostringstream os;
      os << "the model uses " << unsupported.size()
         << " node(s) with ops kaiwu_infer does not support:";
      for (const auto& u : unsupported) os << "\n  " << u;
      throw Error(StatusCode::kUnsupported, os.str());
    }
    for (const auto& out : g.output()) {
      CheckValueInfoText(out, "output");
      int id = graph_.Find(out.name());
      if (id < 0) Fail(StatusCode::kModel, "graph output '", out.name(), "' has no producer");
      if (out.has_type()) ApplyType(out, &graph_.values[id]);
      graph_.outputs.push_back(id);
    }
    for (const auto& vi : g.value_info()) {
      CheckValueInfoText(vi, "value_info entry");
      int id = graph_.Find(vi.name());
      if (id >= 0 && graph_.values[id].kind == ValueKind::kRuntime) ApplyType(vi, &graph_.values[id]);
    }
    ClassifyInitializers();
    graph_.Verify();
    return std::move(graph_);
  }

 private:
  void ReadOpsets() {
    for (const auto& op : model_.opset_import()) CheckText(op.domain(), "an opset_import domain");
    for (const auto& op : model_.opset_import())
      opsets_[IsDefaultDomain(op.domain()) ? "" : op.domain()] = static_cast<int>(op.version());
    if (!model_.has_graph())
      Fail(StatusCode::kModel, "the ONNX model has no graph (malformed or truncated bytes?)");
    if (!opsets_.count(""))
      Fail(StatusCode::kModel, "the model imports no default-domain (ai.onnx) opset");
    if (opsets_[""] < kMinOpset)
      Fail(StatusCode::kModel, "the model uses opset ", opsets_[""], "; kaiwu_infer supports ",
           kMinOpset, " and newer (convert it with onnx.version_converter)");
  }

  int ValueId(const std::string& name) {
    int id = graph_.Find(name);
    if (id >= 0) return id;
    Value v;
    v.name = name;
    return graph_.AddValue(std::move(v));
  }

  void AddInitializer(const kaiwu_onnx::TensorProto& t) {
    if (t.name().empty()) Fail(StatusCode::kModel, "an initializer has no name");
    CheckText(t.name(), "the name of an initializer");
    if (graph_.Find(t.name()) >= 0)
      Fail(StatusCode::kModel, "initializer '", t.name(), "' is defined twice");
    Value v;
    v.name = t.name();
    v.kind = ValueKind::kWeight;  // narrowed to kConstant by ClassifyInitializers
    v.data = std::make_shared<Tensor>(TensorFromProto(t, base_dir_, t.name(), &budget_left_));
    SetFromTensor(&v);
    graph_.AddValue(std::move(v));
  }

  static void SetFromTensor(Value* v) {
    v->dtype = v->data->dtype();
    v->has_shape = true;
    v->dims.clear();
    for (int64_t d : v->data->shape()) v->dims.push_back(Dim{d, ""});
  }

  void ApplyType(const ValueInfoProto& vi, Value* v) {
    if (!vi.has_type() || !vi.type().has_tensor_type()) {
      if (v->kind == ValueKind::kInput)
        Fail(StatusCode::kModel, "graph input '", vi.name(), "' is not a tensor");
      return;
    }
    const auto& tt = vi.type().tensor_type();
    if (tt.elem_type() != 0) {
      DType dt = DTypeFromOnnx(tt.elem_type());
      if (dt == DType::kUndefined)
        Fail(StatusCode::kUnsupported, "value '", vi.name(), "' has ONNX element type ",
             tt.elem_type(), ", which kaiwu_infer does not support");
      v->dtype = dt;
    }
    if (tt.has_shape()) {
      v->has_shape = true;
      v->dims.clear();
      for (const auto& d : tt.shape().dim()) {
        Dim dim;
        if (d.has_dim_value()) dim.value = d.dim_value();
        if (d.has_dim_param()) dim.symbol = d.dim_param();
        v->dims.push_back(dim);
      }
    }
  }

  Attribute ConvertAttribute(const AttributeProto& a, const std::string& node_desc) {
    CheckText(a.name(), node_desc + ": an attribute name");
    const std::string attr_desc = node_desc + ": attribute '" + a.name() + "'";
    if (a.type() == AttributeProto::STRING) CheckText(a.s(), attr_desc);
    if (a.type() == AttributeProto::STRINGS)
      for (const auto& v : a.strings()) CheckText(v, attr_desc);
    Attribute out;
    switch (a.type()) {
      case AttributeProto::INT: out.kind = Attribute::Kind::kInt; out.i = a.i(); break;
      case AttributeProto::FLOAT: out.kind = Attribute::Kind::kFloat; out.f = a.f(); break;
      case AttributeProto::STRING: out.kind = Attribute::Kind::kString; out.s = a.s(); break;
      case AttributeProto::INTS:
        out.kind = Attribute::Kind::kInts;
        out.ints.assign(a.ints().begin(), a.ints().end());
        break;
      case AttributeProto::FLOATS:
        out.kind = Attribute::Kind::kFloats;
        out.floats.assign(a.floats().begin(), a.floats().end());
        break;
      case AttributeProto::STRINGS:
        out.kind = Attribute::Kind::kStrings;
        out.strings.assign(a.strings().begin(), a.strings().end());
        break;
      case AttributeProto::TENSOR:
        out.kind = Attribute::Kind::kTensor;
        out.t = std::make_shared<Tensor>(
            TensorFromProto(a.t(), base_dir_, node_desc + "." + a.name(), &budget_left_));
        break;
      default:
        Fail(StatusCode::kUnsupported, node_desc, ": attribute '", a.name(),
             "' has a kind kaiwu_infer does not support (graphs, sparse tensors, type protos)");
    }
    return out;
  }

  void ImportNode(const NodeProto& np, std::vector<std::string>* unsupported) {
    const std::string where = "node #" + std::to_string(node_index_);
    CheckText(np.op_type(), where + ": the op type");
    CheckText(np.domain(), where + " (" + np.op_type() + "): the domain");
    CheckText(np.name(), where + " (" + np.op_type() + "): the node name");
    Node n;
    n.op_type = np.op_type();
    n.domain = IsDefaultDomain(np.domain()) ? "" : np.domain();
    n.name = np.name().empty() ? np.op_type() + "_" + std::to_string(node_index_) : np.name();
    ++node_index_;
    auto opset_it = opsets_.find(n.domain);
    n.opset = opset_it == opsets_.end() ? 0 : opset_it->second;
    std::string desc = n.Describe();
    for (const auto& in : np.input()) CheckText(in, desc + ": an input name");
    for (const auto& out : np.output()) CheckText(out, desc + ": an output name");

    if (FindOp(n.op_type, n.domain) == OpId::kCount && !(n.domain.empty() && n.op_type == "Constant")) {
      std::ostringstream os;
      os << n.op_type << " (node '" << n.name << "', domain '"
         << (n.domain.empty() ? "ai.onnx" : n.domain) << "', opset " << n.opset << ")";
      unsupported->push_back(os.str());
      return;
    }
    for (const auto& a : np.attribute()) n.attrs[a.name()] = ConvertAttribute(a, desc);
    if (n.domain.empty() && n.op_type == "ConstantOfShape" && n.Has("value") &&
        n.attrs.at("value").kind != Attribute::Kind::kTensor)
      Fail(StatusCode::kModel, desc, ": attribute 'value' must be a tensor");
    if (n.domain.empty() && n.op_type == "Constant") {
      ImportConstant(n, np);
      return;
    }
    for (const auto& in : np.input()) n.inputs.push_back(in.empty() ? -1 : ValueId(in));
    for (const auto& out : np.output()) {
      if (out.empty()) {
        n.outputs.push_back(-1);
        continue;
      }
      int id = ValueId(out);
      n.outputs.push_back(id);
    }
    graph_.AddNode(std::move(n));
  }

  // Constant nodes become structural constants directly.
  void ImportConstant(const Node& n, const NodeProto& np) {
    if (np.output_size() != 1) Fail(StatusCode::kModel, n.Describe(), " must have one output");
    std::shared_ptr<Tensor> t;
    auto scalar_or_vector = [&](DType dt, size_t count, bool scalar) {
      t = std::make_shared<Tensor>(dt, scalar ? Shape{} : Shape{static_cast<int64_t>(count)});
    };
    // Each value_* attribute must be of its kind: a mutated type would leave `t` empty.
    for (const auto& [name, kind] :
         {std::pair<const char*, Attribute::Kind>{"value", Attribute::Kind::kTensor},
          {"value_float", Attribute::Kind::kFloat},
          {"value_floats", Attribute::Kind::kFloats},
          {"value_int", Attribute::Kind::kInt},
          {"value_ints", Attribute::Kind::kInts}})
      if (n.Has(name) && n.attrs.at(name).kind != kind)
        Fail(StatusCode::kModel, n.Describe(), ": attribute '", name, "' has the wrong type");
    if (n.Has("value")) {
      t = n.attrs.at("value").t;
    } else if (n.Has("value_float")) {
      scalar_or_vector(DType::kFloat32, 1, true);
      t->As<float>()[0] = n.GetFloat("value_float", 0);
    } else if (n.Has("value_floats")) {
      auto v = n.GetFloats("value_floats");
      scalar_or_vector(DType::kFloat32, v.size(), false);
      std::copy(v.begin(), v.end(), t->As<float>());
    } else if (n.Has("value_int")) {
      scalar_or_vector(DType::kInt64, 1, true);
      t->As<int64_t>()[0] = n.GetInt("value_int", 0);
    } else if (n.Has("value_ints")) {
      auto v = n.GetInts("value_ints");
      scalar_or_vector(DType::kInt64, v.size(), false);
      std::copy(v.begin(), v.end(), t->As<int64_t>());
    } else {
      Fail(StatusCode::kUnsupported, n.Describe(),
           ": only value, value_float(s) and value_int(s) are supported");
    }
    const std::string& name = np.output(0);
    if (graph_.Find(name) >= 0 && graph_.values[graph_.Find(name)].kind != ValueKind::kRuntime)
      Fail(StatusCode::kModel, n.Describe(), " writes '", name, "', which is already defined");
    Value& v = graph_.values[ValueId(name)];
    KAIWU_CHECK(v.producer < 0 && !v.data, StatusCode::kModel, "value '", name,
                "' is produced twice");
    v.kind = ValueKind::kConstant;
    v.data = t;
    SetFromTensor(&v);
  }

  // Float initializers are refittable weights unless a node reads them as a
  // shape operand; so are the quantized tensors and zero points that a
  // DequantizeLinear reads (int8 weights refit by name). Everything else is a
  // structural constant.
  void ClassifyInitializers() {
    std::set<int> shape_operands, quantized;
    for (const Node& n : graph_.nodes) {
      for (int i = 0; i < n.num_inputs(); ++i)
        if (n.inputs[i] >= 0 && IsShapeOperand(n.op_type, i)) shape_operands.insert(n.inputs[i]);
      if (n.op_type == "DequantizeLinear" && n.domain.empty())
        for (int i : {0, 2})
          if (n.HasInput(i)) quantized.insert(n.inputs[i]);
    }
    for (size_t id = 0; id < graph_.values.size(); ++id) {
      Value& v = graph_.values[id];
      if (v.kind != ValueKind::kWeight) continue;
      const bool refittable = IsFloat(v.dtype) || quantized.count(static_cast<int>(id));
      if (!refittable || shape_operands.count(static_cast<int>(id))) v.kind = ValueKind::kConstant;
    }
  }

  const ModelProto& model_;
  std::string base_dir_;
  std::map<std::string, int> opsets_;
  Graph graph_;
  uint64_t budget_left_ = CurrentMemoryBudget();  // for all tensors of the model
  int node_index_ = 0;  // position in the model's node list, for unnamed nodes
};

}  // namespace

Graph LoadOnnxModel(const void* bytes, size_t size, const std::string& base_dir) {
  if (size == 0) Fail(StatusCode::kModel, "the model is empty (0 bytes)");
  if (size > static_cast<size_t>(std::numeric_limits<int>::max()))
    Fail(StatusCode::kModel, "the model is larger than 2 GB; store its weights as external data");
  ModelProto model;
  if (!model.ParseFromArray(bytes, static_cast<int>(size)))
    Fail(StatusCode::kModel, "the bytes are not a valid ONNX model (malformed or truncated "
         "protobuf, ", size, " bytes)");
  try {
    return Importer(model, base_dir).Run();
  } catch (const std::length_error& e) {
    // Sizes are checked before allocation; these mean a size slipped through.
    Fail(StatusCode::kModel, "the model declares a size the importer cannot hold (", e.what(), ")");
  } catch (const std::invalid_argument& e) {
    Fail(StatusCode::kModel, "the model holds a malformed value (", e.what(), ")");
  } catch (const std::out_of_range& e) {
    Fail(StatusCode::kModel, "the model holds a value out of range (", e.what(), ")");
  }
}

}  // namespace kaiwu
