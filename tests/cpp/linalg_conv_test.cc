// Conv, MaxPool, AveragePool and the global pools against float64 references.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "linalg_test_util.h"

namespace kaiwu {
namespace {

using testing::ExpectNear;
using testing::IntAttr;
using testing::IntsAttr;
using testing::MakeNode;
using testing::RandomTensor;
using testing::RunNode;
using testing::StrAttr;

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;  // pads: begins then ends
  std::string auto_pad = "NOTSET";
  bool ceil_mode = false;
};

// Output sizes and effective begin/end pads, straight from the ONNX spec.
void RefGeometry(const Shape& in, Window* w, Shape* out) {
  size_t nd = in.size();
  out->assign(nd, 0);
  for (size_t i = 0; i < nd; ++i) {
    int64_t dk = (w->kernel[i] - 1) * w->dilations[i] + 1, s = w->strides[i];
    if (w->auto_pad == "SAME_UPPER" || w->auto_pad == "SAME_LOWER") {
      (*out)[i] = (in[i] + s - 1) / s;
      int64_t total = std::max<int64_t>(0, ((*out)[i] - 1) * s + dk - in[i]);
      int64_t begin = w->auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      w->pads[i] = begin;
      w->pads[nd + i] = total - begin;
    } else {
      if (w->auto_pad == "VALID") w->pads[i] = w->pads[nd + i] = 0;
      double span = double(in[i] + w->pads[i] + w->pads[nd + i] - dk) / s;
      (*out)[i] = int64_t(w->ceil_mode ? std::ceil(span) : std::floor(span)) + 1;
      if (w->ceil_mode && ((*out)[i] - 1) * s >= in[i] + w->pads[i]) --(*out)[i];
    }
  }
}

std::map<std::string, Attribute> WindowAttrs(const Window& w, bool with_kernel) {
  std::map<std::string, Attribute> a = {{"strides", IntsAttr(w.strides)},
                                        {"dilations", IntsAttr(w.dilations)},
                                        {"auto_pad", StrAttr(w.auto_pad)}};
  if (w.auto_pad == "NOTSET") a["pads"] = IntsAttr(w.pads);
  if (with_kernel) a["kernel_shape"] = IntsAttr(w.kernel);
  if (w.ceil_mode) a["ceil_mode"] = IntAttr(1);
  return a;
}

// Calls fn(flat index, coords) over a row-major shape.
template <typename F>
void ForEachIndex(const Shape& shape, F fn) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t f = 0; f < NumElements(shape); ++f) {
    int64_t rem = f;
    for (int d = int(shape.size()) - 1; d >= 0; --d) {
      idx[d] = rem % shape[d];
      rem /= shape[d];
    }
    fn(f, idx);
  }
}

std::vector<double> RefConv(const Tensor& x, const Tensor& w, const Tensor* b, int64_t group,
                            Window win, Shape* out_shape) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  Shape in(xs.begin() + 2, xs.end()), out;
  RefGeometry(in, &win, &out);
  int64_t n = xs[0], m = ws[0], cg = ws[1], mg = m / group;
  Shape ks(ws.begin() + 2, ws.end());
  *out_shape = {n, m};
  out_shape->insert(out_shape->end(), out.begin(), out.end());
  std::vector<double> y(NumElements(*out_shape));
  ForEachIndex(*out_shape, [&](int64_t f, const std::vector<int64_t>& o) {
    double acc = b ? b->As<float>()[o[1]] : 0.0;
    int64_t g = o[1] / mg;
    for (int64_t c = 0; c < cg; ++c)
      ForEachIndex(ks, [&](int64_t kf, const std::vector<int64_t>& k) {
        int64_t xf = o[0] * xs[1] + g * cg + c;
        for (size_t d = 0; d < in.size(); ++d) {
          int64_t pos = o[2 + d] * win.strides[d] - win.pads[d] + k[d] * win.dilations[d];
          if (pos < 0 || pos >= in[d]) return;
          xf = xf * in[d] + pos;
        }
        acc += double(w.As<float>()[(o[1] * cg + c) * NumElements(ks) + kf]) * x.As<float>()[xf];
      });
    y[f] = acc;
  });
  return y;
}

