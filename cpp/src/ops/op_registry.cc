#include "ops/op_registry.h"

namespace kaiwu {

void RegisterAllOps(OpRegistry& r) {
  RegisterShapeOps(r);
  RegisterBinaryOps(r);
  RegisterUnaryOps(r);
  RegisterSoftmaxOps(r);
  RegisterLinalgOps(r);
  RegisterConvOps(r);
  RegisterNormOps(r);
  RegisterReduceOps(r);
  RegisterRnnOps(r);
  RegisterTensorOps(r);
  RegisterGameOps(r);
  RegisterQuantOps(r);
}

}  // namespace kaiwu
