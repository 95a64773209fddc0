#pragma once
// The compute-device seam: device memory, pinned host memory, streams, events, asynchronous
// copies and host tasks, behind one interface with a host implementation (every test runs on it)
// and a CUDA implementation. Nothing here includes CUDA headers: streams cross as stream_view,
// events as device_event owners whose native handle only the device that made them interprets.
//
// Error contract, for every implementation alike:
//   - out of device memory (the budget of the host device, cudaErrorMemoryAllocation) -> memory_error
//   - a failing runtime call, a stream task that threw, a bad handle -> device_error
//   - a caller's mistake (null pointer with nonzero size, an event never recorded) -> usage_error
// A device object is thread-safe: any thread may call any member at any time.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "zoe/core/stream_view.hpp"

namespace zoe {

class device;

enum class device_kind : int { host = 0, cuda = 1 };

/// Direction of an asynchronous copy.
enum class copy_kind : int { host_to_device, device_to_host, device_to_device };

/// Device memory accounting (bytes). `budget_bytes` is the most the device will hand out.
struct device_usage {
  std::uint64_t current_bytes = 0;
  std::uint64_t peak_bytes = 0;
  std::uint64_t budget_bytes = 0;
};

/// Owner of one stream of a device; destroying it waits for the work queued on it. Move-only.
/// A default-constructed device_stream owns nothing.
class device_stream {
 public:
  device_stream() noexcept = default;
  device_stream(device& owner, void* native) noexcept : device_(&owner), native_(native) {}
  ~device_stream();
  device_stream(device_stream&& o) noexcept;
  device_stream& operator=(device_stream&& o) noexcept;
  device_stream(const device_stream&) = delete;
  device_stream& operator=(const device_stream&) = delete;

  /// The non-owning handle to pass to copies, tasks and events.
  [[nodiscard]] stream_view view() const noexcept { return stream_view(native_); }

 private:
  void reset() noexcept;
  device* device_ = nullptr;
  void* native_ = nullptr;
};

/// Owner of one event of a device. Move-only; a default-constructed event owns nothing.
class device_event {
 public:
  device_event() noexcept = default;
  device_event(device& owner, void* native) noexcept : device_(&owner), native_(native) {}
  ~device_event();
  device_event(device_event&& o) noexcept;
  device_event& operator=(device_event&& o) noexcept;
  device_event(const device_event&) = delete;
  device_event& operator=(const device_event&) = delete;

  /// The device-specific handle (cudaEvent_t or the host event object).
  [[nodiscard]] void* native() const noexcept { return native_; }
  [[nodiscard]] bool valid() const noexcept { return native_ != nullptr; }

 private:
  void reset() noexcept;
  device* device_ = nullptr;
  void* native_ = nullptr;
};

/// Owner of one allocation of device memory (device::allocate on the default stream), freed on the
/// default stream when destroyed: the owner must have synchronized the work that uses it by then.
/// Move-only; a default-constructed one, or one of zero bytes, owns nothing (data() is nullptr).
/// Throws memory_error as device::allocate does.
class device_allocation {
 public:
  device_allocation() noexcept = default;
  device_allocation(device& owner, std::size_t bytes);
  ~device_allocation();
  device_allocation(device_allocation&& o) noexcept;
  device_allocation& operator=(device_allocation&& o) noexcept;
  device_allocation(const device_allocation&) = delete;
  device_allocation& operator=(const device_allocation&) = delete;

  [[nodiscard]] std::byte* data() const noexcept { return static_cast<std::byte*>(data_); }
  /// The memory as `T*` (a kernel's operand type).
  template <class T>
  [[nodiscard]] T* as() const noexcept {
    return static_cast<T*>(data_);
  }
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  [[nodiscard]] std::span<std::byte> span() const noexcept { return {data(), bytes_}; }

 private:
  void reset() noexcept;
  device* device_ = nullptr;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

/// One compute device. Obtain one with select_device() (or make_host_device() in tests).
class device {
 public:
  device() = default;
  virtual ~device() = default;
  device(const device&) = delete;
  device& operator=(const device&) = delete;

  [[nodiscard]] virtual device_kind kind() const noexcept = 0;
  /// A readable description ("host device (budget 12 GiB)", "cuda:0 NVIDIA H100 ...").
  [[nodiscard]] virtual std::string name() const = 0;
  /// PCI bus id ("0000:3b:00.0") of a real device, so memory can be placed on its NUMA node;
  /// nullopt for the host device.
  [[nodiscard]] virtual std::optional<std::string> pci_bus_id() const = 0;

  // ---- device memory --------------------------------------------------------------------------
  /// Allocates `bytes` of device memory, 256-byte aligned, usable by work queued on `stream` (and on
  /// any stream after synchronization). Zero bytes returns nullptr. Throws memory_error naming the
  /// size, the usage and the budget when it does not fit.
  [[nodiscard]] virtual void* allocate(std::size_t bytes, stream_view stream = {}) = 0;
  /// Frees memory from allocate(). On the default stream the memory is freed at once (the caller
  /// guarantees no work still uses it); on another stream, after the work queued on it so far.
  /// `bytes` must be the size allocated. nullptr is ignored. Never throws (errors are logged).
  virtual void deallocate(void* p, std::size_t bytes, stream_view stream = {}) noexcept = 0;
  /// Current and peak device memory in use, and the budget. Never throws.
  [[nodiscard]] virtual device_usage usage() const noexcept = 0;

