// MatMulInteger and QLinearMatMul (reference kernels): int32 accumulation of
// zero-point-shifted 8-bit operands, batched with numpy broadcasting; the
// QLinear form requantizes with a_scale * b_scale / y_scale per element.
#include "backends/cpu/quant_kernels.h"
#include "backends/linalg_index.h"

namespace kaiwu {
namespace cpu {
namespace {

template <bool kLinear>
class QMatMulKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    p_ = ctx.Params<QMatMulParams>();
    batch_ = NumElements(p_.batch);
    BatchMatrixOffsets(p_.a_batch, p_.b_batch, p_.batch, p_.m * p_.k, p_.k * p_.n, &a_off_, &b_off_);
    const int64_t acc = kLinear ? p_.m * p_.n * sizeof(int32_t) : 0;
    ctx.scratch_bytes = static_cast<size_t>(acc + (p_.m + p_.n) * sizeof(int32_t));
  }

  void Run(const KernelIO& io) const override {
    if (p_.a_dtype == DType::kUInt8) RunA<uint8_t>(io);
    else RunA<int8_t>(io);
  }

 private:
  // Input indices: MatMulInteger (a, b, a_zp, b_zp); QLinearMatMul (a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp).
  static constexpr int kB = kLinear ? 3 : 1, kAZ = 2, kBZ = kLinear ? 5 : 3;

  template <typename A>
  void RunA(const KernelIO& io) const {
    if (p_.b_dtype == DType::kUInt8) RunAB<A, uint8_t>(io);
    else RunAB<A, int8_t>(io);
  }

  template <typename A, typename B>
  void RunAB(const KernelIO& io) const {
    const A* a = static_cast<const A*>(io.inputs[0]);
    const B* b = static_cast<const B*>(io.inputs[kB]);
    int32_t* scratch = static_cast<int32_t*>(io.scratch);
    int32_t* acc = kLinear ? scratch : nullptr;
    int32_t* azp = scratch + (kLinear ? p_.m * p_.n : 0);
    int32_t* bzp = azp + p_.m;
    const void* az = p_.has_a_zp ? io.inputs[kAZ] : nullptr;
    const void* bz = p_.has_b_zp ? io.inputs[kBZ] : nullptr;
    for (int64_t i = 0; i < p_.m; ++i) azp[i] = ZeroPoint(az, p_.a_dtype, p_.a_per_row, i);
    for (int64_t j = 0; j < p_.n; ++j) bzp[j] = ZeroPoint(bz, p_.b_dtype, p_.b_per_col, j);
    for (int64_t t = 0; t < batch_; ++t) {
      const A* at = a + a_off_[t];
      const B* bt = b + b_off_[t];
      if (!kLinear) {
        int32_t* y = static_cast<int32_t*>(io.outputs[0]) + t * p_.m * p_.n;
        Gemm(io.pool, at, azp, bt, bzp, y);
        continue;
      }
      Gemm(io.pool, at, azp, bt, bzp, acc);
      if (p_.y_dtype == DType::kUInt8) Store<uint8_t>(io, acc, t);
      else Store<int8_t>(io, acc, t);
    }
  }

  // Rows split across the pool.
  template <typename A, typename B>
  void Gemm(ThreadPool* pool, const A* a, const int32_t* azp, const B* b, const int32_t* bzp,
            int32_t* acc) const {
    pool->ParallelFor(p_.m, 2.0 * p_.n * p_.k, [&](int64_t r0, int64_t r1) {
      IntGemmRef(r1 - r0, p_.n, p_.k, a + r0 * p_.k, p_.k, azp + r0, b, p_.n, bzp, acc + r0 * p_.n);
    });
  }

  template <typename Y>
  void Store(const KernelIO& io, const int32_t* acc, int64_t t) const {
    const float* as = static_cast<const float*>(io.inputs[1]);
    const float* bs = static_cast<const float*>(io.inputs[4]);
    const float* ys = static_cast<const float*>(io.inputs[6]);
    Y* y = static_cast<Y*>(io.outputs[0]) + t * p_.m * p_.n;
    for (int64_t i = 0; i < p_.m; ++i)
      for (int64_t j = 0; j < p_.n; ++j) {
        const float mult = as[p_.a_per_row ? i : 0] * bs[p_.b_per_col ? j : 0] / ys[p_.y_per_col ? j : 0];
        y[i * p_.n + j] = Requantize<Y>(acc[i * p_.n + j], mult,
                                        ZeroPoint(io.inputs[7], p_.y_dtype, p_.y_per_col, j));
      }
  }

  QMatMulParams p_;
  int64_t batch_ = 1;
  std::vector<int64_t> a_off_, b_off_;
};

}  // namespace

void RegisterQuantMatMulKernels(KernelRegistry& r) {
  r.Register(OpId::kMatMulInteger, {DType::kUInt8, DType::kInt8}, &MakeKernel<QMatMulKernel<false>>);
  r.Register(OpId::kQLinearMatMul, {DType::kUInt8, DType::kInt8}, &MakeKernel<QMatMulKernel<true>>);
}

}  // namespace cpu
}  // namespace kaiwu
