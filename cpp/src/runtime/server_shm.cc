#include "runtime/server_shm.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <cstdlib>
#include <fstream>

namespace kaiwu {

using namespace shm;

namespace {

struct Header {
  uint64_t magic;
  uint32_t max_clients, max_rows;
  uint64_t slot_bytes, slots_offset, total_bytes;
  int32_t server_pid;
  std::atomic<uint32_t> doorbell;
  std::atomic<uint32_t> closed;
  uint32_t desc_len;
  char desc[16384];
};

struct SlotHeader {
  std::atomic<uint32_t> word;  // (generation << 8) | phase
  std::atomic<int32_t> pid;
  std::atomic<int64_t> heartbeat_ns;
  uint32_t rows;
  int32_t err_code;
  uint32_t has_done;
  char version[128];
  char error[768];
};
static_assert(sizeof(SlotHeader) <= 1024, "slot header");
constexpr size_t kSlotHeader = 1024;
constexpr uint32_t kLeaving = 5;

constexpr uint32_t PhaseOf(uint32_t w) { return w & 0xFF; }
constexpr uint32_t GenOf(uint32_t w) { return w >> 8; }
constexpr uint32_t Word(uint32_t gen, uint32_t phase) { return ((gen & 0xFFFFFF) << 8) | phase; }

size_t Align(size_t x) { return (x + 63) & ~size_t(63); }

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

void FutexWait(std::atomic<uint32_t>* addr, uint32_t val, int64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1000000000), static_cast<long>(timeout_ns % 1000000000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAIT, val, &ts, nullptr, 0);
}
void FutexWake(std::atomic<uint32_t>* addr, int n) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), FUTEX_WAKE, n, nullptr, nullptr, 0);
}

bool ProcessAlive(int32_t pid) {
  if (pid <= 0) return false;
  if (kill(pid, 0) == -1 && errno == ESRCH) return false;
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s;
  if (f && std::getline(f, s)) {  // a killed child not yet waited for is a zombie
    auto p = s.rfind(')');
    if (p != std::string::npos && p + 2 < s.size() && (s[p + 2] == 'Z' || s[p + 2] == 'X'))
      return false;
  }
  return true;
}

std::string ShmName(const std::string& name) { return name.empty() || name[0] != '/' ? "/" + name : name; }

int64_t ActorId(int slot, uint32_t gen) {
  return (int64_t(1) << 62) | (int64_t(slot) << 24) | int64_t(gen & 0xFFFFFF);
}

// Text description of the slot layout: one line per array,
// "in|out dtype axis row_bytes offset ndim d0 d1 ... name". (No iostreams: they
// are not needed, and number formatting through a locale is one less thing to go wrong.)
std::string Describe(const std::vector<Field>& ins, const std::vector<Field>& outs) {
  std::string s;
  auto put = [&](const char* kind, const Field& f) {
    s += kind;
    for (int64_t v : {int64_t(f.dtype), int64_t(f.axis), int64_t(f.row_bytes), int64_t(f.offset),
                      int64_t(f.dims.size())})
      s += ' ' + std::to_string(v);
    for (auto d : f.dims) s += ' ' + std::to_string(d);
    s += ' ' + f.name + '\n';
  };
  for (const auto& f : ins) put("in", f);
  for (const auto& f : outs) put("out", f);
  return s;
}

void Parse(const std::string& desc, std::vector<Field>* ins, std::vector<Field>* outs) {
  size_t pos = 0;
  while (pos < desc.size()) {
    size_t end = desc.find('\n', pos);
    if (end == std::string::npos) end = desc.size();
    std::string line = desc.substr(pos, end - pos);
    pos = end + 1;
    const char* p = line.c_str();
    char* q = nullptr;
    const bool is_in = line.rfind("in ", 0) == 0;
    p += is_in ? 2 : 3;
    auto next = [&]() {
      int64_t v = std::strtoll(p, &q, 10);
      p = q;
      return v;
    };
    Field f;
    f.dtype = static_cast<DType>(next());
    f.axis = static_cast<int>(next());
    f.row_bytes = static_cast<size_t>(next());
    f.offset = static_cast<size_t>(next());
    int64_t nd = next();
    for (int64_t i = 0; i < nd; ++i) f.dims.push_back(next());
    if (*p == ' ') ++p;
    f.name = p;
    (is_in ? ins : outs)->push_back(f);
  }
}

}  // namespace

