// Times one ONNX model on the CPU from C++ (no Python), e.g. under `perf record`:
//   g++ -std=c++17 -O2 -g -Icpp/include -Icpp/src bench/run_model.cc build/dev/libkaiwu_core.a \
//       -lprotobuf -pthread -o /tmp/run_model
//   /tmp/run_model MODEL.onnx BATCH ITERS [THREADS]
// Feeds: random normal floats or random bytes; dims named "batch" take BATCH, other free dims 1.
// Prints the mean time per run after three warm-up runs.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>
#include "kaiwu/session.h"
using namespace kaiwu;
int main(int argc, char** argv) {
  SessionOptions o;
  o.threads = argc > 4 ? atoi(argv[4]) : 1;
  auto s = Session::LoadFile(argv[1], o);
  const int64_t b = atoi(argv[2]);
  const int iters = atoi(argv[3]);
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<TensorView> feeds;
  std::mt19937 rng(1);
  for (auto& in : s->inputs()) {
    TensorView v;
    v.dtype = in.dtype;
    v.shape = Shape(in.dims.begin(), in.dims.end());
    for (size_t k = 0; k < v.shape.size(); ++k)
      if (v.shape[k] < 0) v.shape[k] = (k < in.symbols.size() && in.symbols[k] == "batch") ? b : 1;
    bufs.emplace_back(v.bytes());
    auto& buf = bufs.back();
    if (v.dtype == DType::kFloat32) {
      std::normal_distribution<float> n(0.f, 1.f);
      for (size_t i = 0; i < buf.size() / 4; ++i) reinterpret_cast<float*>(buf.data())[i] = n(rng);
    } else {
      for (auto& x : buf) x = rng() & 255;
    }
    v.data = buf.data();
    feeds.push_back(v);
  }
  for (int i = 0; i < 3; ++i) s->Run(feeds);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) s->Run(feeds);
  auto t1 = std::chrono::steady_clock::now();
  printf("%.1f us per run\n", std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
}