TEST(LinalgConv, SweepMatchesReference) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> pick(0, 1 << 20);
  const char* autos[] = {"NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
  for (int trial = 0; trial < 80; ++trial) {
    int nd = trial % 7 == 6 ? 3 : 1 + trial % 2;
    int64_t n = 1 + pick(rng) % 4;
    int kind = trial % 4;  // 0: group 1, 1: grouped, 2: depthwise, 3: pointwise
    int64_t group = kind == 1 ? 2 : 1, cg = 1 + pick(rng) % 3, mg = 1 + pick(rng) % 3;
    if (kind == 2) {
      group = 2 + pick(rng) % 4;
      cg = 1;
    }
    Window win;
    win.auto_pad = kind == 3 ? "NOTSET" : autos[pick(rng) % 5];
    Shape xs = {n, group * cg}, ws = {group * mg, cg};
    for (int d = 0; d < nd; ++d) {
      win.kernel.push_back(kind == 3 ? 1 : 1 + pick(rng) % 3);
      win.strides.push_back(kind == 3 ? 1 : 1 + pick(rng) % 2);
      win.dilations.push_back(kind == 3 || nd == 3 ? 1 : 1 + pick(rng) % 2);
      xs.push_back((nd == 3 ? 3 : 5) + pick(rng) % 5);
      ws.push_back(win.kernel.back());
    }
    for (int d = 0; d < 2 * nd; ++d) win.pads.push_back(kind == 3 ? 0 : pick(rng) % 3);
    Tensor x = RandomTensor(xs, rng), w = RandomTensor(ws, rng), b = RandomTensor({ws[0]}, rng);
    bool with_bias = trial % 3 != 0;
    auto attrs = WindowAttrs(win, trial % 2 == 0);
    attrs["group"] = IntAttr(group);
    Node node = MakeNode("Conv", with_bias ? 3 : 2, 1, attrs);
    Shape want_shape;
    std::vector<double> want = RefConv(x, w, with_bias ? &b : nullptr, group, win, &want_shape);
    for (int threads : {1, 3}) {
      std::vector<Tensor> ins = {x, w};
      if (with_bias) ins.push_back(b);
      Tensor y = RunNode(node, ins, threads)[0];
      ExpectNear(y, want_shape, want,
                 "trial " + std::to_string(trial) + " X " + ShapeToString(xs) + " W " +
                     ShapeToString(ws) + " " + win.auto_pad);
    }
  }
}

// Shapes for each way the implicit GEMM reads x (see conv_gemm.h): output
// rows of whole vectors (direct tile loads), rows that are not (vectors
// across rows and images, two loads each), strides with several tap phases,
// dilations, 3-D and 1-D, pads wider than the kernel, groups, chunks of
// images and thread counts around the batch size.
TEST(LinalgConv, ImplicitGemmLayouts) {
  struct Case {
    Shape x;  // N, C, spatial...
    int64_t m, group;
    Window win;
  };
  auto win = [](std::vector<int64_t> k, std::vector<int64_t> s, std::vector<int64_t> d,
                std::vector<int64_t> p, std::string auto_pad = "NOTSET") {
    Window w;
    w.kernel = std::move(k);
    w.strides = std::move(s);
    w.dilations = std::move(d);
    w.pads = std::move(p);
    w.auto_pad = std::move(auto_pad);
    return w;
  };
  const Case cases[] = {
      {{7, 16, 32, 32}, 13, 1, win({3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1})},  // rows of 32
      {{1, 6, 32, 32}, 8, 1, win({3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1})},    // batch 1
      {{3, 5, 33, 32}, 6, 1, win({3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1})},    // 2 phases per dim
      {{2, 3, 20, 27}, 5, 1, win({4, 5}, {3, 3}, {2, 2}, {2, 1, 0, 3})},    // phases of 2t % 3
      {{2, 3, 5, 6, 16}, 4, 1, win({2, 3, 3}, {2, 1, 1}, {1, 2, 1}, {1, 1, 1, 0, 2, 1})},
      {{3, 8, 16, 16}, 6, 2, win({3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1})},    // groups
      {{2, 4, 11, 11}, 5, 1, win({2, 2}, {1, 1}, {1, 1}, {3, 2, 3, 3})},    // pads past the kernel
      {{2, 2, 100}, 3, 1, win({5}, {2}, {3}, {4, 0})},                      // 1-D, 46 wide
      {{1, 4, 44, 44}, 7, 1, win({8, 8}, {4, 4}, {1, 1}, {0, 0, 0, 0})},    // rows of 10
      {{11, 6, 20, 20}, 9, 1, win({4, 4}, {2, 2}, {1, 1}, {0, 0, 0, 0})},   // rows of 9
      {{20, 7, 9, 9}, 5, 1, win({3, 3}, {1, 1}, {1, 1}, {0, 0, 0, 0})},     // rows of 7
      {{4, 3, 21, 23}, 4, 1, win({3, 3}, {2, 2}, {1, 1}, {}, "SAME_LOWER")},
      {{3, 2, 10, 12}, 3, 1, win({2, 2}, {1, 1}, {1, 1}, {3, 3, 3, 3})},    // rows of 17
      {{2, 6, 30}, 6, 3, win({3}, {1}, {1}, {1, 1})},                       // 1-D groups, 30 wide
  };
  std::mt19937 rng(21);
  for (const Case& cs : cases) {
    Shape ws = {cs.m, cs.x[1] / cs.group};
    ws.insert(ws.end(), cs.win.kernel.begin(), cs.win.kernel.end());
    Window w = cs.win;
    if (w.pads.empty()) w.pads.assign(2 * w.kernel.size(), 0);
    Tensor x = RandomTensor(cs.x, rng), wt = RandomTensor(ws, rng), b = RandomTensor({cs.m}, rng);
    auto attrs = WindowAttrs(w, true);
    attrs["group"] = IntAttr(cs.group);
    Shape want_shape;
    std::vector<double> want = RefConv(x, wt, &b, cs.group, w, &want_shape);
    for (int threads : {1, 2, 3}) {
      Tensor y = RunNode(MakeNode("Conv", 3, 1, attrs), {x, wt, b}, threads)[0];
      ExpectNear(y, want_shape, want,
                 "X " + ShapeToString(cs.x) + " W " + ShapeToString(ws) + " threads " +
                     std::to_string(threads));
    }
  }
}

