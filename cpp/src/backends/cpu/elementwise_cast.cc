// Cast (target from the `to` attribute, an ONNX TensorProto code) and CastLike
// (target dtype of input 1) between float32/64, int8/16/32/64, uint8 and bool.
#include <cstring>
#include <type_traits>

#include "backends/cpu/elementwise_util.h"

namespace kaiwu {
namespace cpu {

namespace {

// One element: float -> integer truncates toward zero (through int32 for the
// narrow types, so out-of-range values wrap as in numpy); anything -> bool is
// "non-zero"; bool -> anything is 0 or 1.
template <typename S, typename D>
inline D Convert(S x) {
  if constexpr (std::is_same_v<D, bool>) {
    return x != S(0);
  } else if constexpr (std::is_floating_point_v<S> && std::is_integral_v<D> &&
                       sizeof(D) < sizeof(int32_t)) {
    return static_cast<D>(static_cast<int32_t>(x));
  } else {
    return static_cast<D>(x);
  }
}

template <typename S, typename D>
void CastLoop(const void* in, void* out, int64_t n, ThreadPool* pool) {
  const S* x = static_cast<const S*>(in);
  D* y = static_cast<D*>(out);
  if constexpr (std::is_same_v<S, D>) {
    if (x != y) std::memcpy(y, x, sizeof(S) * n);
  } else if constexpr (std::is_same_v<S, bool>) {
    // Read bools as bytes so the loop vectorises.
    const uint8_t* b = static_cast<const uint8_t*>(in);
    ParallelElements(pool, n, 1.0, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) y[i] = static_cast<D>(b[i]);
    });
  } else {
    ParallelElements(pool, n, 1.0, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) y[i] = Convert<S, D>(x[i]);
    });
  }
}

template <typename S>
void CastFrom(DType to, const void* in, void* out, int64_t n, ThreadPool* pool) {
  KAIWU_DISPATCH_ALL(to, CastLoop<S, T>(in, out, n, pool));
}

class CastKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    from_ = ctx.in(0).dtype;
    to_ = ctx.outputs[0].dtype;
    size_ = ctx.in(0).size();
  }

  void Run(const KernelIO& io) const override {
    const void* in = io.inputs[0];
    void* out = io.outputs[0];
    KAIWU_DISPATCH_ALL(from_, CastFrom<T>(to_, in, out, size_, io.pool));
  }

 private:
  DType from_ = DType::kUndefined, to_ = DType::kUndefined;
  int64_t size_ = 0;
};

}  // namespace

void RegisterCastKernels(KernelRegistry& r) {
  const std::initializer_list<DType> all = {DType::kFloat32, DType::kFloat64, DType::kInt8,
                                            DType::kUInt8,   DType::kInt16,   DType::kInt32,
                                            DType::kInt64,   DType::kBool};
  r.Register(OpId::kCast, all, &MakeKernel<CastKernel>);
  r.Register(OpId::kCastLike, all, &MakeKernel<CastKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