// ------------------------------------------------------------------ server

ShmServer::ShmServer(std::shared_ptr<InferenceServer> server, const std::string& name,
                     int max_clients, int max_rows, double client_timeout_s)
    : server_(std::move(server)), name_(ShmName(name)), max_clients_(max_clients),
      max_rows_(max_rows), timeout_s_(client_timeout_s) {
  KAIWU_CHECK(max_clients >= 1 && max_clients < (1 << 20), StatusCode::kInput,
              "max_clients must be in [1, 2^20)");
  KAIWU_CHECK(max_rows >= 1 && max_rows <= server_->options().max_batch, StatusCode::kInput,
              "max_rows must be in [1, max_batch]");
  std::vector<TensorView> at1;
  std::vector<int> axes = server_->OutputLayout(&at1);
  size_t off = Align(kSlotHeader + max_rows);
  for (const auto& io : server_->feed_inputs()) {
    Field f;
    f.name = io.name;
    f.dtype = io.dtype;
    f.axis = 0;
    f.dims = io.dims;
    f.dims[0] = 1;
    f.row_bytes = NumElements(f.dims) * DTypeSize(io.dtype);
    f.offset = off;
    off = Align(off + f.row_bytes * max_rows);
    ins_.push_back(f);
  }
  for (size_t k = 0; k < at1.size(); ++k) {
    Field f;
    f.name = server_->outputs()[k].name;
    f.dtype = at1[k].dtype;
    f.axis = axes[k];
    f.dims = at1[k].shape;
    f.row_bytes = NumElements(f.dims) * DTypeSize(f.dtype);
    f.offset = off;
    off = Align(off + f.row_bytes * (f.axis < 0 ? 1 : max_rows));
    outs_.push_back(f);
  }
  slot_bytes_ = Align(off);
  const size_t slots_offset = Align(sizeof(Header));
  total_bytes_ = slots_offset + slot_bytes_ * max_clients;
  std::string desc = Describe(ins_, outs_);
  KAIWU_CHECK(desc.size() < sizeof(Header::desc), StatusCode::kInput,
              "the model has too many inputs/outputs for a shared-memory segment");

  int fd = shm_open(name_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  KAIWU_CHECK(fd >= 0, StatusCode::kInput, "cannot create shared memory '", name_,
              "': ", std::strerror(errno));
  if (ftruncate(fd, static_cast<off_t>(total_bytes_)) != 0) {
    int e = errno;
    close(fd);
    shm_unlink(name_.c_str());
    Fail(StatusCode::kInput, "cannot size shared memory '", name_, "': ", std::strerror(e));
  }
  void* p = mmap(nullptr, total_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name_.c_str());
    Fail(StatusCode::kInput, "cannot map shared memory '", name_, "'");
  }
  base_ = static_cast<char*>(p);
  auto* h = new (base_) Header();
  h->max_clients = max_clients;
  h->max_rows = max_rows;
  h->slot_bytes = slot_bytes_;
  h->slots_offset = slots_offset;
  h->total_bytes = total_bytes_;
  h->server_pid = getpid();
  h->doorbell.store(0);
  h->closed.store(0);
  h->desc_len = static_cast<uint32_t>(desc.size());
  std::memcpy(h->desc, desc.data(), desc.size());
  for (int i = 0; i < max_clients; ++i) {
    auto* s = new (Slot(i)) SlotHeader();
    s->word.store(Word(0, kFree));
    s->pid.store(0);
    s->heartbeat_ns.store(NowNs());
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
  h->magic = kMagic;
  listener_ = std::thread([this] { Listen(); });
}

ShmServer::~ShmServer() { Close(); }

char* ShmServer::Slot(int i) const {
  auto* h = reinterpret_cast<Header*>(base_);
  return base_ + h->slots_offset + static_cast<size_t>(i) * slot_bytes_;
}

int ShmServer::clients() const {
  if (!base_) return 0;
  int n = 0;
  for (int i = 0; i < max_clients_; ++i)
    if (PhaseOf(reinterpret_cast<SlotHeader*>(Slot(i))->word.load()) != kFree) ++n;
  return n;
}

void ShmServer::Listen() {
  auto* h = reinterpret_cast<Header*>(base_);
  int64_t last_reap = NowNs();
  while (!stop_) {
    uint32_t bell = h->doorbell.load();
    for (int i = 0; i < max_clients_; ++i) {
      uint32_t ph = PhaseOf(reinterpret_cast<SlotHeader*>(Slot(i))->word.load());
      if (ph == kRequest || ph == kLeaving) Handle(i);
    }
    if (NowNs() - last_reap > 100000000) {
      Reap();
      last_reap = NowNs();
    }
    FutexWait(&h->doorbell, bell, 50000000);
  }
}

void ShmServer::Reap() {
  const int64_t now = NowNs();
  for (int i = 0; i < max_clients_; ++i) {
    auto* s = reinterpret_cast<SlotHeader*>(Slot(i));
    uint32_t w = s->word.load();
    uint32_t ph = PhaseOf(w);
    if (ph != kIdle && ph != kResponse) continue;  // busy slots are reaped once answered
    int32_t pid = s->pid.load();
    bool silent = timeout_s_ > 0 && now - s->heartbeat_ns.load() > int64_t(timeout_s_ * 1e9);
    bool dead = pid > 0 && !ProcessAlive(pid);
    if (pid == 0 && !silent) continue;  // a client is claiming it
    if (!dead && !silent) continue;
    s->heartbeat_ns.store(now);
    s->pid.store(0);
    if (s->word.compare_exchange_strong(w, Word(GenOf(w) + 1, kFree))) {
      server_->Release(ActorId(i, GenOf(w)));
      FutexWake(&s->word, INT_MAX);
    }
  }
}

void ShmServer::Handle(int i) {
  auto* s = reinterpret_cast<SlotHeader*>(Slot(i));
  uint32_t w = s->word.load();
  const uint32_t gen = GenOf(w);
  if (PhaseOf(w) == kLeaving) {
    s->pid.store(0);
    s->heartbeat_ns.store(NowNs());
    if (s->word.compare_exchange_strong(w, Word(gen + 1, kFree))) server_->Release(ActorId(i, gen));
    return;
  }
  if (!s->word.compare_exchange_strong(w, Word(gen, kBusy))) return;
  auto reply_error = [this, i, gen](int32_t code, const std::string& msg) {
    auto* s = reinterpret_cast<SlotHeader*>(Slot(i));
    s->err_code = code;
    size_t n = std::min(msg.size(), sizeof(s->error) - 1);
    std::memcpy(s->error, msg.data(), n);
    s->error[n] = 0;
    s->word.store(Word(gen, kResponse));
    FutexWake(&s->word, INT_MAX);
  };
  const int64_t rows = s->rows;
  if (rows < 1 || rows > max_rows_) {
    reply_error(int32_t(StatusCode::kInput), "a request must have 1.." + std::to_string(max_rows_) +
                                                 " rows (the segment's max_rows), got " + std::to_string(rows));
    return;
  }
  auto req = std::make_shared<ServerRequest>();
  req->actor = ActorId(i, gen);
  char* slot = Slot(i);
  for (const auto& f : ins_) {
    TensorView v{f.dtype, f.dims, slot + f.offset};
    v.shape[0] = rows;
    req->feeds.push_back(v);
  }
  if (s->has_done) req->done.assign(slot + kSlotHeader, slot + kSlotHeader + rows);
  s->version[sizeof(s->version) - 1] = 0;
  req->version = s->version;
  inflight_.fetch_add(1);
  req->on_done = [this, i, gen, reply_error](ServerRequest& r) {
    if (r.error) {
      try {
        std::rethrow_exception(r.error);
      } catch (const ServerError& e) {
        reply_error(e.kind(), e.what());
      } catch (const Error& e) {
        reply_error(int32_t(e.code()), e.what());
      } catch (const std::exception& e) {
        reply_error(int32_t(StatusCode::kInternal), e.what());
      }
    } else {
      char* slot = Slot(i);
      for (size_t k = 0; k < outs_.size() && k < r.outputs.size(); ++k)
        std::memcpy(slot + outs_[k].offset, r.outputs[k].data, r.outputs[k].bytes());
      reply_error(0, "");
    }
    inflight_.fetch_sub(1);
  };
  try {
    server_->Submit(req);
  } catch (const ServerError& e) {
    inflight_.fetch_sub(1);
    reply_error(e.kind(), e.what());
  } catch (const Error& e) {
    inflight_.fetch_sub(1);
    reply_error(int32_t(e.code()), e.what());
  } catch (const std::exception& e) {
    inflight_.fetch_sub(1);
    reply_error(int32_t(StatusCode::kInternal), e.what());
  }
}

void ShmServer::Close() {
  if (!base_) return;
  auto* h = reinterpret_cast<Header*>(base_);
  h->closed.store(1);
  stop_ = true;
  h->doorbell.fetch_add(1);
  FutexWake(&h->doorbell, INT_MAX);
  if (listener_.joinable()) listener_.join();
  // Requests still in the server write into the slots when they finish.
  while (inflight_.load() > 0) usleep(1000);
  for (int i = 0; i < max_clients_; ++i) {
    auto* s = reinterpret_cast<SlotHeader*>(Slot(i));
    FutexWake(&s->word, INT_MAX);
  }
  munmap(base_, total_bytes_);
  base_ = nullptr;
  shm_unlink(name_.c_str());
}

// ------------------------------------------------------------------ client

ShmClient::ShmClient(const std::string& name, double timeout_s)
    : name_(ShmName(name)), timeout_s_(timeout_s) {
  int fd = -1;
  const int64_t deadline = NowNs() + int64_t(timeout_s * 1e9);
  for (;;) {  // the server may still be starting
    fd = shm_open(name_.c_str(), O_RDWR, 0);
    if (fd >= 0 || NowNs() > deadline) break;
    usleep(10000);
  }
  KAIWU_CHECK(fd >= 0, StatusCode::kInput, "no inference server at shared memory '", name_, "'");
  struct stat st;
  size_t size = 0;
  for (;;) {
    fstat(fd, &st);
    size = static_cast<size_t>(st.st_size);
    if (size >= sizeof(Header)) {
      void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        auto* h = static_cast<Header*>(p);
        if (h->magic == kMagic && h->total_bytes == size) {
          base_ = static_cast<char*>(p);
          break;
        }
        munmap(p, size);
      }
    }
    if (NowNs() > deadline) break;
    usleep(10000);
  }
  close(fd);
  KAIWU_CHECK(base_, StatusCode::kInput, "shared memory '", name_, "' is not an inference server");
  auto* h = reinterpret_cast<Header*>(base_);
  total_bytes_ = size;
  slot_bytes_ = h->slot_bytes;
  max_rows_ = h->max_rows;
  max_clients_ = h->max_clients;
  Parse(std::string(h->desc, h->desc_len), &ins_, &outs_);
  KAIWU_CHECK(!h->closed.load(), StatusCode::kInput, "the inference server at '", name_, "' is closed");
  for (;;) {  // slots being given back or reclaimed free up within ~0.1 s
    for (int i = 0; i < max_clients_ && slot_ < 0; ++i) {
      auto* s = reinterpret_cast<SlotHeader*>(base_ + h->slots_offset + size_t(i) * slot_bytes_);
      uint32_t w = s->word.load();
      if (PhaseOf(w) != kFree) continue;
      s->heartbeat_ns.store(NowNs());  // before the claim: a fresh slot is not "silent"
      if (s->word.compare_exchange_strong(w, Word(GenOf(w), kIdle))) {
        s->pid.store(getpid());
        slot_ = i;
        gen_ = GenOf(w);
      }
    }
    if (slot_ >= 0 || NowNs() > deadline || h->closed.load()) break;
    usleep(5000);
  }
  if (slot_ < 0) {
    munmap(base_, total_bytes_);
    base_ = nullptr;
    Fail(StatusCode::kInput, "the inference server at '", name_, "' has no free client slot (",
         max_clients_, " in use)");
  }
}

