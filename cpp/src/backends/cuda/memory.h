// CUDA memory handed across the engine's boundary: page-locked host buffers
// (feeds and results moved with one DMA), the location of a caller's pointer,
// and pools of device blocks holding results for callers (device outputs).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "backends/device.h"

namespace kaiwu {
namespace cuda {

/// Page-locked host memory, usable by every device (portable).
std::shared_ptr<void> AllocPinned(int ordinal, size_t bytes);
/// Device (with its ordinal), page-locked host, or pageable host memory.
DeviceBackend::Location Locate(const void* p);
/// A pool of `bytes`-sized device blocks on device `ordinal`.
std::shared_ptr<DeviceBackend::ResultPool> NewResultPool(int ordinal, size_t bytes);
/// Makes `stream` wait for the readers of `block` (a block of NewResultPool)
/// as they stood when its previous holder let it go.
void WaitForReaders(ResultBlock* block, cudaStream_t stream);

}  // namespace cuda
}  // namespace kaiwu