TEST(LinalgConv, RejectsBadInputs) {
  std::mt19937 rng(12);
  auto conv = [&](Shape xs, Shape ws, std::map<std::string, Attribute> attrs) {
    return RunNode(MakeNode("Conv", 2, 1, attrs), {RandomTensor(xs, rng), RandomTensor(ws, rng)});
  };
  EXPECT_THROW(conv({1, 3, 8, 8}, {4, 2, 3, 3}, {}), Error);                      // C mismatch
  EXPECT_THROW(conv({1, 4, 8, 8}, {3, 2, 3, 3}, {{"group", IntAttr(2)}}), Error);  // M % group
  EXPECT_THROW(conv({1, 3, 8, 8}, {4, 3, 3}, {}), Error);                         // W rank
  EXPECT_THROW(conv({1, 3, 8, 8}, {4, 3, 3, 3}, {{"strides", IntsAttr({1})}}), Error);
  EXPECT_THROW(conv({1, 3, 8, 8}, {4, 3, 3, 3}, {{"auto_pad", StrAttr("FOO")}}), Error);
  EXPECT_THROW(conv({1, 3, 2, 2}, {4, 3, 3, 3}, {}), Error);  // window larger than input
  EXPECT_THROW(conv({1, 3, 8, 8}, {4, 3, 3, 3}, {{"kernel_shape", IntsAttr({2, 2})}}), Error);
}

std::vector<double> RefPool(const Tensor& x, bool is_max, bool include_pad, Window win,
                            Shape* out_shape) {
  const Shape& xs = x.shape();
  Shape in(xs.begin() + 2, xs.end()), out;
  RefGeometry(in, &win, &out);
  size_t nd = in.size();
  *out_shape = {xs[0], xs[1]};
  out_shape->insert(out_shape->end(), out.begin(), out.end());
  std::vector<double> y(NumElements(*out_shape));
  ForEachIndex(*out_shape, [&](int64_t f, const std::vector<int64_t>& o) {
    double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
    int64_t count = 0;
    ForEachIndex(Shape(win.kernel.begin(), win.kernel.end()), [&](int64_t, const std::vector<int64_t>& k) {
      int64_t xf = o[0] * xs[1] + o[1];
      bool inside = true, in_padded = true;
      for (size_t d = 0; d < nd; ++d) {
        int64_t pos = o[2 + d] * win.strides[d] - win.pads[d] + k[d] * win.dilations[d];
        inside &= pos >= 0 && pos < in[d];
        in_padded &= pos >= -win.pads[d] && pos < in[d] + win.pads[nd + d];
        xf = xf * in[d] + std::clamp<int64_t>(pos, 0, in[d] - 1);
      }
      if (inside) acc = is_max ? std::max(acc, double(x.As<float>()[xf])) : acc + x.As<float>()[xf];
      count += include_pad ? in_padded : inside;
    });
    y[f] = is_max ? acc : acc / count;
  });
  return y;
}

