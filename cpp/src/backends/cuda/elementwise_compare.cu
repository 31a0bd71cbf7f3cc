// Comparisons and selection on CUDA, matching elementwise_compare.cc and
// elementwise_select.cc: Equal Less Greater LessOrEqual GreaterOrEqual on
// float32/int32/int64/float16/bfloat16 (Equal also on bool; the 16-bit floats
// compare as float), And Or Xor Not on bool, and
// Where(condition, X, Y) with three-way broadcasting for any element size.
// Bools are bytes; logical ops work on the bytes as the CPU kernels do.
#include <type_traits>

#include "backends/cuda/elementwise_util.cuh"
#include "backends/cuda/half_util.cuh"

namespace kaiwu {
namespace cuda {
namespace eltwise {
namespace {

enum class CmpOp { kEqual, kLess, kGreater, kLessEqual, kGreaterEqual, kAnd, kOr, kXor };

template <typename T>
struct CompareFn {
  CmpOp op;

  __device__ uint8_t operator()(T a_in, T b_in) const {
    const ComputeT<T> a = Load(a_in), b = Load(b_in);
    switch (op) {
      case CmpOp::kEqual: return a == b;
      case CmpOp::kLess: return a < b;
      case CmpOp::kGreater: return a > b;
      case CmpOp::kLessEqual: return a <= b;
      case CmpOp::kGreaterEqual: return a >= b;
      default: break;
    }
    if constexpr (std::is_integral_v<T>) {  // the logical ops, registered on bool only
      switch (op) {
        case CmpOp::kAnd: return a & b;
        case CmpOp::kOr: return a | b;
        default: return a ^ b;
      }
    }
    return 0;
  }
};

class CompareKernel : public CudaKernel {
 public:
  explicit CompareKernel(CmpOp op) : op_(op) {}

 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    dtype_ = ctx.in(0).dtype;
    const Shape& out = ctx.outputs[0].shape;
    size_ = NumElements(out);
    ix_ = MakeIndexer<2>(ctx, {ctx.in(0).shape, ctx.in(1).shape}, out);
  }

  void Run(const KernelIO& io) const override {
    switch (dtype_) {
      case DType::kBool: return RunTyped<uint8_t>(io);
      case DType::kInt32: return RunTyped<int32_t>(io);
      case DType::kInt64: return RunTyped<int64_t>(io);
      case DType::kFloat16: return RunTyped<__half>(io);
      case DType::kBFloat16: return RunTyped<__nv_bfloat16>(io);
      default: return RunTyped<float>(io);
    }
  }

 private:
  template <typename T>
  void RunTyped(const KernelIO& io) const {
    LaunchBinary(ix_, size_, static_cast<const T*>(io.inputs[0]),
                 static_cast<const T*>(io.inputs[1]), static_cast<uint8_t*>(io.outputs[0]),
                 CompareFn<T>{op_}, Dev(io).stream, "comparison kernel");
  }

  CmpOp op_;
  DType dtype_ = DType::kUndefined;
  int64_t size_ = 0;
  ElementIndexer<2> ix_;
};

struct NotFn {
  __device__ uint8_t operator()(uint8_t x) const { return x ^ 1; }
};

class NotKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override { size_ = ctx.in(0).size(); }

  void Run(const KernelIO& io) const override {
    LaunchMap(size_, static_cast<const uint8_t*>(io.inputs[0]),
              static_cast<uint8_t*>(io.outputs[0]), NotFn{}, Dev(io).stream, "Not kernel");
  }

 private:
  int64_t size_ = 0;
};

// o = c ? x : y on words of the element size (a select only moves elements).
template <typename W>
__global__ void SelectKernel(ElementIndexer<3> ix, int64_t n, const uint8_t* c, const W* x,
                            const W* y, W* o) {
  KAIWU_CUDA_LOOP(i, n) {
    int64_t off[3];
    ix.Offsets(i, off);
    o[i] = c[off[0]] ? x[off[1]] : y[off[2]];
  }
}

class WhereKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    word_ = DTypeSize(ctx.in(1).dtype);
    const Shape& out = ctx.outputs[0].shape;
    size_ = NumElements(out);
    ix_ = MakeIndexer<3>(ctx, {ctx.in(0).shape, ctx.in(1).shape, ctx.in(2).shape}, out);
  }

  void Run(const KernelIO& io) const override {
    switch (word_) {
      case 1: return RunTyped<uint8_t>(io);
      case 2: return RunTyped<uint16_t>(io);
      case 4: return RunTyped<uint32_t>(io);
      default: return RunTyped<uint64_t>(io);
    }
  }

 private:
  template <typename W>
  void RunTyped(const KernelIO& io) const {
    if (size_ <= 0) return;
    SelectKernel<W><<<GridFor(size_), kBlock, 0, Dev(io).stream>>>(
        ix_, size_, static_cast<const uint8_t*>(io.inputs[0]), static_cast<const W*>(io.inputs[1]),
        static_cast<const W*>(io.inputs[2]), static_cast<W*>(io.outputs[0]));
    CheckLaunch("Where kernel");
  }

  size_t word_ = 4;
  int64_t size_ = 0;
  ElementIndexer<3> ix_;
};

template <CmpOp kOp>
std::unique_ptr<Kernel> MakeCompare(const Node&) {
  return std::make_unique<CompareKernel>(kOp);
}

}  // namespace

void RegisterCompareKernels(KernelRegistry& r) {
  const std::initializer_list<DType> numeric = {DType::kFloat32, DType::kInt32, DType::kInt64,
                                                DType::kFloat16, DType::kBFloat16};
  r.Register(OpId::kEqual,
             {DType::kFloat32, DType::kInt32, DType::kInt64, DType::kBool, DType::kFloat16,
              DType::kBFloat16},
             &MakeCompare<CmpOp::kEqual>);
  r.Register(OpId::kLess, numeric, &MakeCompare<CmpOp::kLess>);
  r.Register(OpId::kGreater, numeric, &MakeCompare<CmpOp::kGreater>);
  r.Register(OpId::kLessOrEqual, numeric, &MakeCompare<CmpOp::kLessEqual>);
  r.Register(OpId::kGreaterOrEqual, numeric, &MakeCompare<CmpOp::kGreaterEqual>);
  r.Register(OpId::kAnd, DType::kBool, &MakeCompare<CmpOp::kAnd>);
  r.Register(OpId::kOr, DType::kBool, &MakeCompare<CmpOp::kOr>);
  r.Register(OpId::kXor, DType::kBool, &MakeCompare<CmpOp::kXor>);
  r.Register(OpId::kNot, DType::kBool, &MakeKernel<NotKernel>);
  // Keyed on X's dtype (Where's type input is 1): every dtype is a word of 1, 2, 4 or 8 bytes.
  r.Register(OpId::kWhere,
             {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16, DType::kInt8,
              DType::kUInt8, DType::kInt16, DType::kInt32, DType::kInt64, DType::kBool},
             &MakeKernel<WhereKernel>);
}

}  // namespace eltwise
}  // namespace cuda
}  // namespace kaiwu
