// MaxPool (with its optional int64 Indices output), AveragePool (1-D to 3-D,
// pads/auto_pad, dilations, ceil_mode, count_include_pad) and
// GlobalAveragePool / GlobalMaxPool. Planes (n, c) run
// in parallel; within a plane each output row accumulates tap by tap over the
// valid output range, so the inner loop is a unit-stride vectorizable loop.
// 2-D float32 MaxPool has its own AVX-512 / AVX2 kernel (MaxPoolF32).
#include <Eigen/Core>
#include <algorithm>
#include <limits>
#include <type_traits>
#include <vector>

#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#define KAIWU_MAXPOOL_F32_SIMD 1
#endif

#include "backends/cpu/conv_family.h"
#include "backends/cpu/cpu_kernels.h"
#include "ops/conv.h"

namespace kaiwu {
namespace cpu {
namespace {

// MaxPool's row buffer (elements): longer rows take the general path.
constexpr int64_t kMaxSpan = 4096;

// The start of a running max, and what padding holds: -inf for floating types
// (so a window of -inf inputs gives -inf, not lowest()), lowest() for integers.
template <typename T>
constexpr T MaxIdentity() {
  if constexpr (std::numeric_limits<T>::has_infinity) {
    return -std::numeric_limits<T>::infinity();
  } else {
    return std::numeric_limits<T>::lowest();
  }
}

template <typename T, bool kMax>
void PoolPlane(const SpatialGeometry& g, const T* x, T* y) {
  const int64_t OH = g.out[1], OW = g.out[2], H = g.in[1], W = g.in[2];
  const int64_t sw = g.stride[2];
  std::fill(y, y + g.out_size(), kMax ? MaxIdentity<T>() : T(0));
  for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
    int64_t d_lo, d_hi;
    g.ValidRange(0, kd, &d_lo, &d_hi);
    for (int64_t od = d_lo; od < d_hi; ++od) {
      const int64_t id = od * g.stride[0] - g.pad_begin[0] + kd * g.dilation[0];
      for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
        int64_t h_lo, h_hi;
        g.ValidRange(1, kh, &h_lo, &h_hi);
        for (int64_t oh = h_lo; oh < h_hi; ++oh) {
          const int64_t ih = oh * g.stride[1] - g.pad_begin[1] + kh * g.dilation[1];
          const T* xrow = x + (id * H + ih) * W;
          T* yrow = y + (od * OH + oh) * OW;
          for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
            int64_t lo, hi;
            g.ValidRange(2, kw, &lo, &hi);
            const T* src = xrow + kw * g.dilation[2] - g.pad_begin[2];
            for (int64_t ow = lo; ow < hi; ++ow) {
              T v = src[ow * sw];
              if (kMax) {
                yrow[ow] = std::max(yrow[ow], v);
              } else {
                yrow[ow] += v;
              }
            }
          }
        }
      }
    }
  }
}

// y[ow] = max(t[ow * sw + k]) over taps k < KW, ow < OW (scalar).
template <typename T>
void WindowMax(const T* t, int64_t KW, int64_t sw, int64_t OW, T* y) {
  for (int64_t ow = 0; ow < OW; ++ow) {
    const T* win = t + ow * sw;
    T m = win[0];
    for (int64_t k = 1; k < KW; ++k) m = std::max(m, win[k]);
    y[ow] = m;
  }
}

// 2-D MaxPool (no dilation), separable: for each output row, the max over the
// kernel rows into a padded row buffer (unit stride, vectorizes), then the max
// over each window of that buffer. `tmp` holds (out[2] - 1) * stride + kernel
// elements. Padding never wins: buffer slots outside the input stay MaxIdentity().
template <typename T>
void MaxPlane2D(const SpatialGeometry& g, const T* x, T* y, T* tmp) {
  const int64_t H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2];
  const int64_t KH = g.kernel[1], KW = g.kernel[2], sh = g.stride[1], sw = g.stride[2];
  const int64_t ph = g.pad_begin[1], pw = g.pad_begin[2];
  const int64_t span = (OW - 1) * sw + KW;
  const int64_t q_lo = std::min(span, pw), q_hi = std::min(span, W + pw);
  for (int64_t oh = 0; oh < OH; ++oh) {
    std::fill(tmp, tmp + span, MaxIdentity<T>());
    const int64_t ih0 = oh * sh - ph;
    for (int64_t kh = 0; kh < KH; ++kh) {
      const int64_t ih = ih0 + kh;
      if (ih < 0 || ih >= H) continue;
      const T* row = x + ih * W - pw;
      for (int64_t q = q_lo; q < q_hi; ++q) tmp[q] = std::max(tmp[q], row[q]);
    }
    T* yrow = y + oh * OW;
    if (sw == 2 && KW == 3) {  // the common 3x3 / stride 2: constant strides vectorize
      for (int64_t ow = 0; ow < OW; ++ow)
        yrow[ow] = std::max(std::max(tmp[2 * ow], tmp[2 * ow + 1]), tmp[2 * ow + 2]);
      continue;
    }
    WindowMax(tmp, KW, sw, OW, yrow);
  }
}

