// kaiwu QLookup: y[i] = table[raw byte of x[i]] (passes/fuse_qdq_lookup.cc).
#include <cstring>

#include "backends/cpu/quant_kernels.h"

namespace kaiwu {
namespace cpu {
namespace {

class QLookupKernel : public Kernel {
 public:
  void Prepare(PrepareContext& ctx) override { size_ = ctx.in(0).size(); }
  void Run(const KernelIO& io) const override {
    const uint8_t* x = static_cast<const uint8_t*>(io.inputs[0]);
    uint8_t table[256];
    std::memcpy(table, io.inputs[1], 256);
    uint8_t* y = static_cast<uint8_t*>(io.outputs[0]);
    bool identity = true;  // DQ -> Q with equal parameters (Flatten between them): a copy
    for (int b = 0; b < 256; ++b) identity &= table[b] == b;
    if (identity) {
      io.pool->ParallelFor(size_, 0.25, [&](int64_t b, int64_t e) { std::memcpy(y + b, x + b, e - b); });
      return;
    }
    io.pool->ParallelFor(size_, 1.0, [&](int64_t b, int64_t e) {
      // 8 bytes per load and store, looked up one by one: the plain loop
      // auto-vectorizes into gathers, about 3x slower on AVX2 CPUs.
      int64_t i = b;
      for (; i + 8 <= e; i += 8) {
        uint64_t v, o = 0;
        std::memcpy(&v, x + i, 8);
        for (int k = 0; k < 8; ++k) o |= uint64_t{table[(v >> (8 * k)) & 0xff]} << (8 * k);
        std::memcpy(y + i, &o, 8);
      }
      for (; i < e; ++i) y[i] = table[x[i]];
    });
  }

 private:
  int64_t size_ = 0;
};

}  // namespace

void RegisterQuantLookupKernel(KernelRegistry& r) {
  r.Register(OpId::kQLookup, {DType::kUInt8, DType::kInt8}, &MakeKernel<QLookupKernel>);
}

}  // namespace cpu
}  // namespace kaiwu
