// Conv (1-D to 3-D, groups, dilations, auto_pad). With AVX-512: a direct
// kernel for 2-D stride-1 convs with rows of 16+ pixels or as wide as their
// input (conv_direct.h), else an implicit GEMM (conv_gemm.h; also on AVX2 +
// FMA). Otherwise im2col + one GEMM per group,
// a direct GEMM for pointwise (1x1, stride 1, unpadded) kernels and a direct
// loop for depthwise ones. Large batches run in parallel, one im2col buffer
// per thread; small ones run image by image with the GEMM split across the pool.
#include <algorithm>
#include <cstdint>

#include "backends/cpu/activation.h"
#include "backends/cpu/conv_direct.h"
#include "backends/cpu/conv_family.h"
#include "backends/cpu/conv_gemm.h"
#include "backends/cpu/conv_im2col.h"
#include "backends/cpu/cpu_kernels.h"
#include "ops/conv.h"

namespace kaiwu {
namespace cpu {
namespace {

class ConvKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override {
    const ConvParams& p = ctx.Params<ConvParams>();
    const Shape& x = ctx.in(0).shape;
    const Shape& w = ctx.in(1).shape;
    n_ = x[0];
    c_ = x[1];
    m_ = w[0];
    group_ = p.group;
    geo_ = p.geo;
    act_ = p.act;
    has_bias_ = p.has_bias;

    cg_ = c_ / group_;
    mg_ = m_ / group_;
    depthwise_ = cg_ == 1 && group_ > 1;
    direct_ = ConvDirect::Supported(geo_, n_, c_, m_, group_);
    if (direct_) {
      direct_conv_ = ConvDirect(geo_, n_, c_, m_, act_);
      return;
    }
    implicit_ = !depthwise_ && ConvGemm::Supported(geo_, n_, c_, m_);
    if (implicit_) {
      gemm_ = ConvGemm(geo_, n_, c_, m_, group_, act_);
      slots_ = gemm_.Slots(ctx.num_threads);
      ctx.scratch_bytes = slots_ * gemm_.SlotFloats() * sizeof(float) + 64;
      return;
    }
    pointwise_ = geo_.IsPointwise();
    // Images per GEMM: small outputs (late layers, P = 7x7) make one GEMM per
    // image too narrow, so several images' columns go side by side.
    const int64_t P = geo_.out_size(), kc = cg_ * geo_.kernel_size();
    constexpr int64_t kTargetCols = 512, kMaxBlockFloats = int64_t{4} << 20;
    nb_ = std::max<int64_t>(1, std::min<int64_t>(n_, (kTargetCols + P - 1) / std::max<int64_t>(P, 1)));
    while (nb_ > 1 && (kc + mg_) * nb_ * P > kMaxBlockFloats) --nb_;
    col_floats_ = depthwise_ || (pointwise_ && nb_ == 1) ? 0 : kc * nb_ * P;
    tmp_floats_ = nb_ > 1 ? mg_ * nb_ * P : 0;
    const int64_t blocks = (n_ + nb_ - 1) / nb_;
    slots_ = std::max<int64_t>(1, std::min<int64_t>(ctx.num_threads, blocks));
    block_parallel_ = !depthwise_ && blocks >= ctx.num_threads && ctx.num_threads > 1;
    ctx.scratch_bytes = (block_parallel_ ? slots_ : 1) * (col_floats_ + tmp_floats_) * sizeof(float);
  }

