#include "passes/pass_manager.h"

#include "passes/rules.h"

namespace kaiwu {

namespace {
struct Rule {
  const char* name;
  int (*apply)(Graph*);
};
// Order matters within a sweep: BatchNorm folds before activations fuse into Conv.
constexpr Rule kRules[] = {
    {"eliminate_identity", EliminateIdentity},
    {"fold_conv_batchnorm", FoldConvBatchNorm},
    {"fold_scale_into_conv", FoldScaleIntoConv},
    {"fuse_activation", FuseActivation},
    // Structural folds first, then fusions (MatMul+Add before elementwise chains
    // so the Add lands in the Gemm; a later sweep fuses activations into them).
    {"fold_dilated_conv", FoldDilatedConv},
    {"fold_transpose_pair", FoldTransposePair},
    {"fold_split_concat", FoldSplitConcat},
    {"fold_constant_fill", FoldConstantFill},
    {"eliminate_common_subexpr", EliminateCommonSubexpr},
    {"fuse_matmul_add", FuseMatMulAdd},
    {"hoist_activation_above_reshape", HoistActivationAboveReshape},
    {"fold_transpose_into_gemm", FoldTransposeIntoGemm},
    {"fuse_elementwise", FuseElementwise},
    {"fuse_qdq", FuseQdq},
    {"fuse_qdq_lookup", FuseQdqLookup},
};
}  // namespace

void Optimize(Graph* graph, PassStats* stats) {
  graph->RemoveDeadNodes();
  for (int sweep = 0; sweep < 8; ++sweep) {
    int changed = 0;
    for (const Rule& rule : kRules) {
      int n = rule.apply(graph);
      if (n) stats->fired[rule.name] += n;
      changed += n;
    }
    if (!changed) break;
  }
  graph->RemoveDeadNodes();
}

void OptimizeForCpu(Graph* graph, PassStats* stats) {
  if (int n = PrepackGemmWeights(graph)) stats->fired["prepack_gemm_weights"] += n;
  graph->RemoveDeadNodes();
}

}  // namespace kaiwu