#if KAIWU_MAXPOOL_F32_SIMD
// The float32 vectors of MaxPoolF32: kN lanes; LoadN / StoreN touch only the
// first n < kN lanes (masked: nothing past them is read or written).
struct F32Vec {
#if defined(__AVX512F__)
  using V = __m512;
  static constexpr int64_t kN = 16;
  static __mmask16 Mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }
  static V Set1(float v) { return _mm512_set1_ps(v); }
  static V Load(const float* p) { return _mm512_loadu_ps(p); }
  static V LoadN(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(Mask(n), p); }
  static void Store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static void StoreN(float* p, V v, int64_t n) { _mm512_mask_storeu_ps(p, Mask(n), v); }
  static V Max(V x, V acc) { return _mm512_max_ps(x, acc); }
  // Even(a, b) / Odd(a, b): the even / odd elements of the 2 * kN elements a:b,
  // in an order that Order makes ascending (here they already are).
  static V Even(V a, V b) {
    return _mm512_permutex2var_ps(
        a, _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), b);
  }
  static V Odd(V a, V b) {
    return _mm512_permutex2var_ps(
        a, _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), b);
  }
  static V Order(V v) { return v; }
#else
  using V = __m256;
  static constexpr int64_t kN = 8;
  static __m256i Mask(int64_t n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static V Set1(float v) { return _mm256_set1_ps(v); }
  static V Load(const float* p) { return _mm256_loadu_ps(p); }
  static V LoadN(const float* p, int64_t n) { return _mm256_maskload_ps(p, Mask(n)); }
  static void Store(float* p, V v) { _mm256_storeu_ps(p, v); }
  static void StoreN(float* p, V v, int64_t n) { _mm256_maskstore_ps(p, Mask(n), v); }
  static V Max(V x, V acc) { return _mm256_max_ps(x, acc); }
  // Even(a, b) / Odd(a, b): the even / odd elements of the 16 elements a:b,
  // within each 128-bit half (a0 a2 b0 b2 | a4 a6 b4 b6); Order puts them in
  // order (a0 a2 a4 a6 b0 b2 b4 b6). Max is lane-wise, so the results of
  // several Even / Odd calls combine before a single Order.
  static V Even(V a, V b) { return _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)); }
  static V Odd(V a, V b) { return _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)); }
  static V Order(V v) {
    return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(v), _MM_SHUFFLE(3, 1, 2, 0)));
  }
#endif
  static void StoreUpTo(float* p, V v, int64_t n) {
    if (n >= kN) {
      Store(p, v);
    } else {
      StoreN(p, v, n);
    }
  }
};

// out[i] = the max over the rows x + r * W, r < rows (kRows when > 0), of
// element i < n; -inf when there are no rows. Max(x, acc) returns acc when x is
// NaN (maxps returns its second operand then), so NaN inputs are skipped as in
// PoolPlane.
template <int kRows>
void VerticalMaxF32(const float* x, int64_t W, int64_t rows, int64_t n, float* out) {
  using S = F32Vec;
  if (kRows > 0) rows = kRows;
  const S::V lowest = S::Set1(MaxIdentity<float>());
  int64_t i = 0;
  for (; i + S::kN <= n; i += S::kN) {
    S::V acc = lowest;
    for (int64_t r = 0; r < rows; ++r) acc = S::Max(S::Load(x + r * W + i), acc);
    S::Store(out + i, acc);
  }
  if (i < n) {
    S::V acc = lowest;
    for (int64_t r = 0; r < rows; ++r) acc = S::Max(S::LoadN(x + r * W + i, n - i), acc);
    S::StoreN(out + i, acc, n - i);
  }
}

