#pragma once
// The objects behind the device and stream handles, apart from the engine's (objects.hpp), so the
// device calls build and test without the engine; and the count of a device's users that keeps
// zoe_device_destroy from closing a device a stream or an engine is built on.

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string_view>
#include <unordered_map>

#include "handles.hpp"
#include "zoe/core/device.hpp"
#include "zoe/zoe.h"

struct zoe_device {
  std::unique_ptr<zoe::device> dev;
  /// The engine that opened this device (zoe_engine_desc::device NULL); it closes it, not the caller.
  const zoe_engine* owner = nullptr;
  /// Streams and engines using the device, those being built included (see device_use): it may be
  /// destroyed only when none is left. Rises only under the device registry's lock, while the
  /// handle is live; zoe_device_destroy reads it under that lock before it unregisters the handle.
  std::atomic<std::size_t> users{0};
  /// What zoe_device_allocate handed out and its size, so zoe_device_free refuses a pointer it
  /// did not make, one freed already, or a wrong size (the device seam only logs those).
  std::mutex allocations_mutex;
  std::unordered_map<const void*, std::size_t> allocations;
};

struct zoe_stream {
  zoe_device* device = nullptr;
  zoe::device_stream stream;
};

namespace zoe::bindings {

template <>
struct handle_traits<zoe_device> {
  static constexpr std::string_view name = "zoe_device";
  static handle_set& set() { return device_handles(); }
};
template <>
struct handle_traits<zoe_stream> {
  static constexpr std::string_view name = "zoe_stream";
  static handle_set& set() { return stream_handles(); }
};

/// One use of a live device by a stream or an engine, counted from before anything is built on
/// it: zoe_device_destroy refuses the device while a build is under way (it would free the device
/// under it), not only once the stream or engine exists. Dropped, the count falls again, unless
/// keep() handed the use to the stream or engine made (whose destroy gives it back).
/// Thread-safe against zoe_device_destroy; one thread uses one device_use.
class device_use {
 public:
  /// usage_error naming `role` as live() does when `device` is not a live device.
  device_use(zoe_device* device, std::string_view role);
  ~device_use();
  device_use(const device_use&) = delete;
  device_use& operator=(const device_use&) = delete;

  [[nodiscard]] zoe_device& device() const noexcept { return *device_; }
  /// The stream or engine is made and holds the use from now on.
  void keep() noexcept { kept_ = true; }

 private:
  zoe_device* device_;
  bool kept_ = false;
};

/// The stream to queue an engine's or a device's work on: the default stream for NULL; usage_error
/// for a stream that is not live or belongs to another device than `on`.
[[nodiscard]] stream_view stream_on(const zoe_device& on, zoe_stream* stream);

}  // namespace zoe::bindings
