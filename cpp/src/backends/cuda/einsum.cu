// Einsum (float32) with the op layer's parsing and label semantics: ellipsis,
// implicit output, a label repeated within an operand (a diagonal, or a trace
// when summed), size-1 dims broadcast against a larger size.
//
// Generic path: one thread per output element sums, over the index space of
// the contracted labels, the product of the inputs' elements. Each input is
// addressed through one stride per label: 0 where the input lacks the label or
// broadcasts a size-1 dim there; the sum of its dims' strides where the label
// repeats within it (a diagonal), exactly as the CPU kernel lays operands out.
//
// Fast path: two dense operands (no repeated label, no broadcast dim) whose
// labels are [batch, left, contracted] and [batch, contracted, right] -- either
// one possibly with its last two groups swapped, i.e. transposed -- and an
// output [batch, left, right]: one cublasSgemmStridedBatched.
#include <algorithm>
#include <climits>
#include <map>
#include <vector>

#include "backends/cuda/device_util.cuh"
#include "backends/cuda/gemm_util.h"
#include "ops/linalg.h"

namespace kaiwu {
namespace cuda {
namespace {

constexpr int kMaxInputs = 8;
constexpr int kMaxLabels = 16;  // output labels, and separately contracted labels

// Extents of the output and contracted labels (output row-major: last label
// fastest) and each input's element stride per label; a kernel parameter.
struct EinsumGeometry {
  int num_inputs = 0, num_out = 0, num_sum = 0;
  int64_t total_out = 0, total_sum = 0;
  int64_t out_size[kMaxLabels] = {};
  int64_t sum_size[kMaxLabels] = {};
  int64_t out_stride[kMaxInputs][kMaxLabels] = {};  // [input][output label]
  int64_t sum_stride[kMaxInputs][kMaxLabels] = {};  // [input][contracted label]
};

struct EinsumInputs {
  const float* data[kMaxInputs];
};

__global__ void EinsumGenericKernel(EinsumGeometry g, EinsumInputs in, float* out) {
  KAIWU_CUDA_LOOP(o, g.total_out) {
    // Offsets of the first term of output element o in every input.
    int64_t off[kMaxInputs];
    for (int i = 0; i < g.num_inputs; ++i) off[i] = 0;
    int64_t rem = o;
    for (int d = g.num_out - 1; d >= 0; --d) {
      const int64_t idx = rem % g.out_size[d];
      rem /= g.out_size[d];
      for (int i = 0; i < g.num_inputs; ++i) off[i] += idx * g.out_stride[i][d];
    }
    // Mixed-radix counter over the contracted labels, last label fastest.
    int64_t pos[kMaxLabels];
    for (int d = 0; d < g.num_sum; ++d) pos[d] = 0;
    float acc = 0.f;
    for (int64_t s = 0; s < g.total_sum; ++s) {
      float prod = 1.f;
      for (int i = 0; i < g.num_inputs; ++i) prod *= in.data[i][off[i]];
      acc += prod;
      for (int d = g.num_sum - 1; d >= 0; --d) {
        for (int i = 0; i < g.num_inputs; ++i) off[i] += g.sum_stride[i][d];
        if (++pos[d] < g.sum_size[d]) break;
        for (int i = 0; i < g.num_inputs; ++i) off[i] -= g.sum_size[d] * g.sum_stride[i][d];
        pos[d] = 0;
      }
    }
    out[o] = acc;
  }
}

bool Contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::vector<int> Concat(std::vector<int> a, const std::vector<int>& b,
                        const std::vector<int>& c) {
  a.insert(a.end(), b.begin(), b.end());
  a.insert(a.end(), c.begin(), c.end());
  return a;
}

class EinsumKernel : public CudaKernel {
 protected:
  void PrepareDevice(PrepareContext& ctx) override {
    const EinsumParams& p = ctx.Params<EinsumParams>();
    const EinsumSpec& spec = p.spec;
    const int n = ctx.num_inputs();
    if (n > kMaxInputs)
      Unsupported(ctx, "Einsum with ", n, " inputs (more than ", kMaxInputs, ")");
    sizes_ = p.sizes;
    // Every term has a factor from each input: an empty input makes every
    // sum empty (and keeps the kernels from reading it).
    zero_fill_ = false;
    for (int i = 0; i < n; ++i) zero_fill_ |= ctx.in(i).size() == 0;
    out_elems_ = ctx.outputs[0].size();

    const std::vector<EinsumOperand>& ops = p.operands;
    use_gemm_ = n == 2 && !ops[0].strided && !ops[1].strided &&
                PrepareGemm(spec.output, ops[0].labels, ops[1].labels);
    if (use_gemm_) return;

    std::vector<int> summed;  // contracted labels, in order of first appearance
    for (int i = 0; i < n; ++i)
      for (int label : ops[i].labels)
        if (!Contains(spec.output, label) && !Contains(summed, label)) summed.push_back(label);
    if (spec.output.size() > kMaxLabels || summed.size() > kMaxLabels)
      Unsupported(ctx, "Einsum with ", spec.output.size(), " output and ", summed.size(),
                  " contracted labels (more than ", kMaxLabels, " of either)");
    auto stride_of = [&](int i, int label) {
      auto it = ops[i].strides.find(label);
      return it == ops[i].strides.end() ? int64_t{0} : it->second;
    };
    geometry_ = EinsumGeometry{};
    EinsumGeometry& g = geometry_;
    g.num_inputs = n;
    g.num_out = static_cast<int>(spec.output.size());
    g.num_sum = static_cast<int>(summed.size());
    g.total_out = out_elems_;
    g.total_sum = 1;
    for (int d = 0; d < g.num_out; ++d) {
      g.out_size[d] = sizes_.at(spec.output[d]);
      for (int i = 0; i < n; ++i) g.out_stride[i][d] = stride_of(i, spec.output[d]);
    }
    for (int d = 0; d < g.num_sum; ++d) {
      g.sum_size[d] = sizes_.at(summed[d]);
      g.total_sum *= g.sum_size[d];
      for (int i = 0; i < n; ++i) g.sum_stride[i][d] = stride_of(i, summed[d]);
    }
  }