  // ---- pinned host memory (allocators/pinned_host_resource maps it and registers it here) ------
  /// Locks (host) or registers with the driver (CUDA) existing page-aligned host memory so the
  /// device copies it at full speed. Returns false when the host device fell back to unlocked
  /// memory (one warning naming RLIMIT_MEMLOCK). Throws device_error when the driver refuses.
  virtual bool register_host(void* p, std::size_t bytes) = 0;
  /// Undoes register_host(). Never throws.
  virtual void unregister_host(void* p, std::size_t bytes) noexcept = 0;

  // ---- streams and events ---------------------------------------------------------------------
  /// A new stream; work on one stream runs in the order queued. Throws device_error.
  [[nodiscard]] virtual device_stream create_stream() = 0;
  /// A new event (timing enabled). Throws device_error.
  [[nodiscard]] virtual device_event create_event() = 0;
  /// Captures the work queued on `stream` so far; the event completes when that work has.
  virtual void record(const device_event& event, stream_view stream) = 0;
  /// True when the work captured by the latest record() has completed (or nothing was recorded).
  [[nodiscard]] virtual bool query(const device_event& event) = 0;
  /// Makes work queued on `stream` after this call wait for the latest record() of `event`.
  /// Returns at once; a never-recorded event imposes no wait.
  virtual void wait(stream_view stream, const device_event& event) = 0;
  /// Blocks the calling thread until the event's latest record() has completed.
  virtual void synchronize(const device_event& event) = 0;
  /// Milliseconds between two completed events. Throws usage_error if either was never recorded
  /// or has not completed.
  [[nodiscard]] virtual float elapsed_ms(const device_event& start, const device_event& end) = 0;

  // ---- work -----------------------------------------------------------------------------------
  /// Copies `bytes` from `src` to `dst` on `stream`; the ranges must not overlap.
  virtual void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind, stream_view stream) = 0;
  /// Sets `bytes` of device memory at `dst` to `value` on `stream`.
  virtual void memset_async(void* dst, int value, std::size_t bytes, stream_view stream) = 0;
  /// Runs `task` on the host, in order with the work on `stream` (how CPU kernels run in stream
  /// order). The task must not call into this device. If it throws, the work after it still runs
  /// and the exception is reported once, as a device_error carrying its message, by the next
  /// synchronize() of that stream or of the whole device (on every device; destroying the stream
  /// first logs it instead).
  virtual void launch_host(stream_view stream, std::function<void()> task) = 0;
  /// Blocks until all work queued on `stream` has completed; rethrows a failure of that work.
  virtual void synchronize(stream_view stream) = 0;
  /// Blocks until all work on every stream of the device has completed; rethrows a failure of a
  /// host task on any stream (the first; others are logged). Safe while other threads create and
  /// destroy streams.
  virtual void synchronize() = 0;

 protected:
  friend class device_stream;
  friend class device_event;
  virtual void destroy_stream(void* native) noexcept = 0;
  virtual void destroy_event(void* native) noexcept = 0;
};

/// How to pick and configure a device.
struct device_options {
  /// "auto", "host" or "cuda"; empty means the environment variable ZOE_DEVICE, else "auto".
  /// "auto" takes CUDA only when probe_gpu() reports a usable GPU.
  std::string kind;
  /// Budget of the host device in bytes (config key zoe.device.budget_bytes). Unset means the
  /// environment variable ZOE_DEVICE_BUDGET, else half of physical memory.
  std::optional<std::uint64_t> budget_bytes;
  /// CUDA device ordinal.
  int cuda_ordinal = 0;
};

/// The device chosen and why ("ZOE_DEVICE=host", "auto: no CUDA driver on this machine").
struct device_selection {
  std::unique_ptr<device> dev;
  std::string reason;
};

/// Opens the device the options (or ZOE_DEVICE) ask for and logs which it took at info level.
/// Throws config_error for an unknown kind, device_error when "cuda" is asked for and unusable.
[[nodiscard]] device_selection select_device(const device_options& options = {});

/// The host device with `budget_bytes` (resolved as device_options::budget_bytes when unset).
/// Throws config_error when ZOE_DEVICE_BUDGET is malformed or zero.
[[nodiscard]] std::unique_ptr<device> make_host_device(std::optional<std::uint64_t> budget_bytes = {});

/// The CUDA device `ordinal`. Throws device_error when zoe was built without CUDA or the device
/// cannot be opened.
[[nodiscard]] std::unique_ptr<device> make_cuda_device(int ordinal = 0);

/// The budget make_host_device() would use for `configured` (see device_options::budget_bytes).
[[nodiscard]] std::uint64_t resolve_host_budget(std::optional<std::uint64_t> configured);

}  // namespace zoe