// y[ow] = max(t[2 * ow + k]) over taps k < KW (kKW when > 0), ow < OW. For kN
// windows from ow, taps k and k + 1 (k even) are the even and odd elements of
// the 2 * kN slots from t + 2 * ow + k (Even / Odd).
template <int kKW>
void Stride2MaxF32(const float* t, int64_t KW, int64_t OW, float* y) {
  using S = F32Vec;
  if (kKW > 0) KW = kKW;
  for (int64_t ow = 0; ow < OW; ow += S::kN, t += 2 * S::kN) {
    S::V lo = S::Load(t), hi = S::Load(t + S::kN);
    S::V acc = S::Even(lo, hi);  // the buffer holds no NaN
    if (KW > 1) acc = S::Max(S::Odd(lo, hi), acc);
    for (int64_t k = 2; k < KW; k += 2) {
      lo = S::Load(t + k);
      hi = S::Load(t + k + S::kN);
      acc = S::Max(S::Even(lo, hi), acc);
      if (k + 1 < KW) acc = S::Max(S::Odd(lo, hi), acc);
    }
    S::StoreUpTo(y + ow, S::Order(acc), OW - ow);
  }
}

// y[ow] = max(t[ow * sw + k]) over taps k < KW, ow < OW.
void RowMaxF32(const float* t, int64_t KW, int64_t sw, int64_t OW, float* y) {
  using S = F32Vec;
  if (sw == 2) {
    switch (KW) {
      case 2: return Stride2MaxF32<2>(t, KW, OW, y);
      case 3: return Stride2MaxF32<3>(t, KW, OW, y);
      default: return Stride2MaxF32<0>(t, KW, OW, y);
    }
  }
  if (sw == 1) {
    for (int64_t ow = 0; ow < OW; ow += S::kN) {
      S::V acc = S::Load(t + ow);
      for (int64_t k = 1; k < KW; ++k) acc = S::Max(S::Load(t + ow + k), acc);
      S::StoreUpTo(y + ow, acc, OW - ow);
    }
    return;
  }
  WindowMax(t, KW, sw, OW, y);
}

// 2-D float32 MaxPool (no dilation, (out[2] - 1) * stride + kernel <= kMaxSpan)
// of planes [b, e). As MaxPlane2D, a band of output rows at a time: the
// vertical max of each row's kernel rows into that row's `span` slots of the
// band buffer, then each window's max along each row (RowMaxF32). The buffer
// starts as -inf and the vertical max writes only the slots inside the input,
// so padding stays -inf. Finishing the band's vertical max first keeps the
// window max's loads away from stores still in flight (a load straddling them
// would stall). Vector loads run past a row's span by less than 2 * kN slots,
// into the next row or the -inf tail: they feed only lanes past the row's end,
// whose stores are masked.
void MaxPoolF32(const SpatialGeometry& g, const float* x, float* y, int64_t b, int64_t e) {
  constexpr int64_t kBuf = 2 * kMaxSpan;
  const int64_t H = g.in[1], W = g.in[2], OH = g.out[1], OW = g.out[2];
  const int64_t KH = g.kernel[1], KW = g.kernel[2], sh = g.stride[1], sw = g.stride[2];
  const int64_t ph = g.pad_begin[1], pw = g.pad_begin[2];
  const int64_t span = (OW - 1) * sw + KW;
  const int64_t q_lo = std::min(span, pw), q_hi = std::min(span, W + pw);  // slots inside
  const int64_t band = std::min(OH, (kBuf - 2 * F32Vec::kN) / span);   // rows per band
  alignas(64) float buf[kBuf];  // on the stack: Run allocates nothing
  std::fill(buf, buf + band * span + 2 * F32Vec::kN, MaxIdentity<float>());
  for (int64_t p = b; p < e; ++p) {
    const float* xp = x + p * H * W + (q_lo - pw);  // the input of slot q_lo
    float* yp = y + p * OH * OW;
    for (int64_t oh0 = 0; oh0 < OH; oh0 += band) {
      const int64_t oh1 = std::min(OH, oh0 + band);
      float* t = buf + q_lo;
      for (int64_t oh = oh0; oh < oh1; ++oh, t += span) {
        const int64_t ih0 = oh * sh - ph;
        const int64_t ih_lo = std::max<int64_t>(0, ih0), ih_hi = std::min(H, ih0 + KH);
        const float* rows = xp + ih_lo * W;
        switch (ih_hi - ih_lo) {
          case 1: VerticalMaxF32<1>(rows, W, 1, q_hi - q_lo, t); break;
          case 2: VerticalMaxF32<2>(rows, W, 2, q_hi - q_lo, t); break;
          case 3: VerticalMaxF32<3>(rows, W, 3, q_hi - q_lo, t); break;
          default: VerticalMaxF32<0>(rows, W, ih_hi - ih_lo, q_hi - q_lo, t); break;
        }
      }
      for (int64_t oh = oh0; oh < oh1; ++oh)
        RowMaxF32(buf + (oh - oh0) * span, KW, sw, OW, yp + oh * OW);
    }
  }
}
#endif  // KAIWU_MAXPOOL_F32_SIMD

