// FusedAttention (ops/linalg.h FusedAttentionParams) on the CPU: per output row
// (batch item, query i) the scores over the keys into a row buffer (K's block
// times Q's row, Eigen's matrix-vector product over K as stored), scale and
// mask, softmax (Eigen's vector exp), then Y's row as V's block transposed times
// the probabilities. Rows are independent: any thread count gives the same
// bits. Every input is read in place through the params' broadcast strides,
// and Y written through its strides (a folded Transpose).
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/linalg_util.h"
#include "ops/linalg.h"

namespace kaiwu {
namespace cpu {
namespace {

class AttentionKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    p_ = ctx.Params<FusedAttentionParams>();
    dtype_ = ctx.in(0).dtype;
    rows_ = NumElements(p_.batch) * p_.n;
    // Each batch item's scores [n, M] (what the four ops would have written).
    ctx.scratch_bytes = static_cast<size_t>(rows_ * p_.m) * DTypeSize(dtype_);
  }

  void Run(const KernelIO& io) const override {
    if (rows_ == 0 || p_.dv == 0) return;
    if (dtype_ == DType::kFloat64) RunT<double>(io);
    else RunT<float>(io);
  }

 private:
  template <typename T>
  using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  template <typename T>
  using Strided = Eigen::Map<const RowMajor<T>, 0, Eigen::OuterStride<>>;

  // Offsets of batch item `item` in Q, K, V, the mask and Y.
  void ItemOffsets(int64_t item, int64_t* qo, int64_t* ko, int64_t* vo, int64_t* mo, int64_t* yo) const {
    *qo = *ko = *vo = *mo = *yo = 0;
    for (int a = static_cast<int>(p_.batch.size()) - 1; a >= 0; --a) {
      const int64_t idx = item % p_.batch[a];
      item /= p_.batch[a];
      *qo += idx * p_.q_batch[a];
      *ko += idx * p_.k_batch[a];
      *vo += idx * p_.v_batch[a];
      *mo += idx * p_.mask_batch[a];
      *yo += idx * p_.y_batch[a];
    }
  }

  // K of one item as a [D, M] matrix (stored [D, M] or [M, D]).
  template <typename T, typename Fn>
  void WithK(const T* kb, Fn&& fn) const {
    if (p_.k_key == 1) {
      fn(Strided<T>(kb, p_.d, p_.m, Eigen::OuterStride<>(p_.k_inner)));
    } else {
      fn(Strided<T>(kb, p_.m, p_.d, Eigen::OuterStride<>(p_.k_key)).transpose());
    }
  }

  template <typename T>
  void RunT(const KernelIO& io) const {
    const T* q = static_cast<const T*>(io.inputs[p_.q_input]) + p_.q_offset;
    const T* k = static_cast<const T*>(io.inputs[p_.k_input]) + p_.k_offset;
    const T* v = static_cast<const T*>(io.inputs[p_.v_input]) + p_.v_offset;
    const T* mask = p_.has_mask ? static_cast<const T*>(io.inputs[3]) : nullptr;
    T* y = static_cast<T*>(io.outputs[0]);
    const int64_t n = p_.n, m = p_.m, d = p_.d, dv = p_.dv;
    const int64_t items = NumElements(p_.batch);
    // Q's rows and K's keys distinct: the scores as one matrix product.
    const bool blocks = p_.q_row > 0 && p_.k_key > 0;
    const double cost = 2.0 * static_cast<double>(n * m) * static_cast<double>(d + dv);
    T* scratch = static_cast<T*>(io.scratch);
    io.pool->ParallelFor(items, cost, [&](int64_t b, int64_t e) {
      for (int64_t item = b; item < e; ++item) {
        Eigen::Map<RowMajor<T>> s(scratch + item * n * m, n, m);
        int64_t qo, ko, vo, mo, yo;
        ItemOffsets(item, &qo, &ko, &vo, &mo, &yo);
        // Scores: Q [n, D] x K [D, M], one product for the item's rows.
        if (blocks) {
          WithK(k + ko, [&](const auto& kmat) {
            s.noalias() = Strided<T>(q + qo, n, d, Eigen::OuterStride<>(p_.q_row)) * kmat;
          });
        } else {  // a broadcast query row or key: each score by itself
          for (int64_t i = 0; i < n; ++i) {
            const T* qi = q + qo + i * p_.q_row;
            for (int64_t j = 0; j < m; ++j) {
              const T* kj = k + ko + j * p_.k_key;
              T acc = 0;
              for (int64_t t = 0; t < d; ++t) acc += qi[t] * kj[t * p_.k_inner];
              s(i, j) = acc;
            }
          }
        }
        const T scale = static_cast<T>(p_.scale);
        for (int64_t i = 0; i < n; ++i) {
          auto row = s.row(i).array();
          if (mask) {
            const T* mr = mask + mo + i * p_.mask_row;
            if (p_.mask_key == 1) {
              row = row * scale + Eigen::Map<const Eigen::Array<T, 1, Eigen::Dynamic>>(mr, m);
            } else {
              row = row * scale + mr[0];
            }
          } else if (scale != T(1)) {
            row *= scale;
          }
          const T mx = row.maxCoeff();
          row = (row - mx).exp();  // Eigen's vector exp, as the Softmax kernel
          row *= T(1) / row.sum();  // every key masked: -inf - -inf, NaN, as Softmax gives
        }
        // Y [n, DV] = P [n, M] x V [M, DV].
        Eigen::Map<RowMajor<T>, 0, Eigen::OuterStride<>> ym(y + yo, n, dv, Eigen::OuterStride<>(p_.y_row));
        ym.noalias() = s * Strided<T>(v + vo, m, dv, Eigen::OuterStride<>(p_.v_key));
      }
    });
  }

  FusedAttentionParams p_;
  DType dtype_ = DType::kFloat32;
  int64_t rows_ = 0;
};

}  // namespace

void RegisterAttentionKernel(KernelRegistry& r) {
  r.Register(OpId::kFusedAttention, {DType::kFloat32, DType::kFloat64}, &MakeKernel<AttentionKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
