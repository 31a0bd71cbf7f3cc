// The device half of WeightBuilder.
#include "runtime/weight_builder.h"
#include "runtime/weight_pool.h"

namespace kaiwu {

void WeightBuilder::BuildOnDevice(WeightSet* next, const RefitOptions& options,
                                  std::vector<std::string>* problems) {
  device_->MakeCurrent();
  if (!stream_) stream_ = device_->NewStream(0, 0, 0);
  for (const Write& w : writes_) {
    CopyFault fault;
    if (!CopyBlocks(*w.blocks, srcs_.data() + w.first_src, next->buffers[w.value]->host.data(),
                    statics_.dtype(w.value), options.check_finite, &fault)) {
      problems->push_back("'" + std::string(src_names_[w.first_src + fault.src]) +
                          "' holds a non-finite value at flat index " + std::to_string(fault.index));
      return;
    }
  }
  RunSteps(next);
  for (size_t v = 0; v < changed_.size(); ++v) {
    WeightBuffer* b = next->buffers[v];
    if (changed_[v] && b && b->device) stream_->CopyInPinned(b->device.get(), b->host.data(), b->host.bytes());
  }
  stream_->Finish([](int) { return std::string("a weight upload"); });
}

void WeightBuilder::EnsureHost(const WeightSet&, const std::vector<int>&) const {}

}  // namespace kaiwu
