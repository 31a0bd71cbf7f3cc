// What the op layer and the kernels of every backend see of one node at plan
// time: its inputs' dtypes and shapes (and data, where known when the plan is
// built), the outputs that shape inference sets, and the checked attributes.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <vector>

#include "ir/graph.h"
#include "kaiwu/status.h"
#include "kaiwu/tensor.h"

namespace kaiwu {

struct TensorInfo {
  bool present = false;        // false for an omitted optional input
  DType dtype = DType::kUndefined;
  Shape shape;
  const void* data = nullptr;  // non-null when the value is known at plan time

  int64_t size() const { return NumElements(shape); }
  int rank() const { return static_cast<int>(shape.size()); }
  template <typename T> const T* As() const { return static_cast<const T*>(data); }
};

/// An op's attributes after parsing and validation (one struct per op family,
/// declared in ops/<family>.h). Kernels read them with OpContext::Params<P>().
struct OpParams {
  virtual ~OpParams() = default;
};

class OpContext {
 public:
  const Node& node;
  std::vector<TensorInfo> inputs;   // filled by the planner
  std::vector<TensorInfo> outputs;  // filled by shape inference: dtype and shape
  /// Per output: index of an input whose buffer it may share (a view such as
  /// Reshape), or -1. The planner may decline; Run must then copy.
  std::vector<int> alias;
  /// Per aliased output: where it starts in that input, in elements (a
  /// contiguous slice such as Gather of one index on the outermost axis); empty: 0.
  std::vector<int64_t> alias_offset;
  /// Inputs this node does not read for these shapes (empty: it reads all): the
  /// planner drops the steps that only feed them (FusedAttention reading Q, K or
  /// V through a view of the tensor their layout ops start from).
  std::vector<bool> unused_inputs;
  /// Set by shape inference of Shape/Size-like ops: the outputs depend only on
  /// input shapes, so the planner computes them at plan time.
  bool shape_only = false;
  /// The checked attributes, when the op has any (set by shape inference).
  std::shared_ptr<const OpParams> params;

  explicit OpContext(const Node& n) : node(n) {}
  virtual ~OpContext() = default;

  int num_inputs() const { return static_cast<int>(inputs.size()); }
  bool HasInput(int i) const { return i < num_inputs() && inputs[i].present; }
  const TensorInfo& in(int i) const;
  /// Sets output i's dtype and shape.
  void SetOutput(int i, DType dtype, Shape shape);
  /// Throws kModel with the node named.
  template <typename... Args>
  [[noreturn]] void Error(const Args&... args) const {
    Fail(StatusCode::kModel, node.Describe(), ": ", args...);
  }
  /// Requires input i to be present, of one of the given dtypes.
  void ExpectDType(int i, std::initializer_list<DType> allowed) const;
  /// Requires exactly / between counts of inputs.
  void ExpectInputs(int min_count, int max_count) const;
  /// Requires input i's data at plan time (shape operands); returns it as int64.
  std::vector<int64_t> ConstInts(int i) const;

  /// Creates the params object of type P (shape inference).
  template <typename P>
  P& SetParams() {
    auto p = std::make_shared<P>();
    P& ref = *p;
    params = std::move(p);
    return ref;
  }
  /// The params shape inference set, as P.
  template <typename P>
  const P& Params() const {
    const P* p = dynamic_cast<const P*>(params.get());
    if (!p) Fail(StatusCode::kInternal, node.Describe(), ": shape inference set no parameters of the kind its kernel reads");
    return *p;
  }
  /// The params as a shared pointer, for kernels that keep them.
  template <typename P>
  std::shared_ptr<const P> SharedParams() const {
    Params<P>();
    return std::static_pointer_cast<const P>(params);
  }
};

/// Input i's values (any numeric dtype) as doubles; it must be known at plan time.
std::vector<double> ConstNumbers(const OpContext& ctx, int i);

/// Normalises a possibly negative axis against `rank`, or fails naming the node.
int64_t NormalizeAxis(const OpContext& ctx, int64_t axis, int64_t rank);

/// Numpy broadcasting of two shapes, or fails naming the node.
Shape BroadcastShapes(const OpContext& ctx, const Shape& a, const Shape& b);

/// Numpy broadcasting of all of `shapes`, or fails naming the node.
Shape BroadcastAll(const OpContext& ctx, const std::vector<Shape>& shapes);

}  // namespace kaiwu
