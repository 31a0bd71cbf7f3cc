// Einsum as a chain of batched matrix products. Operands are contracted left
// to right; each step sorts the labels of its two operands into batch (both,
// still needed), left/right (one side, still needed) and contracted (no longer
// needed) groups, lays the operands out as [batch, left, contracted] and
// [batch, contracted, right] (a strided copy unless already in that layout,
// possibly transposed) and runs one batched GEMM. A label one operand lacks
// gets stride 0 there, which also sums labels seen by only one operand.
#include <algorithm>
#include <map>

#include "backends/cpu/einsum_parse.h"
#include "backends/cpu/linalg_util.h"

namespace kaiwu {
namespace cpu {
namespace {

// An operand: its labels in memory order and each label's element stride
// (0 where the operand broadcasts a size-1 dim).
struct Operand {
  std::vector<int> labels;
  std::map<int, int64_t> strides;
  bool broadcasts = false;  // some dim is 1 while the label is larger
};

struct Step {
  int a_input = -1, b_input = -1;  // input index, or -1: the previous step's result
  bool gather_a = false, gather_b = false;
  StridedGather ga, gb;
  size_t a_buf = 0, b_buf = 0, out_buf = 0;  // float offsets into scratch
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
    if (!ctx.node.Has("equation")) ctx.Error("missing attribute 'equation'");
    const int n = ctx.num_inputs();
    if (n < 1) ctx.Error("needs at least one input");
    std::vector<int> ranks;
    for (int i = 0; i < n; ++i) {
      ctx.ExpectDType(i, {DType::kFloat32});
      ranks.push_back(ctx.in(i).rank());
    }
    EinsumSpec spec = ParseEinsum(ctx, ctx.node.GetString("equation", ""), ranks);

    // Label sizes; a dim of 1 broadcasts against a larger one.
    sizes_.clear();
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < ranks[i]; ++d) {
        int64_t& s = sizes_[spec.inputs[i][d]];
        int64_t dim = ctx.in(i).shape[d];
        if (s > 1 && dim != 1 && dim != s)
          ctx.Error("einsum dimension mismatch for a label: ", s, " vs ", dim);
        s = std::max(s, dim);
      }
    std::vector<Operand> ops(n);
    for (int i = 0; i < n; ++i) {
      ops[i].labels = spec.inputs[i];
      int64_t stride = 1;
      for (int d = ranks[i] - 1; d >= 0; --d) {
        int64_t dim = ctx.in(i).shape[d];
        bool bc = dim == 1 && sizes_[ops[i].labels[d]] != 1;
        ops[i].broadcasts |= bc;
        ops[i].strides[ops[i].labels[d]] = bc ? 0 : stride;
        stride *= dim;
      }
    }
    output_ = spec.output;
    Shape out_shape;
    for (int l : output_) out_shape.push_back(sizes_[l]);
    ctx.SetOutput(0, DType::kFloat32, out_shape);

    steps_.clear();
    scratch_floats_ = 0;
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
    ctx.scratch_bytes = scratch_floats_ * sizeof(float);
  }

  void Run(const KernelIO& io) const override {
    float* scratch = static_cast<float*>(io.scratch);
    float* out = static_cast<float*>(io.outputs[0]);
    auto input = [&](int i) { return static_cast<const float*>(io.inputs[i]); };
    if (steps_.empty()) {  // one operand: permute, then sum the trailing columns
      const float* src = input(0);
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
          float acc = 0.f;
          for (int64_t c = 0; c < cols; ++c) acc += src[r * cols + c];
          out[r] = acc;
        }
      });
      return;
    }
    const float* prev = nullptr;
    for (const Step& s : steps_) {
      const float* a = s.a_input >= 0 ? input(s.a_input) : prev;
      const float* b = input(s.b_input);
      if (s.gather_a) {
        s.ga.Run(a, scratch + s.a_buf, io.pool);
        a = scratch + s.a_buf;
      }
      if (s.gather_b) {
        s.gb.Run(b, scratch + s.b_buf, io.pool);
        b = scratch + s.b_buf;
      }
      float* c = s.to_output ? out : scratch + s.out_buf;
      s.gemm.Run(a, b, c, io.pool);
      prev = c;
    }
    if (final_gather_) final_.Run(prev, out, io.pool);
  }

 private:
  size_t Alloc(int64_t floats) {
    size_t at = scratch_floats_;
    scratch_floats_ += (static_cast<size_t>(floats) + 15) / 16 * 16;
    return at;
  }

  int64_t Product(const std::vector<int>& labels) const {
    int64_t p = 1;
    for (int l : labels) p *= sizes_.at(l);
    return p;
  }

  StridedGather Gather(const Operand& op, const std::vector<int>& order) const {
    std::vector<int64_t> dims, strides;
    for (int l : order) {
      dims.push_back(sizes_.at(l));
      auto it = op.strides.find(l);
      strides.push_back(it == op.strides.end() ? 0 : it->second);
    }
    return StridedGather(dims, strides);
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
    if (!a.broadcasts && a.labels == Concat(Concat(batch, contr), left)) {
      s.gemm.trans_a = true;
    } else if (a.broadcasts || a.labels != a_order) {
      s.gather_a = true;
      s.ga = Gather(a, a_order);
      s.a_buf = Alloc(s.ga.size());
    }
    std::vector<int> b_order = Concat(Concat(batch, contr), right);
    if (!b.broadcasts && b.labels == Concat(Concat(batch, right), contr)) {
      s.gemm.trans_b = true;
    } else if (b.broadcasts || b.labels != b_order) {
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
  StridedGather final_;  // result (or the single operand) -> output order
  bool final_gather_ = false;
  bool has_sum_ = false;  // single operand with summed labels: rows x cols
  int64_t sum_rows_ = 0, sum_cols_ = 0;
  size_t scratch_floats_ = 0;
};

}  // namespace

void RegisterEinsumKernel(KernelRegistry& r) { r.Register("Einsum", &MakeKernel<EinsumKernel>); }

}  // namespace cpu
}  // namespace kaiwu
