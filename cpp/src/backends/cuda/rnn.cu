// Registration of the CUDA recurrent kernels and the parts LSTM and GRU
// share: geometry and support checks, state load/store kernels.
#include <cctype>
#include <string>

#include "backends/cuda/rnn_common.cuh"

namespace kaiwu {
namespace cuda {

namespace {

bool SameNameIgnoringCase(const std::string& a, const char* b) {
  const std::string bs(b);
  if (a.size() != bs.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(bs[i])))
      return false;
  return true;
}

__global__ void LoadStatesKernel(RnnGeometry g, int64_t d, const float* init_h, float* h,
                                 const float* init_c, float* c) {
  const int64_t H = g.hidden;
  KAIWU_CUDA_LOOP(i, g.batch * H) {
    const int64_t b = i / H;
    const int64_t src = g.StateOffset(d, b) + (i - b * H);
    h[i] = init_h ? init_h[src] : 0.f;
    if (c) c[i] = init_c ? init_c[src] : 0.f;
  }
}

__global__ void StoreStatesKernel(RnnGeometry g, int64_t d, const float* h, float* y_h,
                                  const float* c, float* y_c) {
  const int64_t H = g.hidden;
  KAIWU_CUDA_LOOP(i, g.batch * H) {
    const int64_t b = i / H;
    const int64_t dst = g.StateOffset(d, b) + (i - b * H);
    if (y_h) y_h[dst] = h[i];
    if (y_c) y_c[dst] = c[i];
  }
}

}  // namespace

RnnGeometry PrepareRnnGeometry(const PrepareContext& ctx, int gates,
                               const std::vector<const char*>& defaults) {
  const RnnParams& p = ctx.Params<RnnParams>();
  RnnGeometry g(p.dims);
  // Shape inference checked the list's length and names; the CUDA gate
  // kernels implement only the default functions.
  const std::vector<std::string>& names = p.activation_names;
  for (size_t i = 0; i < names.size(); ++i)
    if (!SameNameIgnoringCase(names[i], defaults[i % defaults.size()]))
      Fail(StatusCode::kUnsupported, ctx.node.Describe(), ": activation '", names[i],
           "' at position ", i, " is not supported by the CUDA backend (only the default ",
           defaults[i % defaults.size()], ")");
  CheckBlasInt(ctx, g.seq * g.batch, "rows of X");
  CheckBlasInt(ctx, g.input, "input size");
  CheckBlasInt(ctx, gates * g.hidden, "gates * hidden_size");
  return g;
}

void RnnLoadStates(const DeviceContext& dev, const RnnGeometry& g, int64_t d, const float* init_h,
                   float* h, const float* init_c, float* c) {
  const unsigned grid = GridFor(g.batch * g.hidden);
  LoadStatesKernel<<<grid, kBlock, 0, dev.stream>>>(g, d, init_h, h, init_c, c);
  CheckLaunch("RNN load states kernel");
}

void RnnStoreStates(const DeviceContext& dev, const RnnGeometry& g, int64_t d, const float* h,
                    float* y_h, const float* c, float* y_c) {
  if (!y_h && !y_c) return;
  const unsigned grid = GridFor(g.batch * g.hidden);
  StoreStatesKernel<<<grid, kBlock, 0, dev.stream>>>(g, d, h, y_h, c, y_c);
  CheckLaunch("RNN store states kernel");
}

void RegisterRnnKernels(KernelRegistry& r) {
  // Keyed by X: float16 / bfloat16 X and W (a half session's input projection).
  r.Register(OpId::kLSTM, {DType::kFloat32, DType::kFloat16, DType::kBFloat16}, &MakeLstmKernel);
  r.Register(OpId::kGRU, {DType::kFloat32, DType::kFloat16, DType::kBFloat16}, &MakeGruKernel);
}

}  // namespace cuda
}  // namespace kaiwu