ShmClient::~ShmClient() { Close(); }

char* ShmClient::SlotPtr() const {
  auto* h = reinterpret_cast<Header*>(base_);
  return base_ + h->slots_offset + size_t(slot_) * slot_bytes_;
}

void* ShmClient::InputData(size_t i) const { return base_ ? SlotPtr() + ins_.at(i).offset : nullptr; }

void ShmClient::Heartbeat() {
  if (base_) reinterpret_cast<SlotHeader*>(SlotPtr())->heartbeat_ns.store(NowNs());
}

std::vector<TensorView> ShmClient::Step(int64_t rows, const std::vector<uint8_t>& done,
                                        const std::string& version) {
  if (!base_) throw ServerError(ServerError::kClosed, "this client is closed");
  auto* h = reinterpret_cast<Header*>(base_);
  auto* s = reinterpret_cast<SlotHeader*>(SlotPtr());
  if (h->closed.load()) throw ServerError(ServerError::kClosed, "the inference server is closed");
  KAIWU_CHECK(rows >= 1 && rows <= max_rows_, StatusCode::kInput, "a request must have 1..",
              max_rows_, " rows (the server's max_rows for shared-memory clients), got ", rows);
  KAIWU_CHECK(done.size() <= 1 || int64_t(done.size()) == rows, StatusCode::kInput,
              "done must be one flag or one per row");
  KAIWU_CHECK(version.size() < sizeof(s->version), StatusCode::kInput, "version tag too long");
  uint32_t w = s->word.load();
  if (GenOf(w) != (gen_ & 0xFFFFFF) || (PhaseOf(w) != kIdle && PhaseOf(w) != kResponse))
    throw ServerError(ServerError::kClosed,
                      "the server reclaimed this client's slot (it was silent longer than the client timeout)");
  s->rows = static_cast<uint32_t>(rows);
  s->has_done = 0;
  char* slot = SlotPtr();
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t d = done.empty() ? 0 : done[done.size() == 1 ? 0 : r];
    slot[kSlotHeader + r] = d;
    if (d) s->has_done = 1;
  }
  std::memcpy(s->version, version.c_str(), version.size() + 1);
  s->heartbeat_ns.store(NowNs());
  if (!s->word.compare_exchange_strong(w, Word(gen_, kRequest)))
    throw ServerError(ServerError::kClosed, "the server reclaimed this client's slot");
  h->doorbell.fetch_add(1);
  FutexWake(&h->doorbell, 1);
  for (;;) {
    uint32_t cur = s->word.load();
    if (GenOf(cur) != (gen_ & 0xFFFFFF))
      throw ServerError(ServerError::kClosed, "the server reclaimed this client's slot");
    if (PhaseOf(cur) == kResponse) break;
    if (h->closed.load() || !ProcessAlive(h->server_pid)) {
      uint32_t expect = Word(gen_, kRequest);
      if (s->word.compare_exchange_strong(expect, Word(gen_, kIdle)) || !ProcessAlive(h->server_pid))
        throw ServerError(ServerError::kClosed, "the inference server is closed");
    }
    FutexWait(&s->word, cur, 100000000);
  }
  s->heartbeat_ns.store(NowNs());
  if (s->err_code != 0) {
    std::string msg(s->error);
    if (s->err_code == kErrClosed) throw ServerError(ServerError::kClosed, msg);
    if (s->err_code == kErrQueueFull) throw ServerError(ServerError::kQueueFull, msg);
    throw Error(static_cast<StatusCode>(s->err_code), msg);
  }
  std::vector<TensorView> out;
  for (const auto& f : outs_) {
    TensorView v{f.dtype, f.dims, slot + f.offset};
    if (f.axis >= 0) v.shape[f.axis] = rows;
    out.push_back(v);
  }
  return out;
}

void ShmClient::Close() {
  if (!base_) return;
  auto* h = reinterpret_cast<Header*>(base_);
  auto* s = reinterpret_cast<SlotHeader*>(SlotPtr());
  uint32_t w = s->word.load();
  if (GenOf(w) == (gen_ & 0xFFFFFF) && (PhaseOf(w) == kIdle || PhaseOf(w) == kResponse) &&
      s->word.compare_exchange_strong(w, Word(gen_, kLeaving))) {
    h->doorbell.fetch_add(1);
    FutexWake(&h->doorbell, 1);
  }
  munmap(base_, total_bytes_);
  base_ = nullptr;
}

}  // namespace kaiwu
