// Microbenchmark: oneDNN convolution / inner product on the benchmark
// policies' shapes (tests/python/policies.py), 1 thread, CPU time per call.
// Prints one line per (shape, batch, layout): ms per call, GFLOP/s and the
// implementation oneDNN picked. Build (outside CMake, it is a one-off):
//   g++ -O2 -std=c++17 bench/dnnl_conv_bench.cc -ldnnl -o /tmp/dnnl_conv_bench
//   OMP_NUM_THREADS=1 /tmp/dnnl_conv_bench [batch ...]
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "oneapi/dnnl/dnnl.hpp"

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;

namespace {

double CpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

struct ConvShape {
  const char* name;
  int c, h, w, m, k, s, p;
  bool relu;
};

// Times `fn` for ~0.3 s after a warm-up; returns CPU seconds per call.
template <class F>
double Time(F fn) {
  fn();
  int calls = 0;
  double t0 = CpuSeconds(), t = t0;
  while (t - t0 < 0.3) {
    fn();
    ++calls;
    t = CpuSeconds();
  }
  return (t - t0) / calls;
}

void Fill(memory& m) {
  auto* p = static_cast<float*>(m.get_data_handle());
  size_t n = m.get_desc().get_size() / sizeof(float);
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<float>(rand() % 200 - 100) / 100.f;
}

// layout: 0 all nchw, 1 all chosen by oneDNN (blocked), 2 nchw in, blocked out.
void BenchConv(engine& eng, stream& s, const ConvShape& c, int n, int layout) {
  const bool blocked = layout != 0;
  const int oh = (c.h + 2 * c.p - c.k) / c.s + 1, ow = (c.w + 2 * c.p - c.k) / c.s + 1;
  memory::dims src{n, c.c, c.h, c.w}, wei{c.m, c.c, c.k, c.k}, bia{c.m}, dst{n, c.m, oh, ow};
  const tag act = blocked ? tag::any : tag::nchw;
  auto src_md = memory::desc(src, dt::f32, layout == 2 ? tag::nchw : act);
  auto dst_md = memory::desc(dst, dt::f32, act);
  auto wei_md = memory::desc(wei, dt::f32, tag::any);
  auto bia_md = memory::desc(bia, dt::f32, tag::x);
  post_ops po;
  if (c.relu) po.append_eltwise(1.f, algorithm::eltwise_relu, 0.f, 0.f);
  primitive_attr attr;
  attr.set_post_ops(po);
  auto d = convolution_forward::desc(prop_kind::forward_inference, algorithm::convolution_direct,
                                     src_md, wei_md, bia_md, dst_md, {c.s, c.s}, {c.p, c.p},
                                     {c.p, c.p});
  auto pd = convolution_forward::primitive_desc(d, attr, eng);
  memory srcm(pd.src_desc(), eng), weim(pd.weights_desc(), eng), biam(pd.bias_desc(), eng),
      dstm(pd.dst_desc(), eng);
  Fill(srcm);
  Fill(weim);
  Fill(biam);
  convolution_forward conv(pd);
  double sec = Time([&] {
    conv.execute(s, {{DNNL_ARG_SRC, srcm}, {DNNL_ARG_WEIGHTS, weim}, {DNNL_ARG_BIAS, biam},
                     {DNNL_ARG_DST, dstm}});
    s.wait();
  });
  const double flop = 2.0 * n * c.m * oh * ow * c.c * c.k * c.k;
  printf("%-12s b%-4d %-8s %9.3f ms %7.1f GFLOP/s  %s wei %s\n", c.name, n, layout == 0 ? "nchw" : layout == 1 ? "blocked" : "nchw>blk",
         sec * 1e3, flop / sec * 1e-9, pd.impl_info_str(),
         pd.weights_desc().data.format_kind == dnnl_blocked ? "blocked" : "?");
}

void BenchFc(engine& eng, stream& s, const char* name, int n, int k, int m) {
  auto src_md = memory::desc({n, k}, dt::f32, tag::nc);
  auto wei_md = memory::desc({m, k}, dt::f32, tag::any);
  auto bia_md = memory::desc({m}, dt::f32, tag::x);
  auto dst_md = memory::desc({n, m}, dt::f32, tag::nc);
  auto d = inner_product_forward::desc(prop_kind::forward_inference, src_md, wei_md, bia_md, dst_md);
  auto pd = inner_product_forward::primitive_desc(d, eng);
  memory srcm(pd.src_desc(), eng), weim(pd.weights_desc(), eng), biam(pd.bias_desc(), eng),
      dstm(pd.dst_desc(), eng);
  Fill(srcm);
  Fill(weim);
  Fill(biam);
  inner_product_forward ip(pd);
  double sec = Time([&] {
    ip.execute(s, {{DNNL_ARG_SRC, srcm}, {DNNL_ARG_WEIGHTS, weim}, {DNNL_ARG_BIAS, biam},
                   {DNNL_ARG_DST, dstm}});
    s.wait();
  });
  printf("%-12s b%-4d %-7s %9.3f ms %7.1f GFLOP/s  %s\n", name, n, "ip", sec * 1e3,
         2.0 * n * k * m / sec * 1e-9, pd.impl_info_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> batches;
  for (int i = 1; i < argc; ++i) batches.push_back(atoi(argv[i]));
  if (batches.empty()) batches = {1, 32, 256};
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const ConvShape shapes[] = {
      {"atari_c1", 4, 84, 84, 32, 8, 4, 0, true},   {"atari_c2", 32, 20, 20, 64, 4, 2, 0, true},
      {"atari_c3", 64, 9, 9, 64, 3, 1, 0, true},    {"impala_c0", 3, 64, 64, 16, 3, 1, 1, false},
      {"impala_r16", 16, 32, 32, 16, 3, 1, 1, true}, {"impala_c1", 16, 32, 32, 32, 3, 1, 1, false},
      {"impala_r32a", 32, 16, 16, 32, 3, 1, 1, true}, {"impala_r32b", 32, 8, 8, 32, 3, 1, 1, true},
  };
  for (int n : batches) {
    for (const auto& c : shapes)
      for (int layout : {0, 1, 2}) BenchConv(eng, s, c, n, layout);
    BenchFc(eng, s, "atari_fc", n, 3136, 512);
    BenchFc(eng, s, "impala_fc", n, 2048, 256);
    BenchFc(eng, s, "mlp_fc", n, 256, 256);
  }
  return 0;
}
