// Shape inference of unary math and activations.
#include "ops/op_registry.h"

namespace kaiwu {

void RegisterUnaryOps(OpRegistry& r) {
  (void)r;
}

}  // namespace kaiwu
