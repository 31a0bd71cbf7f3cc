// Einsum as a chain of batched matrix products. Operands are contracted left
// to right; each step sorts the labels of its two operands into batch (both,
// still needed), left/right (one side, still needed) and contracted (no longer
// needed) groups, lays the operands out as [batch, left, contracted] and
// [batch, contracted, right] (a strided copy unless already in that layout,
// possibly transposed) and runs one batched GEMM. A label one operand lacks
// gets stride 0 there, which also sums labels seen by only one operand. A label
// repeated within one operand (a diagonal) is one label whose stride is the sum
// of its dims' strides; such operands are always gathered first.
//
// float32 runs on Sgemm; float64 gathers with the float gather (a double is two
// floats: one more dim of size 2) and runs the plain-loop batched GEMM.
#include <algorithm>
#include <map>

#include "backends/cpu/einsum_typed.h"
#include "backends/cpu/linalg_util.h"
#include "ops/linalg.h"

namespace kaiwu {
namespace cpu {
namespace {

using Operand = EinsumOperand;

struct Step {
  int a_input = -1, b_input = -1;  // input index, or -1: the previous step's result
  bool gather_a = false, gather_b = false;
  TypedGather ga, gb;
  size_t a_buf = 0, b_buf = 0, out_buf = 0;  // element offsets into scratch
  bool to_output = false;
  BatchedGemm gemm;
};

template <typename F>
std::vector<int> Filter(const std::vector<int>& v, F keep) {
  std::vector<int> out;
  for (int x : v)
    if (keep(x)) out.push_back(x);
  return out;
}

std::vector<int> Concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

bool Contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

class EinsumKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const EinsumParams& p = ctx.Params<EinsumParams>();
    const int n = ctx.num_inputs();
    dtype_ = ctx.outputs[0].dtype;
    ratio_ = dtype_ == DType::kFloat64 ? 2 : 1;
    sizes_ = p.sizes;
    output_ = p.spec.output;
    const std::vector<Operand>& ops = p.operands;

    steps_.clear();
    scratch_elems_ = 0;
    final_gather_ = false;
    has_sum_ = false;
    if (n == 1) {
      PrepareSingle(ops[0]);
    } else {
      Operand cur = ops[0];
      for (int i = 1; i < n; ++i) {
        std::vector<int> keep = output_;
        for (int j = i + 1; j < n; ++j) keep = Concat(keep, ops[j].labels);
        cur = PrepareStep(cur, i == 1 ? 0 : -1, ops[i], i, keep, i == n - 1);
      }
      if (!steps_.back().to_output) {
        final_gather_ = true;
        final_ = Gather(cur, output_);
      }
    }
    ctx.scratch_bytes = scratch_elems_ * DTypeSize(dtype_);
  }

  void Run(const KernelIO& io) const override {
    if (dtype_ == DType::kFloat64) {
      RunTyped<double>(io);
    } else {
      RunTyped<float>(io);
    }
  }

