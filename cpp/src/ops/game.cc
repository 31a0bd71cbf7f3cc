// Shape inference of Resize ScatterElements ScatterND TopK CumSum.
#include "ops/op_registry.h"

namespace kaiwu {

void RegisterGameOps(OpRegistry& r) {
  (void)r;
}

}  // namespace kaiwu
