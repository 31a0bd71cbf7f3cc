#include "backends/kernel.h"

namespace kaiwu {

void KernelRegistry::Register(OpId op, std::initializer_list<DType> dtypes, KernelFactory factory,
                              Precision precision) {
  if (op >= OpId::kCount) Fail(StatusCode::kInternal, "kernel registered for an unknown op");
  for (DType d : dtypes) {
    if (d == DType::kUndefined)
      Fail(StatusCode::kInternal, "kernel of ", OpName(op), " registered without a dtype");
    if (Find(op, d, precision))
      Fail(StatusCode::kInternal, "two kernels registered for ", OpName(op), " ", DTypeName(d),
           " ", PrecisionName(precision));
    entries_.push_back(Entry{op, d, precision, factory});
  }
}

KernelFactory KernelRegistry::Find(OpId op, DType dtype, Precision precision) const {
  for (const Entry& e : entries_)
    if (e.op == op && e.dtype == dtype && e.precision == precision) return e.factory;
  return nullptr;
}

bool KernelRegistry::Has(OpId op) const {
  for (const Entry& e : entries_)
    if (e.op == op) return true;
  return false;
}

}  // namespace kaiwu
