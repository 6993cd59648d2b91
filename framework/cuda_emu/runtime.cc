// The runtime calls of include/cuda_runtime.h (contract there): host memory, one device, and
// streams that run their work in order on a worker thread each.
//
// Streams: a queue of tasks (kernel grids, copies, cuBLAS and NCCL calls, host functions, event
// records and waits) that its thread runs one after another. An event numbers its records:
// cudaEventRecord queues a task completing record n, cudaStreamWaitEvent queues a task that
// blocks its stream's thread until the record current at the call has completed, whatever later
// records on other streams did (the other streams' threads go on, so a missing dependency lets
// work run early, as on a GPU).
// Copies from pageable (unregistered) host memory are staged when queued and copies into it wait
// for their stream, as the runtime does; pinned (cudaHostAlloc) and device memory are used when
// the task runs. cudaFree and cudaFreeHost first wait for every stream (the runtime's implicit
// device synchronisation).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

namespace shardema::cuda_emu::detail {
namespace {

// A stream's work: tasks run in order on the queue's own thread.
class Queue {
 public:
  Queue() : worker_([this] { Run(); }) {}
  ~Queue() {
    Drain();
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void Push(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> l(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_all();
  }
  void Drain() {
    std::unique_lock<std::mutex> l(mu_);
    idle_cv_.wait(l, [&] { return tasks_.empty() && !busy_; });
  }
  bool Idle() {
    std::lock_guard<std::mutex> l(mu_);
    return tasks_.empty() && !busy_;
  }

 private:
  void Run() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stop_
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      busy_ = true;
      l.unlock();
      task();
      l.lock();
      busy_ = false;
      if (tasks_.empty()) idle_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<std::function<void()>> tasks_;
  bool busy_ = false, stop_ = false;
  std::thread worker_;  // last: starts after the members it uses
};

// Every live stream's queue, for cudaDeviceSynchronize: shared, so that a queue a synchronising
// thread drains outlives its stream's destruction meanwhile. Never destroyed: a destroyed
// stream's releasing thread (cudaStreamDestroy) may still use it while the process exits.
struct Streams {
  std::mutex mu;
  std::set<std::shared_ptr<Queue>> queues;
};
Streams& AllStreams() {
  static Streams* s = new Streams;
  return *s;
}
void AddStream(std::shared_ptr<Queue> q) {
  std::lock_guard<std::mutex> l(AllStreams().mu);
  AllStreams().queues.insert(std::move(q));
}
void RemoveStream(const std::shared_ptr<Queue>& q) {
  std::lock_guard<std::mutex> l(AllStreams().mu);
  AllStreams().queues.erase(q);
}

Queue* DefaultQueue() {
  static Queue* q = [] {
    auto d = std::make_shared<Queue>();  // kept by the set until exit: work may be queued then
    AddStream(d);
    return d.get();
  }();
  return q;
}

void SynchronizeAll() {
  std::vector<std::shared_ptr<Queue>> all;
  {
    std::lock_guard<std::mutex> l(AllStreams().mu);
    all.assign(AllStreams().queues.begin(), AllStreams().queues.end());
  }
  for (const auto& q : all) q->Drain();
}

// An event's records: numbered 1, 2, ... by cudaEventRecord; they complete in their streams'
// orders, so a later record (on another stream) may complete before an earlier one, and a wait
// names the record it waits for.
struct EventState {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0;       // the newest record's number
  std::set<uint64_t> pending;  // records queued, not yet completed
  uint64_t at_record = 0;      // the newest completed record's number, and its time
  std::chrono::steady_clock::time_point at{};
  bool Done(uint64_t n) const { return pending.count(n) == 0; }
  void WaitFor(uint64_t n) {  // until record n has completed
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return Done(n); });
  }
};

}  // namespace
}  // namespace shardema::cuda_emu::detail

struct CUstream_st {
  unsigned flags = 0;
  std::shared_ptr<shardema::cuda_emu::detail::Queue> queue =
      std::make_shared<shardema::cuda_emu::detail::Queue>();
};
struct CUevent_st {
  unsigned flags = 0;
  std::shared_ptr<shardema::cuda_emu::detail::EventState> state =
      std::make_shared<shardema::cuda_emu::detail::EventState>();
};

namespace shardema::cuda_emu::detail {

Queue* QueueOf(cudaStream_t s) { return s != nullptr ? s->queue.get() : DefaultQueue(); }

void Enqueue(cudaStream_t stream, std::function<void()> task) {
  QueueOf(stream)->Push(std::move(task));
}

}  // namespace shardema::cuda_emu::detail

using shardema::cuda_emu::detail::Enqueue;
using shardema::cuda_emu::detail::QueueOf;
using shardema::cuda_emu::detail::SynchronizeAll;

using shardema::cuda_emu::detail::LastError;

