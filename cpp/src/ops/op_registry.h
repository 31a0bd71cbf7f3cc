// The op families' definition functions, called once by GetOpDef (op.cc).
// Each family file (ops/<family>.cc) defines its ops' shape inference with
// OpRegistry::Define; a family's params structs live in ops/<family>.h.
#pragma once

#include "ops/op.h"

namespace kaiwu {

void RegisterAllOps(OpRegistry& r);  // op_registry.cc: calls the families below

void RegisterShapeOps(OpRegistry& r);  // shape_ops.cc: Shape Size ConstantOfShape Range

}  // namespace kaiwu
