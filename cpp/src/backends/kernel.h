// The contract between the planner and a backend's kernels.
//
// A kernel object is made per node per execution plan. Prepare runs once per
// input-shape signature: it checks dtypes and attributes, computes the output
// shapes (this is the engine's shape inference), asks for scratch memory and
// may declare an output that aliases an input. Run only computes; it must not
// allocate, and it may be called from several threads at once on one object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
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

/// Resources a device kernel asks the run contexts of its plan for.
enum DeviceNeed : uint32_t {
  kNeedDnnHandle = 1u,  ///< a DNN library handle bound to the run's stream (cuDNN)
};

struct PrepareContext {
  const Node& node;
  std::vector<TensorInfo> inputs;   // filled by the planner
  std::vector<TensorInfo> outputs;  // filled by Prepare: dtype and shape
  size_t scratch_bytes = 0;         // per-run scratch the kernel needs
  /// Per output: index of an input whose buffer it may share (a view such as
  /// Reshape), or -1. The planner may decline; Run must then copy.
  std::vector<int> alias;
  /// Set by Shape/Size-like kernels: the outputs depend only on input shapes,
  /// so the planner computes them at plan time and Run never sees data inputs.
  bool shape_only = false;
  int num_threads = 1;
  /// Device kernels: backend resources every run of this step needs in its
  /// context (DeviceNeed bits), so that run contexts create only what is used.
  uint32_t device_needs = 0;

  explicit PrepareContext(const Node& n) : node(n) {}

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
  /// Requires input i's data at plan time (shape operands); returns it as int64.
  std::vector<int64_t> ConstInts(int i) const;
};

struct KernelIO {
  const void* const* inputs;  // nullptr for omitted optional inputs
  void* const* outputs;
  void* scratch;
  ThreadPool* pool;
  /// Backend state for device kernels (cuda::DeviceContext); null on the CPU.
  const void* device = nullptr;
};

class Kernel {
 public:
  virtual ~Kernel() = default;
  virtual void Prepare(PrepareContext& ctx) = 0;
  virtual void Run(const KernelIO& io) const = 0;
};

using KernelFactory = std::unique_ptr<Kernel> (*)(const Node& node);

/// op type -> factory, per domain. Kernels are registered explicitly by one
/// function per backend (RegisterCpuKernels), never by static initialisers.
class KernelRegistry {
 public:
  void Register(const std::string& op_type, KernelFactory factory,
                const std::string& domain = "");
  KernelFactory Find(const std::string& op_type, const std::string& domain) const;
  std::vector<std::string> OpTypes(const std::string& domain = "") const;

 private:
  std::vector<std::pair<std::string, KernelFactory>> entries_;  // key: domain + ":" + op
};

/// Registry of the CPU backend, built once.
const KernelRegistry& CpuKernels();

template <typename K>
std::unique_ptr<Kernel> MakeKernel(const Node&) {
  return std::make_unique<K>();
}

}  // namespace kaiwu
