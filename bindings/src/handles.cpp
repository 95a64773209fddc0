// The registry of live handles.
#include "handles.hpp"

#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::bindings {

void handle_set::add(const void* handle) {
  const std::lock_guard lock(mutex_);
  live_.insert(handle);
}

bool handle_set::remove(const void* handle) {
  const std::lock_guard lock(mutex_);
  return live_.erase(handle) == 1;
}

bool handle_set::contains(const void* handle) const {
  const std::lock_guard lock(mutex_);
  return live_.contains(handle);
}

// Function-local statics: made on first use, so a handle may be created from another library's
// static initializer.
handle_set& device_handles() {
  static handle_set set;
  return set;
}
handle_set& stream_handles() {
  static handle_set set;
  return set;
}
handle_set& model_handles() {
  static handle_set set;
  return set;
}
handle_set& engine_handles() {
  static handle_set set;
  return set;
}

void throw_not_live(const void* handle, std::string_view role, std::string_view type) {
  if (handle == nullptr) throw usage_error(str(role, " is NULL"));
  throw usage_error(str(role, " handle ", handle, " is not a live ", type, " (destroyed or never created)"));
}

}  // namespace zoe::bindings
