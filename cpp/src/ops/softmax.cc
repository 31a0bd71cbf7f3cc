// Shape inference of Softmax LogSoftmax Hardmax.
#include "ops/op_registry.h"

namespace kaiwu {

void RegisterSoftmaxOps(OpRegistry& r) {
  (void)r;
}

}  // namespace kaiwu