namespace {

// Records e as the thread's last error (as the runtime does) and returns it.
cudaError_t Fail(cudaError_t e) {
  LastError() = e;
  return e;
}

thread_local int current_device = 0;

constexpr size_t kDeviceBytes = size_t(141) << 30;
// What a CUDA context holds on a device before any allocation (cudaMemGetInfo counts it in use).
constexpr size_t kContextBytes = size_t(512) << 20;
constexpr int kSms = 132;

// Live allocations by start address: size and memory type.
struct Allocation {
  size_t bytes;
  cudaMemoryType type;
  int device;
};
struct Memory {
  std::mutex mu;
  std::map<uintptr_t, Allocation> allocations;
  size_t device_bytes[64] = {};  // by device
};
Memory& AllMemory() {  // never destroyed, as AllStreams(): a stream's work may run at exit
  static Memory* m = new Memory;
  return *m;
}

// The emulated devices: $SHARDEMA_CUDA_EMU_DEVICES (1 to 64), default 4, as on a 4-GPU node, so
// that tests at up to 4 ranks give each rank its own device.
int DeviceCount() {
  static const int count = [] {
    const char* env = std::getenv("SHARDEMA_CUDA_EMU_DEVICES");
    const int n = env != nullptr ? std::atoi(env) : 4;
    return n < 1 ? 1 : (n > 64 ? 64 : n);
  }();
  return count;
}

cudaError_t Allocate(void** p, size_t bytes, cudaMemoryType type) {
  if (p == nullptr) return Fail(cudaErrorInvalidValue);
  // Exactly `bytes`, so AddressSanitizer reports an access past the end.
  if (posix_memalign(p, 256, bytes > 0 ? bytes : 1) != 0) {
    *p = nullptr;
    return Fail(cudaErrorMemoryAllocation);
  }
  Memory& m = AllMemory();
  std::lock_guard<std::mutex> lock(m.mu);
  m.allocations[reinterpret_cast<uintptr_t>(*p)] = Allocation{bytes, type, current_device};
  if (type == cudaMemoryTypeDevice) m.device_bytes[current_device] += bytes;
  return cudaSuccess;
}

// The allocation holding p (none for pageable memory).
std::optional<Allocation> Holding(const void* p) {
  const auto at = reinterpret_cast<uintptr_t>(p);
  Memory& m = AllMemory();
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.allocations.upper_bound(at);
  if (it == m.allocations.begin()) return std::nullopt;
  --it;
  if (at >= it->first + std::max<size_t>(it->second.bytes, 1)) return std::nullopt;
  return it->second;
}

cudaMemoryType TypeOf(const void* p) {
  const std::optional<Allocation> a = Holding(p);
  return a ? a->type : cudaMemoryTypeUnregistered;
}

cudaError_t Release(void* p) {
  if (p == nullptr) return cudaSuccess;
  {
    Memory& m = AllMemory();
    std::lock_guard<std::mutex> lock(m.mu);
    auto it = m.allocations.find(reinterpret_cast<uintptr_t>(p));
    if (it == m.allocations.end()) return Fail(cudaErrorInvalidValue);
    if (it->second.type == cudaMemoryTypeDevice) {
      m.device_bytes[it->second.device] -= it->second.bytes;
    }
    m.allocations.erase(it);
  }
  std::free(p);
  return cudaSuccess;
}

}  // namespace

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInsufficientDriver: return "insufficient driver";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() {
  const cudaError_t e = LastError();
  LastError() = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError() { return LastError(); }

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return Fail(cudaErrorInvalidValue);
  *count = DeviceCount();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= DeviceCount()) return Fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return Fail(cudaErrorInvalidValue);
  *device = current_device;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  SynchronizeAll();
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (value == nullptr) return Fail(cudaErrorInvalidValue);
  if (device < 0 || device >= DeviceCount()) return Fail(cudaErrorInvalidDevice);
  if (attr != cudaDevAttrMultiProcessorCount) return Fail(cudaErrorInvalidValue);
  *value = kSms;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return Fail(cudaErrorInvalidValue);
  if (device < 0 || device >= DeviceCount()) return Fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof(prop->name), "%s", "NVIDIA H200 (CPU emulation)");
  prop->totalGlobalMem = kDeviceBytes;
  prop->multiProcessorCount = kSms;
  prop->major = 9;
  prop->minor = 0;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return Fail(cudaErrorInvalidValue);
  Memory& m = AllMemory();
  std::lock_guard<std::mutex> lock(m.mu);
  *total_bytes = kDeviceBytes;
  *free_bytes =
      kDeviceBytes - std::min(kContextBytes + m.device_bytes[current_device], kDeviceBytes);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p) {
  if (attr == nullptr) return Fail(cudaErrorInvalidValue);
  *attr = cudaPointerAttributes{cudaMemoryTypeUnregistered, -2, nullptr, const_cast<void*>(p)};
  if (const std::optional<Allocation> a = Holding(p)) {
    attr->type = a->type;
    attr->device = a->device;
    attr->devicePointer = const_cast<void*>(p);
  }
  return cudaSuccess;
}