  void Run(const KernelIO& io) const override {
    const float* x = static_cast<const float*>(io.inputs[0]);
    const float* w = static_cast<const float*>(io.inputs[1]);
    const float* bias = has_bias_ ? static_cast<const float*>(io.inputs[2]) : nullptr;
    float* y = static_cast<float*>(io.outputs[0]);
    float* scratch = static_cast<float*>(io.scratch);
    const int64_t P = geo_.out_size(), K = geo_.kernel_size();
    if (n_ == 0 || m_ == 0 || P == 0) return;
    if (direct_) {
      direct_conv_.Run(x, w, bias, y, io.pool);
      return;
    }
    if (implicit_) {
      auto aligned = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(io.scratch) + 63) & ~uintptr_t{63});
      gemm_.Run(x, w, bias, y, aligned, slots_, io.pool);
      return;
    }
    if (depthwise_) {
      const int64_t mult = m_ / c_;
      io.pool->ParallelFor(n_ * m_, 2.0 * P * K, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          int64_t n = i / m_, m = i % m_;
          DepthwisePlane(geo_, x + (n * c_ + m / mult) * geo_.in_size(), w + m * K,
                         bias ? bias[m] : 0.f, y + i * P);
          if (act_.active()) act_.Apply(y + i * P, P);
        }
      });
      return;
    }
    const int64_t blocks = (n_ + nb_ - 1) / nb_;
    const int64_t per_slot = col_floats_ + tmp_floats_;
    if (block_parallel_) {
      const int64_t slots = std::min<int64_t>(slots_, io.pool->num_threads());
      const double cost = 2.0 * static_cast<double>(m_ * cg_ * K * P) * n_ / slots;
      io.pool->ParallelFor(slots, cost, [&](int64_t s0, int64_t s1) {
        for (int64_t s = s0; s < s1; ++s)
          for (int64_t blk = blocks * s / slots; blk < blocks * (s + 1) / slots; ++blk)
            Block(x, w, bias, y, blk, scratch + s * per_slot, nullptr);
      });
    } else {
      for (int64_t blk = 0; blk < blocks; ++blk) Block(x, w, bias, y, blk, scratch, io.pool);
    }
  }

 private:
  // Convolves images [blk * nb_, ...) with one GEMM per group; `pool` may be
  // null (already inside a parallel loop).
  void Block(const float* x, const float* w, const float* bias, float* y, int64_t blk,
             float* scratch, ThreadPool* pool) const {
    const int64_t P = geo_.out_size(), K = geo_.kernel_size(), kc = cg_ * K;
    const int64_t n0 = blk * nb_, nn = std::min(nb_, n_ - n0), cols = nn * P;
    float* col = scratch;
    float* tmp = scratch + col_floats_;
    for (int64_t g = 0; g < group_; ++g) {
      const float* wg = w + g * mg_ * kc;
      const float* b = x + (n0 * c_ + g * cg_) * geo_.in_size();
      if (!(pointwise_ && nn == 1)) {
        auto fill = [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i) {
            const int64_t img = i / cg_, c = i % cg_;
            Im2Col(geo_, x + ((n0 + img) * c_ + g * cg_) * geo_.in_size(), c, c + 1,
                   col + img * P, cols);
          }
        };
        if (pool) pool->ParallelFor(nn * cg_, static_cast<double>(K * P), fill);
        else fill(0, nn * cg_);
        b = col;
      }
      float* out = nn == 1 ? y + (n0 * m_ + g * mg_) * P : tmp;
      Sgemm(false, false, mg_, cols, kc, 1.f, wg, kc, b, cols, 0.f, out, cols, pool);
      // Bias and activation; with several images, also move each row into place.
      for (int64_t m = 0; m < mg_; ++m) {
        const float bv = bias ? bias[g * mg_ + m] : 0.f;
        for (int64_t i = 0; i < nn; ++i) {
          float* dst = y + ((n0 + i) * m_ + g * mg_ + m) * P;
          if (nn > 1) std::copy(tmp + m * cols + i * P, tmp + m * cols + (i + 1) * P, dst);
          if (act_.active()) {
            act_.Apply(dst, P, bv);
          } else if (bv != 0.f) {
            for (int64_t p = 0; p < P; ++p) dst[p] += bv;
          }
        }
      }
    }
  }

  SpatialGeometry geo_;
  Activation act_;
  ConvGemm gemm_;
  ConvDirect direct_conv_;
  bool direct_ = false, implicit_ = false;
  int64_t n_ = 0, c_ = 0, m_ = 0, group_ = 1, cg_ = 0, mg_ = 0;
  bool has_bias_ = false, depthwise_ = false, pointwise_ = false, block_parallel_ = false;
  int64_t nb_ = 1, col_floats_ = 0, tmp_floats_ = 0, slots_ = 1;
};

}  // namespace

void RegisterConvKernels(KernelRegistry& r) {
  r.Register(OpId::kConv, DType::kFloat32, &MakeKernel<ConvKernel>);
  RegisterPoolKernels(r);
  RegisterNhwcKernels(r);
}

}  // namespace cpu
}  // namespace kaiwu
