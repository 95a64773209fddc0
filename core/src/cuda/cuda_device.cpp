// The CUDA device: the device seam over the CUDA runtime. Device memory is stream-ordered
// (cudaMallocAsync from the device's default memory pool), every call is checked, and allocation
// failures raise memory_error exactly like the host device's budget.
#include <cuda_runtime_api.h>

#include <atomic>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "../stream_failures.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/byte_accounting.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"

namespace zoe {
namespace {

// A failing CUDA call is the device's or the driver's failure (or a size it refused), not a broken
// invariant of zoe: like an OS call's io_error it carries no file:line, which goes to the debug
// log (see check.hpp). The call named in the message already says which one failed.
[[noreturn]] void throw_cuda(cudaError_t e, const std::string& what, std::string_view where) {
  (void)cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  std::string message = str("CUDA: ", what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
  if (e == cudaErrorMemoryAllocation) detail::raise_checked<memory_error>(std::move(message), where);
  detail::raise_checked<device_error>(std::move(message), where);
}

#define ZOE_CUDA_CHECK(call, ...)                                       \
  do {                                                                  \
    const cudaError_t zoe_cuda_status_ = (call);                        \
    if (zoe_cuda_status_ != cudaSuccess) [[unlikely]] {                 \
      throw_cuda(zoe_cuda_status_, ::zoe::str(__VA_ARGS__), ZOE_WHERE); \
    }                                                                   \
  } while (0)

// For noexcept paths (frees, destroys): log instead of throwing.
#define ZOE_CUDA_LOG(call, ...)                                                             \
  do {                                                                                      \
    const cudaError_t zoe_cuda_status_ = (call);                                            \
    if (zoe_cuda_status_ != cudaSuccess) {                                                  \
      ::zoe::log::error("CUDA: ", __VA_ARGS__, ": ", cudaGetErrorString(zoe_cuda_status_)); \
    }                                                                                       \
  } while (0)

cudaStream_t native_stream(stream_view s) noexcept { return static_cast<cudaStream_t>(s.native()); }

cudaEvent_t native_event(const device_event& e) {
  ZOE_EXPECTS(e.valid(), "cuda device: the event is empty (default-constructed or moved from)");
  return static_cast<cudaEvent_t>(e.native());
}

cudaMemcpyKind native_kind(copy_kind k) noexcept {
  switch (k) {
    case copy_kind::host_to_device: return cudaMemcpyHostToDevice;
    case copy_kind::device_to_host: return cudaMemcpyDeviceToHost;
    case copy_kind::device_to_device: return cudaMemcpyDeviceToDevice;
  }
  return cudaMemcpyDefault;
}

// cudaLaunchHostFunc passes one pointer: the task, and where its failure goes, travel on the heap
// and are freed by the call.
struct host_task {
  std::function<void()> run;
  detail::stream_failures* failures;
  const void* stream;
};

// A host function cannot report into its stream: a failure is kept beside it for the stream's
// next synchronize(), which throws it as a device_error.
void CUDART_CB run_host_task(void* user) noexcept {
  const std::unique_ptr<host_task> task(static_cast<host_task*>(user));
  try {
    task->run();
  } catch (...) {
    task->failures->record(task->stream, std::current_exception());
  }
}

class cuda_device final : public device {
 public:
  explicit cuda_device(int ordinal) : ordinal_(ordinal) {
    ZOE_CUDA_CHECK(cudaSetDevice(ordinal), "cudaSetDevice(", ordinal, ")");
    cudaDeviceProp prop{};
    ZOE_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal), "cudaGetDeviceProperties(", ordinal, ")");
    name_ = str("cuda:", ordinal, " ", prop.name);
    char bus[32] = {};
    ZOE_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal), "cudaDeviceGetPCIBusId(", ordinal, ")");
    bus_id_ = bus;
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    ZOE_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo on ", name_);
    budget_ = total_bytes;
  }

  // Host tasks still queued point at failures_: they must have run before it goes.
  // The destroying thread may have another GPU current: select this one first.
  ~cuda_device() override {
    ZOE_CUDA_LOG(cudaSetDevice(ordinal_), "cudaSetDevice on destroying ", name_);
    ZOE_CUDA_LOG(cudaDeviceSynchronize(), "cudaDeviceSynchronize on destroying ", name_);
  }
  cuda_device(const cuda_device&) = delete;
  cuda_device& operator=(const cuda_device&) = delete;

  device_kind kind() const noexcept override { return device_kind::cuda; }
  std::string name() const override { return name_; }
  std::optional<std::string> pci_bus_id() const override { return bus_id_; }

  void* allocate(std::size_t bytes, stream_view stream) override {
    if (bytes == 0) return nullptr;
    select();
    void* p = nullptr;
    const cudaError_t e = cudaMallocAsync(&p, bytes, native_stream(stream));
    if (e == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw memory_error(str(name_, " out of memory: cannot allocate ", format_bytes(bytes), " with ",
                             format_bytes(current_.load()), " allocated by zoe of ", format_bytes(budget_)));
    }
    ZOE_CUDA_CHECK(e, "cudaMallocAsync(", format_bytes(bytes), ") on ", name_);
    detail::raise_peak(peak_, current_ += bytes);
    return p;
  }

  void deallocate(void* p, std::size_t bytes, stream_view stream) noexcept override {
    if (p == nullptr) return;
    if (stream.is_default()) {
      ZOE_CUDA_LOG(cudaFree(p), "cudaFree on ", name_);  // synchronous, like the host device
    } else {
      ZOE_CUDA_LOG(cudaFreeAsync(p, native_stream(stream)), "cudaFreeAsync on ", name_);
    }
    current_ -= bytes;
  }

  device_usage usage() const noexcept override { return {current_.load(), peak_.load(), budget_}; }

  bool register_host(void* p, std::size_t bytes) override {
    ZOE_EXPECTS(p != nullptr && bytes > 0, "cuda device: register_host needs memory, got ", p, " and ", bytes,
                " bytes");
    ZOE_CUDA_CHECK(cudaHostRegister(p, bytes, cudaHostRegisterPortable), "cudaHostRegister(", format_bytes(bytes), ")");
    return true;
  }

  void unregister_host(void* p, std::size_t /*bytes*/) noexcept override {
    if (p != nullptr) ZOE_CUDA_LOG(cudaHostUnregister(p), "cudaHostUnregister");
  }

  device_stream create_stream() override {
    select();
    cudaStream_t s = nullptr;
    ZOE_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate on ", name_);
    return {*this, s};
  }

  device_event create_event() override {
    select();
    cudaEvent_t e = nullptr;
    ZOE_CUDA_CHECK(cudaEventCreate(&e), "cudaEventCreate on ", name_);
    return {*this, e};
  }

  void record(const device_event& event, stream_view stream) override {
    ZOE_CUDA_CHECK(cudaEventRecord(native_event(event), native_stream(stream)), "cudaEventRecord");
  }

  bool query(const device_event& event) override {
    const cudaError_t e = cudaEventQuery(native_event(event));
    if (e == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    ZOE_CUDA_CHECK(e, "cudaEventQuery");
    return true;
  }

  void wait(stream_view stream, const device_event& event) override {
    ZOE_CUDA_CHECK(cudaStreamWaitEvent(native_stream(stream), native_event(event), 0), "cudaStreamWaitEvent");
  }

  void synchronize(const device_event& event) override {
    ZOE_CUDA_CHECK(cudaEventSynchronize(native_event(event)), "cudaEventSynchronize");
  }

  float elapsed_ms(const device_event& start, const device_event& end) override {
    float ms = 0;
    const cudaError_t e = cudaEventElapsedTime(&ms, native_event(start), native_event(end));
    if (e == cudaErrorNotReady || e == cudaErrorInvalidResourceHandle) {
      (void)cudaGetLastError();
      throw usage_error(str("cuda device: elapsed_ms needs two recorded, completed events: ", cudaGetErrorString(e)));
    }
    ZOE_CUDA_CHECK(e, "cudaEventElapsedTime");
    return ms;
  }

  void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind, stream_view stream) override {
    if (bytes == 0) return;
    ZOE_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, native_kind(kind), native_stream(stream)), "cudaMemcpyAsync(",
                   format_bytes(bytes), ") on ", name_);
  }

  void memset_async(void* dst, int value, std::size_t bytes, stream_view stream) override {
    if (bytes == 0) return;
    ZOE_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, native_stream(stream)), "cudaMemsetAsync(", format_bytes(bytes),
                   ") on ", name_);
  }

  void launch_host(stream_view stream, std::function<void()> task) override {
    ZOE_EXPECTS(static_cast<bool>(task), "cuda device: launch_host of an empty task");
    auto heap = std::make_unique<host_task>(host_task{std::move(task), &failures_, stream.native()});
    ZOE_CUDA_CHECK(cudaLaunchHostFunc(native_stream(stream), run_host_task, heap.get()), "cudaLaunchHostFunc");
    (void)heap.release();  // run_host_task owns it now
  }

  void synchronize(stream_view stream) override {
    ZOE_CUDA_CHECK(cudaStreamSynchronize(native_stream(stream)), "cudaStreamSynchronize on ", name_);
    failures_.rethrow(stream.native(), name_);
  }

  void synchronize() override {
    select();
    ZOE_CUDA_CHECK(cudaDeviceSynchronize(), "cudaDeviceSynchronize on ", name_);
    failures_.rethrow_any(name_);
  }

 protected:
  void destroy_stream(void* native) noexcept override {
    // cudaStreamDestroy returns at once; device_stream promises to wait for the queued work, and a
    // host task still queued may yet record a failure under this stream's handle.
    // Forget before destroying: a stream created next may get the same handle, and must not
    // inherit this one's failure.
    ZOE_CUDA_LOG(cudaStreamSynchronize(static_cast<cudaStream_t>(native)), "cudaStreamSynchronize before destroy");
    failures_.forget(native, name_);
    ZOE_CUDA_LOG(cudaStreamDestroy(static_cast<cudaStream_t>(native)), "cudaStreamDestroy");
  }
  void destroy_event(void* native) noexcept override {
    ZOE_CUDA_LOG(cudaEventDestroy(static_cast<cudaEvent_t>(native)), "cudaEventDestroy");
  }

 private:
  // The runtime's current device is per thread; every entry point that creates or allocates
  // sets it so callers on any thread get this device.
  void select() const { ZOE_CUDA_CHECK(cudaSetDevice(ordinal_), "cudaSetDevice(", ordinal_, ")"); }

  int ordinal_;
  std::string name_;
  std::string bus_id_;
  std::uint64_t budget_ = 0;
  std::atomic<std::uint64_t> current_{0};
  std::atomic<std::uint64_t> peak_{0};
  detail::stream_failures failures_;
};

}  // namespace

std::unique_ptr<device> make_cuda_device(int ordinal) { return std::make_unique<cuda_device>(ordinal); }

}  // namespace zoe
