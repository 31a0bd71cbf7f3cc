// Where one run's feeds and results live on a device session, and which caller
// streams order it: the checks and classification behind Session::Run's
// device-resident and page-locked I/O.
#pragma once

#include <vector>

#include "backends/device.h"
#include "kaiwu/session.h"

namespace kaiwu {

/// The memory kind of each feed: kDevice for device feeds (checked to be on
/// `device`; a host pointer or another device's throws kInput naming the
/// input), kPinned or kHost for host feeds.
void ClassifyFeeds(const DeviceBackend& device, const std::vector<IOInfo>& inputs,
                   const std::vector<TensorView>& feeds, MemKind* kinds);

/// The memory kind of each caller-given output buffer (host or this device's).
void ClassifyOutputs(const DeviceBackend& device, const std::vector<IOInfo>& outputs,
                     void* const* user_outputs, size_t n, MemKind* kinds);

/// The caller streams of `options` into `io` (the run waits for each, and the
/// caller's own stream waits for the run). Throws kInput when there are more
/// than DeviceRunIO::kMaxWaits distinct streams.
void SetCallerStreams(const RunOptions* options, DeviceRunIO* io);

/// Refuses device feeds and device options on a CPU session (kInput).
void CheckHostOnly(const std::vector<IOInfo>& inputs, const std::vector<TensorView>& feeds,
                   const RunOptions* options);

}  // namespace kaiwu
