#include "ops/op_registry.h"

namespace kaiwu {

void RegisterAllOps(OpRegistry& r) {
  RegisterShapeOps(r);
}

}  // namespace kaiwu