TEST(LinalgPool, MaxAndAverageSweep) {
  std::mt19937 rng(13);
  std::uniform_int_distribution<int> pick(0, 1 << 20);
  const char* autos[] = {"NOTSET", "NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"};
  for (int trial = 0; trial < 60; ++trial) {
    int nd = 1 + trial % 2;
    bool is_max = trial % 2 == 0;
    bool include_pad = (trial / 2) % 2 == 1;
    Window win;
    win.auto_pad = autos[pick(rng) % 6];
    win.ceil_mode = win.auto_pad == "NOTSET" && pick(rng) % 2;
    Shape xs = {1 + pick(rng) % 3, 1 + pick(rng) % 4};
    for (int d = 0; d < nd; ++d) {
      win.kernel.push_back(1 + pick(rng) % 3);
      win.strides.push_back(1 + pick(rng) % 3);
      win.dilations.push_back(1 + pick(rng) % 2);
      xs.push_back(5 + pick(rng) % 6);
    }
    for (int d = 0; d < 2 * nd; ++d) win.pads.push_back(pick(rng) % win.kernel[d % nd]);
    Tensor x = RandomTensor(xs, rng);
    auto attrs = WindowAttrs(win, true);
    if (!is_max) attrs["count_include_pad"] = IntAttr(include_pad);
    Node node = MakeNode(is_max ? "MaxPool" : "AveragePool", 1, 1, attrs);
    Shape want_shape;
    std::vector<double> want = RefPool(x, is_max, include_pad, win, &want_shape);
    for (int threads : {1, 3}) {
      Tensor y = RunNode(node, {x}, threads)[0];
      ExpectNear(y, want_shape, want,
                 "trial " + std::to_string(trial) + " " + node.op_type + " X " +
                     ShapeToString(xs) + " " + win.auto_pad + (win.ceil_mode ? " ceil" : ""));
    }
  }
}

TEST(LinalgPool, GlobalPools) {
  std::mt19937 rng(14);
  for (Shape xs : {Shape{2, 3, 7}, Shape{3, 2, 5, 6}}) {
    Tensor x = RandomTensor(xs, rng);
    int64_t planes = xs[0] * xs[1], size = x.size() / planes;
    Shape want_shape = {xs[0], xs[1]};
    want_shape.resize(xs.size(), 1);
    std::vector<double> want_max(planes), want_avg(planes);
    for (int64_t p = 0; p < planes; ++p) {
      double mx = -1e9, sum = 0;
      for (int64_t j = 0; j < size; ++j) {
        mx = std::max(mx, double(x.As<float>()[p * size + j]));
        sum += x.As<float>()[p * size + j];
      }
      want_max[p] = mx;
      want_avg[p] = sum / size;
    }
    for (int threads : {1, 3}) {
      ExpectNear(RunNode(MakeNode("GlobalMaxPool", 1, 1), {x}, threads)[0], want_shape, want_max,
                 "GlobalMaxPool");
      ExpectNear(RunNode(MakeNode("GlobalAveragePool", 1, 1), {x}, threads)[0], want_shape,
                 want_avg, "GlobalAveragePool");
    }
  }
}

TEST(LinalgPool, RejectsBadAttributes) {
  std::mt19937 rng(15);
  Tensor x = RandomTensor({1, 2, 6, 6}, rng);
  EXPECT_THROW(RunNode(MakeNode("MaxPool", 1, 1), {x}), Error);  // no kernel_shape
  EXPECT_THROW(RunNode(MakeNode("AveragePool", 1, 1, {{"kernel_shape", IntsAttr({2})}}), {x}),
               Error);  // kernel rank
  EXPECT_THROW(RunNode(MakeNode("AveragePool", 1, 1,
                                {{"kernel_shape", IntsAttr({2, 2})}, {"strides", IntsAttr({0, 1})}}),
                       {x}),
               Error);
  EXPECT_THROW(RunNode(MakeNode("GlobalAveragePool", 1, 1), {RandomTensor({4}, rng)}), Error);
}

}  // namespace
}  // namespace kaiwu
