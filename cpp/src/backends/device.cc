#include "backends/device.h"

#include <cstdlib>

namespace kaiwu {

#ifdef KAIWU_WITH_CUDA
namespace cuda {
const DeviceBackend* GetBackend(int ordinal);  // cuda/cuda_backend.cc
int DeviceCount();
}  // namespace cuda
#endif

const DeviceBackend* FindDevice(const std::string& name) {
  if (name.empty() || name == "cpu") return nullptr;
  int ordinal = -1;
  if (name == "cuda") {
    ordinal = 0;
  } else if (name.rfind("cuda:", 0) == 0 && name.size() > 5) {
    char* end = nullptr;
    long v = std::strtol(name.c_str() + 5, &end, 10);
    if (*end == '\0' && v >= 0 && v < 1024) ordinal = static_cast<int>(v);
  }
  if (ordinal < 0)
    Fail(StatusCode::kInput, "unknown device '", name, "': expected 'cpu', 'cuda' or 'cuda:N'");
#ifdef KAIWU_WITH_CUDA
  return cuda::GetBackend(ordinal);
#else
  Fail(StatusCode::kUnsupported, "device '", name,
       "': this build of kaiwu_infer has no CUDA backend (build with -DKAIWU_CUDA=ON)");
#endif
}

bool CudaAvailable() {
#ifdef KAIWU_WITH_CUDA
  return cuda::DeviceCount() > 0;
#else
  return false;
#endif
}

}  // namespace kaiwu