 private:
  template <typename T>
  void RunTyped(const KernelIO& io) const {
    T* scratch = static_cast<T*>(io.scratch);
    T* out = static_cast<T*>(io.outputs[0]);
    auto input = [&](int i) { return static_cast<const T*>(io.inputs[i]); };
    if (steps_.empty()) {  // one operand: permute, then sum the trailing columns
      const T* src = input(0);
      if (!has_sum_) {
        final_.Run(src, out, io.pool);
        return;
      }
      if (final_gather_) {
        final_.Run(src, scratch, io.pool);
        src = scratch;
      }
      const int64_t cols = sum_cols_, rows = sum_rows_;
      io.pool->ParallelFor(rows, static_cast<double>(cols), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          T acc = T(0);
          for (int64_t c = 0; c < cols; ++c) acc += src[r * cols + c];
          out[r] = acc;
        }
      });
      return;
    }
    const T* prev = nullptr;
    for (const Step& s : steps_) {
      const T* a = s.a_input >= 0 ? input(s.a_input) : prev;
      const T* b = input(s.b_input);
      if (s.gather_a) {
        s.ga.Run(a, scratch + s.a_buf, io.pool);
        a = scratch + s.a_buf;
      }
      if (s.gather_b) {
        s.gb.Run(b, scratch + s.b_buf, io.pool);
        b = scratch + s.b_buf;
      }
      T* c = s.to_output ? out : scratch + s.out_buf;
      Gemm<T>(s.gemm, a, b, c, io.pool);
      prev = c;
    }
    if (final_gather_) final_.Run(prev, out, io.pool);
  }

  size_t Alloc(int64_t elems) {
    size_t at = scratch_elems_;
    scratch_elems_ += (static_cast<size_t>(elems) + 15) / 16 * 16;
    return at;
  }

  int64_t Product(const std::vector<int>& labels) const {
    int64_t p = 1;
    for (int l : labels) p *= sizes_.at(l);
    return p;
  }

  TypedGather Gather(const Operand& op, const std::vector<int>& order) const {
    std::vector<int64_t> dims, strides;
    for (int l : order) {
      dims.push_back(sizes_.at(l));
      auto it = op.strides.find(l);
      strides.push_back(it == op.strides.end() ? 0 : it->second * ratio_);
    }
    if (ratio_ == 2) {  // a double as two floats
      dims.push_back(2);
      strides.push_back(1);
    }
    TypedGather g;
    g.g = StridedGather(dims, strides);
    g.ratio = ratio_;
    return g;
  }

  void PrepareSingle(const Operand& op) {
    std::vector<int> contracted = Filter(op.labels, [&](int l) { return !Contains(output_, l); });
    final_ = Gather(op, Concat(output_, contracted));
    sum_rows_ = Product(output_);
    sum_cols_ = Product(contracted);
    has_sum_ = !contracted.empty();
    final_gather_ = !final_.contiguous();
    if (has_sum_ && final_gather_) Alloc(final_.size());
  }

  // Contracts `a` (input a_input, or the previous result) with input b_input;
  // returns the result operand (contiguous in batch + left + right order).
  Operand PrepareStep(const Operand& a, int a_input, const Operand& b, int b_input,
                      const std::vector<int>& keep, bool last) {
    std::vector<int> all = Concat(a.labels, Filter(b.labels, [&](int l) { return !Contains(a.labels, l); }));
    std::vector<int> batch, left, right, contr;
    for (int l : all) {
      bool in_a = Contains(a.labels, l), in_b = Contains(b.labels, l);
      if (!Contains(keep, l)) contr.push_back(l);
      else if (in_a && in_b) batch.push_back(l);
      else if (in_a) left.push_back(l);
      else right.push_back(l);
    }
    if (last) {  // order kept labels as the output does, so the result needs no permute
      auto by_output = [&](int x, int y) {
        return std::find(output_.begin(), output_.end(), x) <
               std::find(output_.begin(), output_.end(), y);
      };
      std::stable_sort(batch.begin(), batch.end(), by_output);
      std::stable_sort(left.begin(), left.end(), by_output);
      std::stable_sort(right.begin(), right.end(), by_output);
    }
    Step s;
    s.a_input = a_input;
    s.b_input = b_input;
    s.gemm.batch = Product(batch);
    s.gemm.m = Product(left);
    s.gemm.k = Product(contr);
    s.gemm.n = Product(right);
    s.gemm.a_stride = s.gemm.m * s.gemm.k;
    s.gemm.b_stride = s.gemm.k * s.gemm.n;
    // A as [batch, left, contr], or already [batch, contr, left] (transposed).
    std::vector<int> a_order = Concat(Concat(batch, left), contr);
    const bool can_transpose = dtype_ == DType::kFloat32;  // the naive GEMM cannot
    if (can_transpose && !a.strided && a.labels == Concat(Concat(batch, contr), left)) {
      s.gemm.trans_a = true;
    } else if (a.strided || a.labels != a_order) {
      s.gather_a = true;
      s.ga = Gather(a, a_order);
      s.a_buf = Alloc(s.ga.size());
    }
    std::vector<int> b_order = Concat(Concat(batch, contr), right);
    if (can_transpose && !b.strided && b.labels == Concat(Concat(batch, right), contr)) {
      s.gemm.trans_b = true;
    } else if (b.strided || b.labels != b_order) {
      s.gather_b = true;
      s.gb = Gather(b, b_order);
      s.b_buf = Alloc(s.gb.size());
    }
    Operand result;
    result.labels = Concat(Concat(batch, left), right);
    int64_t stride = 1;
    for (auto it = result.labels.rbegin(); it != result.labels.rend(); ++it) {
      result.strides[*it] = stride;
      stride *= sizes_.at(*it);
    }
    s.to_output = last && result.labels == output_;
    if (!s.to_output) s.out_buf = Alloc(NumElements({s.gemm.batch, s.gemm.m, s.gemm.n}));
    steps_.push_back(std::move(s));
    return result;
  }

  std::map<int, int64_t> sizes_;
  std::vector<int> output_;
  std::vector<Step> steps_;
  TypedGather final_;  // result (or the single operand) -> output order
  bool final_gather_ = false;
  bool has_sum_ = false;  // single operand with summed labels: rows x cols
  int64_t sum_rows_ = 0, sum_cols_ = 0;
  size_t scratch_elems_ = 0;
  DType dtype_ = DType::kFloat32;
  int ratio_ = 1;  // floats per element
};

}  // namespace

void RegisterEinsumKernel(KernelRegistry& r) {
  r.Register(OpId::kEinsum, {DType::kFloat32, DType::kFloat64}, &MakeKernel<EinsumKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
