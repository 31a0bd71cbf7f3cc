#include "runtime/server_request.h"

namespace kaiwu {

bool ServerRequest::Wait(double timeout_s) {
  std::unique_lock<std::mutex> lock(mu);
  if (timeout_s < 0) {
    cv.wait(lock, [&] { return finished; });
    return true;
  }
  return cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return finished; });
}

bool ServerRequest::IsDone() {
  std::lock_guard<std::mutex> lock(mu);
  return finished;
}

void FinishRequest(ServerRequest& r) {
  {
    std::lock_guard<std::mutex> lock(r.mu);
    r.finished = true;
  }
  r.cv.notify_all();
  if (r.on_done) {
    auto cb = std::move(r.on_done);
    r.on_done = nullptr;
    cb(r);
  }
}

}  // namespace kaiwu
