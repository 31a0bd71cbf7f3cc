#include "runtime/device_io.h"

#include <string>

namespace kaiwu {

namespace {

std::string Where(const DeviceBackend::Location& loc) {
  if (loc.kind == MemKind::kDevice) return "on cuda:" + std::to_string(loc.ordinal);
  return "in host memory";
}

}  // namespace

void ClassifyFeeds(const DeviceBackend& device, const std::vector<IOInfo>& inputs,
                   const std::vector<TensorView>& feeds, MemKind* kinds) {
  for (size_t i = 0; i < feeds.size(); ++i) {
    const TensorView& f = feeds[i];
    if (f.bytes() == 0) {
      kinds[i] = MemKind::kHost;  // nothing to copy
      continue;
    }
    const DeviceBackend::Location loc = device.Locate(f.data);
    const bool here = loc.kind == MemKind::kDevice && loc.ordinal == device.ordinal();
    if (f.memory == MemoryKind::kDevice && !here)
      Fail(StatusCode::kInput, "input '", inputs[i].name, "': the device tensor is ", Where(loc),
           ", but this session runs on ", device.name());
    if (loc.kind == MemKind::kDevice && !here)
      Fail(StatusCode::kInput, "input '", inputs[i].name, "': the memory is ", Where(loc),
           ", but this session runs on ", device.name());
    kinds[i] = loc.kind;
  }
}

void ClassifyOutputs(const DeviceBackend& device, const std::vector<IOInfo>& outputs,
                     void* const* user_outputs, size_t n, MemKind* kinds) {
  for (size_t k = 0; k < n; ++k) {
    if (!user_outputs[k]) {
      kinds[k] = MemKind::kHost;
      continue;
    }
    const DeviceBackend::Location loc = device.Locate(user_outputs[k]);
    if (loc.kind == MemKind::kDevice && loc.ordinal != device.ordinal())
      Fail(StatusCode::kInput, "output '", outputs[k].name, "': the buffer is ", Where(loc),
           ", but this session runs on ", device.name());
    kinds[k] = loc.kind;
  }
}

void SetCallerStreams(const RunOptions* options, DeviceRunIO* io) {
  io->num_wait = 0;
  io->signal = false;
  if (!options) return;
  auto add = [io](uintptr_t s) {
    for (int i = 0; i < io->num_wait; ++i)
      if (io->wait[i] == s) return;
    if (io->num_wait == DeviceRunIO::kMaxWaits)
      Fail(StatusCode::kInput, "a run waits for at most ", DeviceRunIO::kMaxWaits,
           " distinct CUDA streams");
    io->wait[io->num_wait++] = s;
  };
  if (options->has_stream) {
    add(options->stream);
    io->signal = true;
    io->signal_stream = options->stream;
  }
  for (uintptr_t s : options->wait_streams) add(s);
}

void CheckHostOnly(const std::vector<IOInfo>& inputs, const std::vector<TensorView>& feeds,
                   const RunOptions* options) {
  for (size_t i = 0; i < feeds.size(); ++i)
    if (feeds[i].memory == MemoryKind::kDevice)
      Fail(StatusCode::kInput, "input '", inputs[i].name,
           "' is in device memory, but this session runs on the CPU");
  if (options && (options->device_outputs || options->has_stream))
    Fail(StatusCode::kInput,
         "device results and caller streams need a device session (device='cuda'); "
         "this session runs on the CPU");
}

}  // namespace kaiwu
