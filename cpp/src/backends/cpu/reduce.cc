// ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd, ReduceL1, ReduceL2,
// ReduceSumSquare, ReduceLogSum, ReduceLogSumExp.
//
// Prepare drops size-1 dimensions and merges neighbours that are both kept or
// both reduced, so every reduction becomes one of two contiguous patterns:
//  - the innermost merged dim is reduced: each output is a reduction of
//    contiguous runs (vectorised Eigen reductions), parallel over outputs;
//  - the innermost merged dim is kept: output rows accumulate contiguous input
//    rows (vectorised elementwise), parallel over rows and column chunks.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/reduce_family.h"
#include "backends/reduce_common.h"
#include "ops/reduce.h"

namespace kaiwu {
namespace cpu {
namespace {

using reduce::Accum;
using reduce::AccumOf;
using reduce::Combine;
using reduce::Finish;
using reduce::Identity;
using reduce::ReduceKind;

constexpr int kMaxDims = kMaxReduceRank;  // the op layer rejects higher ranks
constexpr int64_t kColumnChunk = 256;

template <typename T>
using ConstArr = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>;
template <typename T>
using Arr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

// Reduction of n contiguous elements.
template <typename T>
T ReduceRun(Accum a, const T* p, int64_t n) {
  ConstArr<T> x(p, n);
  switch (a) {
    case Accum::kSumAbs:
      if constexpr (std::is_signed_v<T>) return x.abs().sum();
      return x.sum();
    case Accum::kSumSquare: return x.square().sum();
    case Accum::kProd: return x.prod();
    case Accum::kMax: return x.maxCoeff();
    case Accum::kMin: return x.minCoeff();
    default: return x.sum();
  }
}

// acc[j] = combine(acc[j], map(p[j])) for n contiguous elements.
template <typename T>
void AccumulateRow(Accum a, T* acc, const T* p, int64_t n) {
  Arr<T> o(acc, n);
  ConstArr<T> x(p, n);
  switch (a) {
    case Accum::kSumAbs:
      if constexpr (std::is_signed_v<T>) o += x.abs(); else o += x;
      break;
    case Accum::kSumSquare: o += x.square(); break;
    case Accum::kProd: o *= x; break;
    case Accum::kMax: o = o.max(x); break;
    case Accum::kMin: o = o.min(x); break;
    default: o += x; break;
  }
}

// A multi-index over dims (sizes, strides) tracking the linear input offset.
struct Odometer {
  int n = 0;
  const int64_t* size = nullptr;
  const int64_t* stride = nullptr;
  int64_t idx[kMaxDims] = {};
  int64_t offset = 0;

  Odometer(int dims, const int64_t* sizes, const int64_t* strides)
      : n(dims), size(sizes), stride(strides) {}
  void Seek(int64_t linear) {
    offset = 0;
    for (int d = n - 1; d >= 0; --d) {
      idx[d] = linear % size[d];
      linear /= size[d];
      offset += idx[d] * stride[d];
    }
  }
  void Next() {
    for (int d = n - 1; d >= 0; --d) {
      offset += stride[d];
      if (++idx[d] < size[d]) return;
      offset -= stride[d] * size[d];
      idx[d] = 0;
    }
  }
};

class ReduceKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const ReduceParams& p = ctx.Params<ReduceParams>();
    kind_ = p.kind;
    dtype_ = ctx.in(0).dtype;
    copy_ = p.copy;
    count_ = p.count;
    out_size_ = ctx.outputs[0].size();
    if (copy_ || out_size_ == 0 || count_ == 0) return;

    const Shape& in = ctx.in(0).shape;
    std::vector<reduce::MergedDim> merged = reduce::MergeReduceDims(in, p.reduced);
    if (merged.empty()) merged.push_back({1, 1, false});
    inner_ = merged.back().size;
    inner_reduced_ = merged.back().reduced;
    kept_size_.clear(); kept_stride_.clear(); red_size_.clear(); red_stride_.clear();
    for (size_t i = 0; i + 1 < merged.size(); ++i) {
      (merged[i].reduced ? red_size_ : kept_size_).push_back(merged[i].size);
      (merged[i].reduced ? red_stride_ : kept_stride_).push_back(merged[i].stride);
    }
    if (kind_ == ReduceKind::kLogSumExp && !inner_reduced_)
      ctx.scratch_bytes = static_cast<size_t>(out_size_) * DTypeSize(dtype_);
  }

  void Run(const KernelIO& io) const override {
    DType t = dtype_ == DType::kBool ? DType::kUInt8 : dtype_;
    switch (t) {
      case DType::kFloat32: RunT<float>(io); break;
      case DType::kFloat64: RunT<double>(io); break;
      case DType::kInt32: RunT<int32_t>(io); break;
      case DType::kInt64: RunT<int64_t>(io); break;
      case DType::kInt8: RunT<int8_t>(io); break;
      case DType::kUInt8: RunT<uint8_t>(io); break;
      default: Fail(StatusCode::kInternal, "reduce: unexpected dtype");
    }
  }

 private:
  template <typename T>
  void RunT(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    T* y = static_cast<T*>(io.outputs[0]);
    if (copy_) {
      if (y != x) std::memcpy(y, x, static_cast<size_t>(out_size_) * sizeof(T));
      return;
    }
    if (out_size_ == 0) return;
    Accum acc = AccumOf(kind_);
    if (count_ == 0) {
      T v = Identity<T>(acc);
      v = kind_ == ReduceKind::kLogSumExp ? Identity<T>(Accum::kMax) : Finish(kind_, v, 0);
      std::fill(y, y + out_size_, v);
      return;
    }
    if (inner_reduced_)
      ReduceInner(x, y, acc, io.pool);
    else
      ReduceOuter(x, y, static_cast<T*>(io.scratch), acc, io.pool);
  }

