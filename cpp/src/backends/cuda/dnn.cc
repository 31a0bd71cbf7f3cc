// cuDNN handles for the CUDA backend (see dnn.h).
#include "backends/cuda/dnn.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

#include "backends/cuda/cuda_kernels.h"

namespace kaiwu {
namespace cuda {

bool DnnEnabled() {
#if KAIWU_WITH_CUDNN
  const char* env = std::getenv("KAIWU_CUDNN");
  return env && std::string(env) == "1";
#else
  return false;
#endif
}

bool DnnChannelsLast() {
#if KAIWU_WITH_CUDNN
  const char* env = std::getenv("KAIWU_CUDNN");
  return !(env && std::string(env) == "0");
#else
  return false;
#endif
}

#if KAIWU_WITH_CUDNN

void CheckDnn(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) Fail(StatusCode::kRuntime, what, ": ", cudnnGetErrorString(status));
}

void* CreateDnnHandle(cudaStream_t stream) {
  cudnnHandle_t h = nullptr;
  CheckDnn(cudnnCreate(&h), "cudnnCreate");
  cudnnStatus_t s = cudnnSetStream(h, stream);
  if (s != CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(h);
    CheckDnn(s, "cudnnSetStream");
  }
  return h;
}

void DestroyDnnHandle(void* handle) {
  if (handle) cudnnDestroy(static_cast<cudnnHandle_t>(handle));
}

void WithQueryHandle(const std::function<void(cudnnHandle_t)>& fn) {
  static std::mutex mu;
  static std::map<int, cudnnHandle_t>* handles = new std::map<int, cudnnHandle_t>();  // process lifetime
  int device = 0;
  CheckCuda(cudaGetDevice(&device), "cudaGetDevice");
  std::lock_guard<std::mutex> lock(mu);
  cudnnHandle_t& h = (*handles)[device];
  if (!h) CheckDnn(cudnnCreate(&h), "cudnnCreate");
  fn(h);
}

#else

void* CreateDnnHandle(cudaStream_t) { return nullptr; }
void DestroyDnnHandle(void*) {}

#endif

}  // namespace cuda
}  // namespace kaiwu