// MaxPool with Indices: as PoolPlane<T, true>, also recording the flat input
// index of each maximum (the first in window order on ties, as onnxruntime):
// plane * plane_size + the position within the plane, row-major
// (storage_order 0) or column-major (1). Padding is never an index.
template <typename T>
void ArgMaxPoolPlane(const SpatialGeometry& g, bool col_major, int64_t plane, const T* x, T* y,
                     int64_t* idx) {
  const int64_t OH = g.out[1], OW = g.out[2], D = g.in[0], H = g.in[1], W = g.in[2];
  const int64_t sw = g.stride[2], base = plane * g.in_size();
  // Index of input (d, h, w) within the plane: d*s0 + h*s1 + w*s2.
  const int64_t s0 = col_major ? 1 : H * W, s1 = col_major ? D : W, s2 = col_major ? D * H : 1;
  std::fill(y, y + g.out_size(), std::numeric_limits<T>::lowest());
  std::fill(idx, idx + g.out_size(), base);
  for (int64_t kd = 0; kd < g.kernel[0]; ++kd) {
    int64_t d_lo, d_hi;
    g.ValidRange(0, kd, &d_lo, &d_hi);
    for (int64_t od = d_lo; od < d_hi; ++od) {
      const int64_t id = od * g.stride[0] - g.pad_begin[0] + kd * g.dilation[0];
      for (int64_t kh = 0; kh < g.kernel[1]; ++kh) {
        int64_t h_lo, h_hi;
        g.ValidRange(1, kh, &h_lo, &h_hi);
        for (int64_t oh = h_lo; oh < h_hi; ++oh) {
          const int64_t ih = oh * g.stride[1] - g.pad_begin[1] + kh * g.dilation[1];
          const T* xrow = x + (id * H + ih) * W;
          const int64_t row_index = base + id * s0 + ih * s1;
          T* yrow = y + (od * OH + oh) * OW;
          int64_t* irow = idx + (od * OH + oh) * OW;
          for (int64_t kw = 0; kw < g.kernel[2]; ++kw) {
            int64_t lo, hi;
            g.ValidRange(2, kw, &lo, &hi);
            const int64_t off = kw * g.dilation[2] - g.pad_begin[2];
            for (int64_t ow = lo; ow < hi; ++ow) {
              const int64_t iw = ow * sw + off;
              if (xrow[iw] > yrow[ow]) {
                yrow[ow] = xrow[iw];
                irow[ow] = row_index + iw * s2;
              }
            }
          }
        }
      }
    }
  }
}

class PoolKernel : public Kernel {
 public:
  explicit PoolKernel(bool is_max) : max_(is_max) {}

  void Prepare(PrepareContext& ctx) override {
    const PoolParams& p = ctx.Params<PoolParams>();
    const Shape& x = ctx.in(0).shape;
    dtype_ = ctx.in(0).dtype;
    indices_ = max_ && p.indices;
    col_major_ = p.col_major;
    geo_ = p.geo;
    planes_ = x[0] * x[1];
    separable_ = geo_.in[0] == 1 && geo_.kernel[0] == 1 && geo_.dilation[1] == 1 &&
                 geo_.dilation[2] == 1 &&
                 (geo_.out[2] - 1) * geo_.stride[2] + geo_.kernel[2] <= kMaxSpan;
    if (!max_) {
      // Window sizes factor per dim: taps inside the input, or inside the
      // padded input when count_include_pad (never the ceil_mode overhang).
      const bool include_pad = p.include_pad;
      for (int d = 0; d < 3; ++d) {
        counts_[d].assign(geo_.out[d], 0);
        int64_t lo_bound = include_pad ? -geo_.pad_begin[d] : 0;
        int64_t hi_bound = geo_.in[d] + (include_pad ? geo_.pad_end[d] : 0);
        for (int64_t o = 0; o < geo_.out[d]; ++o)
          for (int64_t k = 0; k < geo_.kernel[d]; ++k) {
            int64_t pos = o * geo_.stride[d] - geo_.pad_begin[d] + k * geo_.dilation[d];
            counts_[d][o] += pos >= lo_bound && pos < hi_bound;
          }
      }
    }
  }

  void Run(const KernelIO& io) const override {
    switch (dtype_) {
      case DType::kFloat32: RunTyped<float>(io); break;
      case DType::kFloat64: RunTyped<double>(io); break;
      case DType::kInt8: RunTyped<int8_t>(io); break;
      default: RunTyped<uint8_t>(io); break;
    }
  }

