// Devices, streams, device memory and copies: the C face of core's device seam (zoe/core/device.hpp).
#include <cstddef>
#include <memory>
#include <mutex>
#include <string_view>
#include <utility>

#include "device_objects.hpp"
#include "status.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::bindings {

stream_view stream_on(const zoe_device& on, zoe_stream* stream) {
  if (stream == nullptr) return {};
  const zoe_stream& s = live(stream, "stream");
  if (s.device != &on) {
    throw usage_error(str("stream ", static_cast<const void*>(stream), " belongs to device ",
                          static_cast<const void*>(s.device), ", not to device ", static_cast<const void*>(&on),
                          " that this call runs on"));
  }
  return s.stream.view();
}

device_use::device_use(zoe_device* device, std::string_view role) : device_(device) {
  // Counted under the registry's lock: zoe_device_destroy cannot unregister the device between
  // the check that it is live and the count that keeps it so.
  if (device == nullptr || !device_handles().while_live(device, [device] { ++device->users; })) {
    throw_not_live(device, role, handle_traits<zoe_device>::name);
  }
}

device_use::~device_use() {
  if (!kept_) --device_->users;
}

namespace {

zoe::copy_kind copy_kind_of(int kind) {
  switch (kind) {
    case ZOE_COPY_HOST_TO_DEVICE: return zoe::copy_kind::host_to_device;
    case ZOE_COPY_DEVICE_TO_HOST: return zoe::copy_kind::device_to_host;
    case ZOE_COPY_DEVICE_TO_DEVICE: return zoe::copy_kind::device_to_device;
  }
  throw usage_error(str("copy kind ", kind,
                        " is not a zoe_copy_kind (ZOE_COPY_HOST_TO_DEVICE, ZOE_COPY_DEVICE_TO_HOST or "
                        "ZOE_COPY_DEVICE_TO_DEVICE)"));
}

std::string kind_name(int kind) {
  switch (kind) {
    case ZOE_DEVICE_AUTO: return "";  // core's empty kind: ZOE_DEVICE from the environment, else auto
    case ZOE_DEVICE_HOST: return "host";
    case ZOE_DEVICE_CUDA: return "cuda";
  }
  throw config_error(str("zoe_device_options.kind ", kind,
                         " is not a zoe_device_kind (ZOE_DEVICE_AUTO, ZOE_DEVICE_HOST or ZOE_DEVICE_CUDA)"));
}

}  // namespace
}  // namespace zoe::bindings

using zoe::bindings::expect_pointer;
using zoe::bindings::guarded;
using zoe::bindings::live;

