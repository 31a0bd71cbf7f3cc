// Shape inference of layout and indexing: Concat Split Expand Tile Gather* OneHot Pad Slice Transpose Reshape ....
#include "ops/op_registry.h"

namespace kaiwu {

void RegisterTensorOps(OpRegistry& r) {
  (void)r;
}

}  // namespace kaiwu