 private:
  template <typename T>
  void RunTyped(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    T* y = static_cast<T*>(io.outputs[0]);
    const int64_t P = geo_.out_size(), in = geo_.in_size();
    const double cost = static_cast<double>(P * geo_.kernel_size());
#if KAIWU_MAXPOOL_F32_SIMD
    if constexpr (std::is_same_v<T, float>) {
      if (max_ && separable_ && !indices_) {
        io.pool->ParallelFor(planes_, cost, [&](int64_t b, int64_t e) {
          MaxPoolF32(geo_, x, y, b, e);
        });
        return;
      }
    }
#endif
    io.pool->ParallelFor(planes_, cost, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        if (indices_) {
          ArgMaxPoolPlane<T>(geo_, col_major_, i, x + i * in, y + i * P,
                             static_cast<int64_t*>(io.outputs[1]) + i * P);
        } else if (max_ && separable_) {
          T tmp[kMaxSpan];  // on the stack: Run allocates nothing
          MaxPlane2D<T>(geo_, x + i * in, y + i * P, tmp);
        } else if (max_) {
          PoolPlane<T, true>(geo_, x + i * in, y + i * P);
        } else {
          PoolPlane<T, false>(geo_, x + i * in, y + i * P);
          if constexpr (std::is_floating_point_v<T>) Average(y + i * P);
        }
      }
    });
  }

  template <typename T>
  void Average(T* y) const {
    for (int64_t od = 0; od < geo_.out[0]; ++od)
      for (int64_t oh = 0; oh < geo_.out[1]; ++oh) {
        T* row = y + (od * geo_.out[1] + oh) * geo_.out[2];
        const int64_t dh = counts_[0][od] * counts_[1][oh];
        for (int64_t ow = 0; ow < geo_.out[2]; ++ow) {
          int64_t n = dh * counts_[2][ow];
          row[ow] = n > 0 ? row[ow] / static_cast<T>(n) : T(0);
        }
      }
  }

  bool max_;
  bool indices_ = false, col_major_ = false;  // MaxPool's Indices output
  bool separable_ = false;  // 2-D (or 1-D), no dilation, rows up to kMaxSpan: MaxPlane2D
  DType dtype_ = DType::kFloat32;
  SpatialGeometry geo_;
  int64_t planes_ = 0;
  std::vector<int64_t> counts_[3];
};

class GlobalPoolKernel : public Kernel {
 public:
  explicit GlobalPoolKernel(bool is_max) : max_(is_max) {}

  void Prepare(PrepareContext& ctx) override {
    dtype_ = ctx.in(0).dtype;
    const Shape& x = ctx.in(0).shape;
    planes_ = x[0] * x[1];
    plane_size_ = NumElements(Shape(x.begin() + 2, x.end()));
  }

  void Run(const KernelIO& io) const override {
    if (dtype_ == DType::kFloat32) {
      RunTyped<float>(io);
    } else {
      RunTyped<double>(io);
    }
  }

 private:
  template <typename T>
  void RunTyped(const KernelIO& io) const {
    const T* x = static_cast<const T*>(io.inputs[0]);
    T* y = static_cast<T*>(io.outputs[0]);
    const int64_t n = plane_size_;
    io.pool->ParallelFor(planes_, static_cast<double>(n), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> plane(x + i * n, n);
        if (max_) {
          y[i] = plane.maxCoeff();
        } else {
          y[i] = n > 0 ? plane.sum() / static_cast<T>(n) : T(0);
        }
      }
    });
  }

  bool max_;
  DType dtype_ = DType::kFloat32;
  int64_t planes_ = 0, plane_size_ = 0;
};

template <typename K, bool kMax>
std::unique_ptr<Kernel> MakePool(const Node&) {
  return std::make_unique<K>(kMax);
}

}  // namespace

void RegisterPoolKernels(KernelRegistry& r) {
  r.Register(OpId::kMaxPool, {DType::kFloat32, DType::kFloat64, DType::kInt8, DType::kUInt8},
             &MakePool<PoolKernel, true>);
  r.Register(OpId::kAveragePool, {DType::kFloat32, DType::kFloat64},
             &MakePool<PoolKernel, false>);
  r.Register(OpId::kGlobalMaxPool, {DType::kFloat32, DType::kFloat64},
             &MakePool<GlobalPoolKernel, true>);
  r.Register(OpId::kGlobalAveragePool, {DType::kFloat32, DType::kFloat64},
             &MakePool<GlobalPoolKernel, false>);
}

}  // namespace cpu
}  // namespace kaiwu
