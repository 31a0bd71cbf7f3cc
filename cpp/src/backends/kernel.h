// The contract between the planner and a backend's kernels.
//
// A kernel object is made per node per execution plan, after the op layer's
// shape inference (ops/op.h) checked the node's dtypes and attributes and set
// its output shapes. Prepare runs once per input-shape signature: it reads the
// inferred shapes and params, asks for scratch memory, prepacks what it reads
// and may declare an output that aliases an input. Run only computes; it must
// not allocate, and it may be called from several threads at once on one object.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "ir/graph.h"
#include "ops/op.h"
#include "kaiwu/status.h"
#include "kaiwu/tensor.h"

namespace kaiwu {

/// Resources a device kernel asks the run contexts of its plan for.
enum DeviceNeed : uint32_t {
  kNeedDnnHandle = 1u,  ///< a DNN library handle bound to the run's stream (cuDNN)
};

/// What a kernel's Prepare sees: the node after op shape inference (inputs,
/// outputs, aliases and checked attributes: ops/op_context.h), plus what the
/// kernel asks of the plan.
struct PrepareContext : OpContext {
  size_t scratch_bytes = 0;         // per-run scratch the kernel needs
  int num_threads = 1;
  /// Device kernels: backend resources every run of this step needs in its
  /// context (DeviceNeed bits), so that run contexts create only what is used.
  uint32_t device_needs = 0;

  explicit PrepareContext(const Node& n) : OpContext(n) {}
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

/// A backend's kernels, keyed by (op, dtype, precision): the dtype is that of
/// the op's type input (OpDef::type_input). Kernels are registered
/// explicitly by one function per backend (RegisterCpuKernels), never by
/// static initialisers.
class KernelRegistry {
 public:
  struct Entry {
    OpId op;
    DType dtype;
    Precision precision;
    KernelFactory factory;
  };

  void Register(OpId op, std::initializer_list<DType> dtypes, KernelFactory factory,
                Precision precision = Precision::kFloat32);
  void Register(OpId op, DType dtype, KernelFactory factory,
                Precision precision = Precision::kFloat32) {
    Register(op, {dtype}, factory, precision);
  }
  /// The kernel for the key, or null.
  KernelFactory Find(OpId op, DType dtype, Precision precision = Precision::kFloat32) const;
  /// True when any kernel of the op is registered.
  bool Has(OpId op) const;
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

/// Registry of the CPU backend, built once.
const KernelRegistry& CpuKernels();

/// The multiple to which a channels-last integer conv's packed kernel rows are
/// padded on this CPU (passes/layout_nhwc.h row_align): 64 where the int8
/// path is AMX (whole tile steps), else 4 (whole quads).
int CpuInt8ConvRowAlign();

template <typename K>
std::unique_ptr<Kernel> MakeKernel(const Node&) {
  return std::make_unique<K>();
}

}  // namespace kaiwu
