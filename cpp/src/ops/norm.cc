// Shape inference of BatchNormalization InstanceNormalization LayerNormalization.
#include "ops/op_registry.h"

namespace kaiwu {

void RegisterNormOps(OpRegistry& r) {
  (void)r;
}

}  // namespace kaiwu
