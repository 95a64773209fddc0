#include "zoe/core/device.hpp"

#include <unistd.h>

#include <cstdlib>
#include <string_view>
#include <utility>

#include "zoe/core/check.hpp"
#include "zoe/core/gpu_probe.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"

namespace zoe {

// ---- owners ---------------------------------------------------------------------------------

device_stream::~device_stream() { reset(); }

device_stream::device_stream(device_stream&& o) noexcept
    : device_(std::exchange(o.device_, nullptr)), native_(std::exchange(o.native_, nullptr)) {}

device_stream& device_stream::operator=(device_stream&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = std::exchange(o.device_, nullptr);
    native_ = std::exchange(o.native_, nullptr);
  }
  return *this;
}

void device_stream::reset() noexcept {
  if (device_ != nullptr && native_ != nullptr) device_->destroy_stream(native_);
  device_ = nullptr;
  native_ = nullptr;
}

device_event::~device_event() { reset(); }

device_event::device_event(device_event&& o) noexcept
    : device_(std::exchange(o.device_, nullptr)), native_(std::exchange(o.native_, nullptr)) {}

device_event& device_event::operator=(device_event&& o) noexcept {
  if (this != &o) {
    reset();
    device_ = std::exchange(o.device_, nullptr);
    native_ = std::exchange(o.native_, nullptr);
  }
  return *this;
}

void device_event::reset() noexcept {
  if (device_ != nullptr && native_ != nullptr) device_->destroy_event(native_);
  device_ = nullptr;
  native_ = nullptr;
}

device_allocation::device_allocation(device& owner, std::size_t bytes)
    : device_(&owner), data_(owner.allocate(bytes)), bytes_(data_ != nullptr ? bytes : 0) {}

device_allocation::~device_allocation() { reset(); }

device_allocation::device_allocation(device_allocation&& o) noexcept
    : device_(std::exchange(o.device_, nullptr)),
      data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)) {}

device_allocation& device_allocation::operator=(device_allocation&& o) noexcept {
  device_allocation taken(std::move(o));
  std::swap(device_, taken.device_);
  std::swap(data_, taken.data_);
  std::swap(bytes_, taken.bytes_);
  return *this;  // `taken` frees what this one held
}

void device_allocation::reset() noexcept {
  if (device_ != nullptr && data_ != nullptr) device_->deallocate(data_, bytes_);
  device_ = nullptr;
  data_ = nullptr;
  bytes_ = 0;
}

// ---- selection ------------------------------------------------------------------------------

std::uint64_t resolve_host_budget(std::optional<std::uint64_t> configured) {
  if (configured) {
    ZOE_CHECK(*configured > 0, config_error, "zoe.device.budget_bytes must be positive");
    return *configured;
  }
  if (const char* env = std::getenv("ZOE_DEVICE_BUDGET"); env != nullptr && *env != '\0') {
    std::uint64_t bytes = 0;
    try {
      bytes = parse_bytes(env, "ZOE_DEVICE_BUDGET");
    } catch (const usage_error& e) {
      throw config_error(e.what());
    }
    ZOE_CHECK(bytes > 0, config_error, "ZOE_DEVICE_BUDGET must be positive, got '", env, "'");
    return bytes;
  }
  // Half of RAM: the rest stays for pinned host buffers, the optimizer states and the OS, as a
  // real device's memory would be separate from them.
  const auto pages = static_cast<std::uint64_t>(::sysconf(_SC_PHYS_PAGES));
  const auto page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  return pages * page / 2;
}

device_selection select_device(const device_options& options) {
  std::string kind = options.kind;
  std::string source = "device_options";
  if (kind.empty()) {
    const char* env = std::getenv("ZOE_DEVICE");
    kind = (env != nullptr && *env != '\0') ? env : "auto";
    source = (env != nullptr && *env != '\0') ? "ZOE_DEVICE" : "default";
  }
  device_selection out;
  if (kind == "host") {
    out.dev = make_host_device(options.budget_bytes);
    out.reason = str(source, "=host");
  } else if (kind == "cuda") {
    out.dev = make_cuda_device(options.cuda_ordinal);
    out.reason = str(source, "=cuda");
  } else if (kind == "auto") {
    const gpu_probe_result probe = probe_gpu();
    if (probe.usable) {
      out.dev = make_cuda_device(options.cuda_ordinal);
      out.reason = str("auto: usable GPU (", probe.reason, ")");
    } else {
      out.dev = make_host_device(options.budget_bytes);
      out.reason = str("auto: ", probe.reason);
    }
  } else {
    throw config_error(str(source, ": unknown device '", kind, "' (use auto, host or cuda)"));
  }
  log::info("device: took ", out.dev->name(), " (", out.reason, ")");
  return out;
}

}  // namespace zoe
