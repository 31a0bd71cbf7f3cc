// Shape inference of LSTM GRU.
#include "ops/op_registry.h"

namespace kaiwu {

void RegisterRnnOps(OpRegistry& r) {
  (void)r;
}

}  // namespace kaiwu