  // Innermost merged dim reduced: each output reduces count_/inner_ runs of inner_.
  template <typename T>
  void ReduceInner(const T* x, T* y, Accum acc, ThreadPool* pool) const {
    const int64_t runs = count_ / inner_;
    auto body = [&](int64_t b, int64_t e) {
      Odometer ko(static_cast<int>(kept_size_.size()), kept_size_.data(), kept_stride_.data());
      ko.Seek(b);
      for (int64_t o = b; o < e; ++o, ko.Next()) {
        const T* base = x + ko.offset;
        Odometer ro(static_cast<int>(red_size_.size()), red_size_.data(), red_stride_.data());
        T a = Identity<T>(acc);
        for (int64_t r = 0; r < runs; ++r, ro.Next())
          a = Combine(acc, a, ReduceRun(acc, base + ro.offset, inner_));
        if constexpr (std::is_floating_point_v<T>) {
          if (kind_ == ReduceKind::kLogSumExp) {
            T m = a, sum = 0;
            if (std::isfinite(m)) {
              ro.Seek(0);
              for (int64_t r = 0; r < runs; ++r, ro.Next())
                sum += (ConstArr<T>(base + ro.offset, inner_) - m).exp().sum();
              m += std::log(sum);
            }
            y[o] = m;
            continue;
          }
        }
        {
          y[o] = Finish(kind_, a, count_);
        }
      }
    };
    pool->ParallelFor(out_size_, static_cast<double>(count_) * 2.0, body);
  }

  // Innermost merged dim kept: output rows accumulate input rows, in column chunks.
  template <typename T>
  void ReduceOuter(const T* x, T* y, T* scratch, Accum acc, ThreadPool* pool) const {
    const int64_t rows = out_size_ / inner_;
    const int64_t chunks = (inner_ + kColumnChunk - 1) / kColumnChunk;
    const int64_t runs = count_;
    auto body = [&](int64_t b, int64_t e) {
      Odometer ko(static_cast<int>(kept_size_.size()), kept_size_.data(), kept_stride_.data());
      for (int64_t item = b; item < e; ++item) {
        int64_t row = item / chunks, c0 = (item % chunks) * kColumnChunk;
        int64_t len = std::min(kColumnChunk, inner_ - c0);
        ko.Seek(row);
        const T* base = x + ko.offset + c0;
        T* out = y + row * inner_ + c0;
        std::fill(out, out + len, Identity<T>(acc));
        Odometer ro(static_cast<int>(red_size_.size()), red_size_.data(), red_stride_.data());
        for (int64_t r = 0; r < runs; ++r, ro.Next()) AccumulateRow(acc, out, base + ro.offset, len);
        if constexpr (std::is_floating_point_v<T>) {
          if (kind_ == ReduceKind::kLogSumExp) {
            T* sum = scratch + row * inner_ + c0;
            std::fill(sum, sum + len, T(0));
            ro.Seek(0);
            Arr<T> s(sum, len), m(out, len);
            for (int64_t r = 0; r < runs; ++r, ro.Next())
              s += (ConstArr<T>(base + ro.offset, len) - m).exp();
            for (int64_t j = 0; j < len; ++j)
              if (std::isfinite(out[j])) out[j] += std::log(sum[j]);
            continue;
          }
        }
        if (kind_ == ReduceKind::kMean || kind_ == ReduceKind::kL2 ||
                   kind_ == ReduceKind::kLogSum) {
          for (int64_t j = 0; j < len; ++j) out[j] = Finish(kind_, out[j], count_);
        }
      }
    };
    pool->ParallelFor(rows * chunks, static_cast<double>(runs) * 2.0 * std::min(inner_, kColumnChunk),
                      body);
  }

  ReduceKind kind_ = ReduceKind::kSum;
  DType dtype_ = DType::kUndefined;
  bool copy_ = false;
  int64_t count_ = 1;     // elements reduced into each output
  int64_t out_size_ = 0;
  int64_t inner_ = 1;     // size of the innermost merged dim (contiguous)
  bool inner_reduced_ = false;
  std::vector<int64_t> kept_size_, kept_stride_;  // merged kept dims, innermost excluded
  std::vector<int64_t> red_size_, red_stride_;    // merged reduced dims, innermost excluded
};

}  // namespace

void RegisterReduceKernels(KernelRegistry& r) {
  const std::initializer_list<DType> numeric = {DType::kFloat32, DType::kFloat64,
                                                 DType::kInt32, DType::kInt64};
  for (OpId op : {OpId::kReduceSum, OpId::kReduceMean, OpId::kReduceProd, OpId::kReduceL1,
                  OpId::kReduceL2, OpId::kReduceSumSquare, OpId::kReduceLogSum})
    r.Register(op, numeric, &MakeKernel<ReduceKernel>);
  for (OpId op : {OpId::kReduceMax, OpId::kReduceMin})
    r.Register(op, {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kInt8,
                    DType::kUInt8, DType::kBool},
               &MakeKernel<ReduceKernel>);
  r.Register(OpId::kReduceLogSumExp, {DType::kFloat32, DType::kFloat64}, &MakeKernel<ReduceKernel>);
  RegisterSoftmaxKernels(r);
  RegisterArgReduceKernels(r);
}

}  // namespace cpu
}  // namespace kaiwu
