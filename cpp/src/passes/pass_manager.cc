#include "passes/pass_manager.h"

#include <cstdlib>
#include <cstring>

#include "passes/layout_nhwc.h"
#include "passes/rewrite_util.h"
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
    {"sink_transpose_below_matmul", SinkTransposeBelowMatMul},
    {"fuse_matmul_add", FuseMatMulAdd},
    {"fuse_gelu", FuseGelu},
    {"hoist_activation_above_reshape", HoistActivationAboveReshape},
    {"fold_transpose_into_gemm", FoldTransposeIntoGemm},
    {"fuse_elementwise", FuseElementwise},
    {"fuse_qdq", FuseQdq},
    {"hoist_reshape_above_dq", HoistReshapeAboveDequantize},
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
  // Float32 2-D convs (group 1, no dilation) and max pools run channels-last:
  // the register tiles then write whole runs of output channels and read the
  // weight as GEMM panels (backends/cpu/conv_nhwc.h).
  // KAIWU_CPU_NHWC=0 keeps them NCHW (a diagnostic switch for A/B timing,
  // read when a session is built).
  const char* nhwc = std::getenv("KAIWU_CPU_NHWC");
  if (nhwc != nullptr && std::strcmp(nhwc, "0") == 0) {
    graph->RemoveDeadNodes();
    return;
  }
  // Convs need a static weight (packed once by static nodes).
  const std::vector<bool> is_static = StaticValues(*graph);
  auto accepts = [&is_static](const Node& n, DType t) {
    if (t != DType::kFloat32) return false;
    if (n.op_type != "Conv") {  // MaxPool: windows of up to 64 taps
      int64_t taps = 1;
      for (int64_t k : n.GetInts("kernel_shape")) taps *= k;
      return taps <= 64;
    }
    for (int64_t d : n.GetInts("dilations"))
      if (d != 1) return false;
    if (n.Has("kernel_shape") && n.GetInts("kernel_shape").size() != 2) return false;
    return n.num_inputs() > 1 && n.inputs[1] >= 0 && is_static[n.inputs[1]];
  };
  // A lone conv stays NCHW: the transposes on both sides would cost more than
  // the layout saves (measured on a single Conv + Relu: 0.76-0.90x).
  int convs = 0;
  for (const Node& n : graph->nodes)
    convs += n.domain.empty() && n.op_type == "Conv" && accepts(n, DType::kFloat32) ? 1 : 0;
  if (convs < 2) {
    graph->RemoveDeadNodes();
    return;
  }
  if (int n = ConvertToNhwc(graph, [](OpId, DType t) { return t == DType::kFloat32; }, accepts)) {
    stats->fired["layout_nhwc"] += n;
    stats->fired["prepack_nhwc_conv_weights"] += PrepackNhwcConvWeights(graph);
    if (int h = HoistTransposeAboveCast(graph)) stats->fired["hoist_transpose_above_cast"] += h;
    if (int a = FuseNhwcConvAdd(graph)) stats->fired["fuse_nhwc_conv_add"] += a;
    if (int r = FuseReluIntoNhwcConv(graph)) stats->fired["fuse_relu_into_nhwc_conv"] += r;
    if (int c = FuseCastIntoNhwcConv(graph)) stats->fired["fuse_cast_into_nhwc_conv"] += c;
  }
  graph->RemoveDeadNodes();
}

}  // namespace kaiwu
