// cuDNN in the CUDA backend (built when CMake finds cuDNN: KAIWU_WITH_CUDNN).
// Run contexts whose plan has a step asking for kNeedDnnHandle get a handle
// bound to their stream (DeviceContext::dnn); plan building asks cuDNN's
// heuristics through one query handle per device.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>

#if KAIWU_WITH_CUDNN
#include <cudnn.h>
#endif

namespace kaiwu {
namespace cuda {

/// True when this build has cuDNN and KAIWU_CUDNN is "1" (read per call): every
/// NCHW conv with symmetric pads runs on cuDNN. Off by default: a conv shape's
/// first cuDNN run can take up to a second (kernel loading), which stalls a
/// server whose batch sizes are new unless it was started with warm-up
/// (InferenceServer::Warmup); measured in bench/notes/cuda.md.
bool DnnEnabled();
/// True when this build has cuDNN and KAIWU_CUDNN is not "0" (the default):
/// half-precision sessions run their 2-D convs channels-last (NhwcConv), on
/// cuDNN's tensor-core kernels.
bool DnnChannelsLast();
/// A handle bound to `stream` (nullptr without cuDNN); DestroyDnnHandle frees it.
void* CreateDnnHandle(cudaStream_t stream);
void DestroyDnnHandle(void* handle);

#if KAIWU_WITH_CUDNN
/// Throws kRuntime naming `what` and cuDNN's message.
void CheckDnn(cudnnStatus_t status, const char* what);
/// Calls fn with the current device's query handle (no stream work), serialized.
void WithQueryHandle(const std::function<void(cudnnHandle_t)>& fn);
#endif

}  // namespace cuda
}  // namespace kaiwu
