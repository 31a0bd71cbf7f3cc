// Shape inference of Reduce*, ArgMax, ArgMin.
#include "ops/op_registry.h"

namespace kaiwu {

void RegisterReduceOps(OpRegistry& r) {
  (void)r;
}

}  // namespace kaiwu
