// Shape inference of Gemm MatMul Einsum.
#include "ops/op_registry.h"

namespace kaiwu {

void RegisterLinalgOps(OpRegistry& r) {
  (void)r;
}

}  // namespace kaiwu