cudaError_t cudaMalloc(void** p, size_t bytes) { return Allocate(p, bytes, cudaMemoryTypeDevice); }

cudaError_t cudaFree(void* p) {
  SynchronizeAll();
  return Release(p);
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  return Allocate(p, bytes, cudaMemoryTypeHost);
}

cudaError_t cudaFreeHost(void* p) {
  SynchronizeAll();
  return Release(p);
}

struct CUmemPoolHandle_st {};

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  if (pool == nullptr || props == nullptr) return Fail(cudaErrorInvalidValue);
  *pool = new CUmemPoolHandle_st;
  return cudaSuccess;
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  delete pool;
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr, void* value) {
  return pool != nullptr && value != nullptr ? cudaSuccess : Fail(cudaErrorInvalidValue);
}

cudaError_t cudaMallocFromPoolAsync(void** p, size_t bytes, cudaMemPool_t pool, cudaStream_t) {
  if (pool == nullptr) return Fail(cudaErrorInvalidValue);
  return Allocate(p, bytes, cudaMemoryTypeDevice);
}

cudaError_t cudaFreeAsync(void* p, cudaStream_t stream) {
  if (p != nullptr && TypeOf(p) != cudaMemoryTypeDevice) return Fail(cudaErrorInvalidValue);
  Enqueue(stream, [p] { (void)Release(p); });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (p == nullptr) return Fail(cudaErrorInvalidValue);
  Enqueue(stream, [=] { std::memset(p, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind,
                            cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return Fail(cudaErrorInvalidValue);
  if (TypeOf(src) == cudaMemoryTypeUnregistered) {  // pageable: staged now
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                      static_cast<const char*>(src) + bytes);
    Enqueue(stream, [=] { std::memcpy(dst, staged->data(), bytes); });
  } else {
    Enqueue(stream, [=] { std::memmove(dst, src, bytes); });
  }
  if (TypeOf(dst) == cudaMemoryTypeUnregistered) QueueOf(stream)->Drain();  // pageable: waits
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (stream == nullptr) return Fail(cudaErrorInvalidValue);
  *stream = new CUstream_st;
  (*stream)->flags = flags;
  shardema::cuda_emu::detail::AddStream((*stream)->queue);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  // As the runtime: returns at once; the stream's queued work still runs, then it is released.
  // cudaDeviceSynchronize keeps waiting for it until then.
  std::shared_ptr<shardema::cuda_emu::detail::Queue> queue = std::move(stream->queue);
  delete stream;
  std::thread([queue] {
    queue->Drain();
    shardema::cuda_emu::detail::RemoveStream(queue);
  }).detach();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  QueueOf(stream)->Drain();
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  return QueueOf(stream)->Idle() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  auto st = event->state;
  uint64_t want = 0;
  {
    std::lock_guard<std::mutex> l(st->mu);
    want = st->recorded;
  }
  if (want == 0) return cudaSuccess;  // never recorded: nothing to wait for
  Enqueue(stream, [st, want] { st->WaitFor(want); });
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  if (fn == nullptr) return Fail(cudaErrorInvalidValue);
  Enqueue(stream, [fn, data] { fn(data); });
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (event == nullptr) return Fail(cudaErrorInvalidValue);
  *event = new CUevent_st;
  (*event)->flags = flags;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  delete event;  // queued records keep its state alive
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  auto st = event->state;
  uint64_t n = 0;
  {
    std::lock_guard<std::mutex> l(st->mu);
    n = ++st->recorded;
    st->pending.insert(n);
  }
  Enqueue(stream, [st, n] {
    {
      std::lock_guard<std::mutex> l(st->mu);
      st->pending.erase(n);
      if (n > st->at_record) {
        st->at_record = n;
        st->at = std::chrono::steady_clock::now();
      }
    }
    st->cv.notify_all();
  });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  std::lock_guard<std::mutex> l(event->state->mu);
  return event->state->Done(event->state->recorded) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  uint64_t want = 0;
  {
    std::lock_guard<std::mutex> l(event->state->mu);
    want = event->state->recorded;
  }
  event->state->WaitFor(want);
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return Fail(cudaErrorInvalidValue);
  if (start == nullptr || end == nullptr ||
      ((start->flags | end->flags) & cudaEventDisableTiming)) {
    return Fail(cudaErrorInvalidResourceHandle);
  }
  for (cudaEvent_t e : {start, end}) {
    std::lock_guard<std::mutex> l(e->state->mu);
    if (e->state->recorded == 0) return Fail(cudaErrorInvalidResourceHandle);
    if (!e->state->Done(e->state->recorded)) return Fail(cudaErrorNotReady);
  }
  *ms = std::chrono::duration<float, std::milli>(end->state->at - start->state->at).count();
  return cudaSuccess;
}