extern "C" {

zoe_status zoe_device_create(const zoe_device_options* options, zoe_device** device) {
  return guarded("zoe_device_create", [&] {
    const zoe_device_options& o =
        zoe::bindings::expect_struct(options, ZOE_FIELDS_END(zoe_device_options, cuda_ordinal), "zoe_device_options");
    expect_pointer(device, "device (the out-parameter)");
    zoe::device_options chosen{.kind = zoe::bindings::kind_name(zoe::bindings::enum_value(o.kind)),
                               .budget_bytes = {},
                               .cuda_ordinal = o.cuda_ordinal};
    if (o.budget_bytes != 0) chosen.budget_bytes = o.budget_bytes;
    auto made = std::make_unique<zoe_device>();
    made->dev = zoe::select_device(chosen).dev;
    *device = zoe::bindings::adopt(std::move(made));
  });
}

zoe_status zoe_device_destroy(zoe_device* device) {
  return guarded("zoe_device_destroy", [&] {
    // The checks and the unregistering under the registry's lock: a stream or an engine starting
    // to build on the device either counted itself before (and this call refuses) or finds the
    // device gone (and refuses itself).
    const bool was_live = zoe::bindings::device_handles().remove_checked(device, [device] {
      if (device->owner != nullptr) {
        throw zoe::usage_error(zoe::str("device ", static_cast<const void*>(device), " was opened by engine ",
                                        static_cast<const void*>(device->owner),
                                        " (zoe_engine_device); zoe_engine_destroy closes it"));
      }
      if (const std::size_t users = device->users.load(); users > 0) {
        throw zoe::usage_error(
            zoe::str("device ", static_cast<const void*>(device), " is still used by ", users,
                     " streams and engines (made, or being made) or calls in progress: destroy them first"));
      }
    });
    if (!was_live) zoe::bindings::throw_not_live(device, "device", "zoe_device");
    std::unique_ptr<zoe_device>(device).reset();
  });
}

zoe_status zoe_device_get_kind(const zoe_device* device, zoe_device_kind* kind) {
  return guarded("zoe_device_get_kind", [&] {
    // Every call on a device counts as its user while it runs, so a zoe_device_destroy on another
    // thread is refused rather than freeing the device under the call (the count is bookkeeping on
    // the handle, not a change to the device, hence the cast of the const ones).
    const zoe::bindings::device_use use(const_cast<zoe_device*>(device), "device");
    const zoe_device& d = use.device();
    expect_pointer(kind, "kind (the out-parameter)");
    *kind = d.dev->kind() == zoe::device_kind::cuda ? ZOE_DEVICE_CUDA : ZOE_DEVICE_HOST;
  });
}

zoe_status zoe_device_memory(const zoe_device* device, uint64_t* current_bytes, uint64_t* peak_bytes,
                             uint64_t* budget_bytes) {
  return guarded("zoe_device_memory", [&] {
    const zoe::bindings::device_use use(const_cast<zoe_device*>(device), "device");
    const zoe_device& d = use.device();
    expect_pointer(current_bytes, "current_bytes (an out-parameter)");
    expect_pointer(peak_bytes, "peak_bytes (an out-parameter)");
    expect_pointer(budget_bytes, "budget_bytes (an out-parameter)");
    const zoe::device_usage u = d.dev->usage();
    *current_bytes = u.current_bytes;
    *peak_bytes = u.peak_bytes;
    *budget_bytes = u.budget_bytes;
  });
}

zoe_status zoe_stream_create(zoe_device* device, zoe_stream** stream) {
  return guarded("zoe_stream_create", [&] {
    zoe::bindings::device_use use(device, "device");
    expect_pointer(stream, "stream (the out-parameter)");
    auto made = std::make_unique<zoe_stream>();
    made->stream = use.device().dev->create_stream();
    made->device = &use.device();
    *stream = zoe::bindings::adopt(std::move(made));
    use.keep();
  });
}

zoe_status zoe_stream_destroy(zoe_stream* stream) {
  return guarded("zoe_stream_destroy", [&] {
    std::unique_ptr<zoe_stream> s = zoe::bindings::retire(stream, "stream");
    zoe_device& d = *s->device;
    s.reset();  // waits for the stream's work
    --d.users;
  });
}

zoe_status zoe_stream_synchronize(zoe_stream* stream) {
  return guarded("zoe_stream_synchronize", [&] {
    zoe_stream& s = live(stream, "stream");
    s.device->dev->synchronize(s.stream.view());
  });
}

zoe_status zoe_stream_native(const zoe_stream* stream, void** native) {
  return guarded("zoe_stream_native", [&] {
    const zoe_stream& s = live(stream, "stream");
    expect_pointer(native, "native (the out-parameter)");
    // The host device's stream object is zoe's own: nothing a caller could pass to a library.
    *native = s.device->dev->kind() == zoe::device_kind::cuda ? s.stream.view().native() : nullptr;
  });
}

zoe_status zoe_device_allocate(zoe_device* device, size_t bytes, zoe_stream* stream, void** pointer) {
  return guarded("zoe_device_allocate", [&] {
    const zoe::bindings::device_use use(device, "device");
    zoe_device& d = use.device();
    const zoe::stream_view s = zoe::bindings::stream_on(d, stream);
    expect_pointer(pointer, "pointer (the out-parameter)");
    if (bytes == 0) throw zoe::usage_error("0 bytes asked for: give a size > 0");
    void* p = d.dev->allocate(bytes, s);
    try {
      const std::lock_guard lock(d.allocations_mutex);
      d.allocations.emplace(p, bytes);
    } catch (...) {
      d.dev->deallocate(p, bytes, s);
      throw;
    }
    *pointer = p;
  });
}

zoe_status zoe_device_free(zoe_device* device, void* pointer, size_t bytes, zoe_stream* stream) {
  return guarded("zoe_device_free", [&] {
    const zoe::bindings::device_use use(device, "device");
    zoe_device& d = use.device();
    const zoe::stream_view s = zoe::bindings::stream_on(d, stream);
    if (pointer == nullptr) return;
    {
      const std::lock_guard lock(d.allocations_mutex);
      const auto it = d.allocations.find(pointer);
      if (it == d.allocations.end()) {
        throw zoe::usage_error(zoe::str(pointer, " was not allocated by zoe_device_allocate on device ",
                                        static_cast<const void*>(device), ", or was freed already"));
      }
      if (it->second != bytes) {
        throw zoe::usage_error(zoe::str(pointer, " was allocated with ", it->second, " bytes, not ", bytes));
      }
      d.allocations.erase(it);
    }
    d.dev->deallocate(pointer, bytes, s);
  });
}

zoe_status zoe_copy_async(zoe_device* device, void* dst, const void* src, size_t bytes, zoe_copy_kind kind,
                          zoe_stream* stream) {
  return guarded("zoe_copy_async", [&] {
    const zoe::bindings::device_use use(device, "device");
    zoe_device& d = use.device();
    const zoe::stream_view s = zoe::bindings::stream_on(d, stream);
    const zoe::copy_kind k = zoe::bindings::copy_kind_of(zoe::bindings::enum_value(kind));
    if (bytes == 0) return;
    expect_pointer(dst, "dst");
    expect_pointer(src, "src");
    d.dev->copy_async(dst, src, bytes, k, s);
  });
}

}  // extern "C"
