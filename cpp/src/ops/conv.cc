// Shape inference of Conv and the pools.
#include "ops/op_registry.h"

namespace kaiwu {

void RegisterConvOps(OpRegistry& r) {
  (void)r;
}

}  // namespace kaiwu