  void Run(const KernelIO& io) const override {
    if (out_elems_ == 0) return;
    const DeviceContext& dev = Dev(io);
    float* y = static_cast<float*>(io.outputs[0]);
    if (zero_fill_) {
      CheckCuda(cudaMemsetAsync(y, 0, out_elems_ * sizeof(float), dev.stream), "Einsum zero fill");
      return;
    }
    if (use_gemm_) {
      RunGemm(dev, static_cast<const float*>(io.inputs[0]),
              static_cast<const float*>(io.inputs[1]), y);
      return;
    }
    EinsumInputs in{};
    for (int i = 0; i < geometry_.num_inputs; ++i)
      in.data[i] = static_cast<const float*>(io.inputs[i]);
    EinsumGenericKernel<<<GridFor(out_elems_), kBlock, 0, dev.stream>>>(geometry_, in, y);
    CheckLaunch("Einsum kernel");
  }

 private:
  int64_t Product(const std::vector<int>& labels) const {
    int64_t p = 1;
    for (int l : labels) p *= sizes_.at(l);
    return p;
  }

  // For two dense operands with distinct labels `a` and `b` (memory order):
  // true, with the batched GEMM set up, when the output is [batch, left, right]
  // and the operands [batch, left, contracted] / [batch, contracted, right],
  // each possibly with its last two groups swapped (transposed), all sizes
  // within cuBLAS's int and not all of m, n, k 1. Output labels are sorted by
  // where they occur; the contracted labels are A's others, and the equality
  // tests against the concatenations reject everything else (a label summed
  // within one operand, a mixed order).
  bool PrepareGemm(const std::vector<int>& out, const std::vector<int>& a,
                   const std::vector<int>& b) {
    std::vector<int> batch, left, right, contracted;
    for (int l : out) (Contains(a, l) ? (Contains(b, l) ? batch : left) : right).push_back(l);
    for (int l : a)
      if (!Contains(out, l)) contracted.push_back(l);
    if (out != Concat(batch, left, right)) return false;
    if (a == Concat(batch, left, contracted)) {
      trans_a_ = false;
    } else if (a == Concat(batch, contracted, left)) {
      trans_a_ = true;
    } else {
      return false;
    }
    if (b == Concat(batch, contracted, right)) {
      trans_b_ = false;
    } else if (b == Concat(batch, right, contracted)) {
      trans_b_ = true;
    } else {
      return false;
    }
    batch_ = Product(batch);
    m_ = Product(left);
    n_ = Product(right);
    k_ = Product(contracted);
    // m = n = k = 1 is an element-wise product: one pass of the generic kernel.
    if (m_ == 1 && n_ == 1 && k_ == 1) return false;
    return batch_ <= INT_MAX && m_ <= INT_MAX && n_ <= INT_MAX && k_ <= INT_MAX;
  }

  // Row-major C_i[m, n] = op(A_i) op(B_i) as the column-major C_i^T = op(B_i)^T
  // op(A_i)^T (cf. RowMajorSgemm); lda/ldb are the row strides as stored.
  void RunGemm(const DeviceContext& dev, const float* a, const float* b, float* c) const {
    const int m = static_cast<int>(m_), n = static_cast<int>(n_), k = static_cast<int>(k_);
    const int lda = trans_a_ ? m : k, ldb = trans_b_ ? k : n;
    const float alpha = 1.f, beta = 0.f;
    CheckBlas(cublasSgemmStridedBatched(dev.blas, trans_b_ ? CUBLAS_OP_T : CUBLAS_OP_N,
                                        trans_a_ ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha, b,
                                        ldb, k_ * n_, a, lda, m_ * k_, &beta, c, n, m_ * n_,
                                        static_cast<int>(batch_)),
              "cublasSgemmStridedBatched (Einsum)");
  }

  std::map<int, int64_t> sizes_;  // label -> extent
  int64_t out_elems_ = 0;
  bool zero_fill_ = false;
  bool use_gemm_ = false, trans_a_ = false, trans_b_ = false;
  int64_t batch_ = 1, m_ = 0, n_ = 0, k_ = 0;
  EinsumGeometry geometry_;
};

}  // namespace

void RegisterEinsumKernel(KernelRegistry& r) {
  r.Register(OpId::kEinsum, DType::kFloat32, &MakeKernel<EinsumKernel>);
}

}  // namespace cuda
}  // namespace kaiwu
