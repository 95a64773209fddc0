#pragma once
// The registry of live handles: every handle the C API hands out is recorded here until its
// destroy, so a handle used after its destroy (or one zoe never made) is a usage_error naming it,
// never a dereference of freed memory. One mutex-guarded set of addresses per handle type.
//
// Limits: an address freed by a destroy may be reused by a later create, after which the old
// handle names the new object (as with any pointer-based registry); the registry only proves that
// a handle is live, not that the caller means that one.
//
// Thread-safety: every function may be called from any thread.

#include <memory>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <unordered_set>

namespace zoe::bindings {

/// The addresses of the live handles of one type.
class handle_set {
 public:
  void add(const void* handle);
  /// Removes `handle`; false when it was not live.
  bool remove(const void* handle);
  [[nodiscard]] bool contains(const void* handle) const;

  /// Calls `f()` under the set's lock when `handle` is live, so that no remove() comes between the
  /// check and `f` (which must not use this set). Returns whether it was live.
  template <typename F>
  bool while_live(const void* handle, F&& f) const {
    const std::lock_guard lock(mutex_);
    if (!live_.contains(handle)) return false;
    f();
    return true;
  }
  /// Removes `handle` once `check()`, called under the set's lock, returns: a check that throws
  /// leaves it live, and no while_live() comes between the check and the removal. Returns whether
  /// it was live (the check is not called otherwise).
  template <typename Check>
  bool remove_checked(const void* handle, Check&& check) {
    const std::lock_guard lock(mutex_);
    if (!live_.contains(handle)) return false;
    check();
    live_.erase(handle);
    return true;
  }

 private:
  mutable std::mutex mutex_;
  std::unordered_set<const void*> live_;
};

/// The sets of live devices, streams, models and engines.
handle_set& device_handles();
handle_set& stream_handles();
handle_set& model_handles();
handle_set& engine_handles();

/// The C name of each handle type ("zoe_engine"), and its set. Specialized in objects.hpp.
template <typename Handle>
struct handle_traits;

/// Throws usage_error: "<role> is NULL", or "<role> handle 0x... is not a live <type> (destroyed
/// or never created)".
[[noreturn]] void throw_not_live(const void* handle, std::string_view role, std::string_view type);

/// The object behind a live handle; usage_error naming `role` ("engine", "stream") otherwise.
template <typename Handle>
Handle& live(Handle* handle, std::string_view role) {
  using traits = handle_traits<std::remove_const_t<Handle>>;
  if (handle == nullptr || !traits::set().contains(handle)) throw_not_live(handle, role, traits::name);
  return *handle;
}

/// Registers a new object and hands its ownership to the caller as a handle.
template <typename Handle>
Handle* adopt(std::unique_ptr<Handle> object) {
  handle_traits<Handle>::set().add(object.get());
  return object.release();
}

/// Unregisters a live handle and takes its ownership back (the caller destroys it); usage_error
/// as live() when it is not live.
template <typename Handle>
std::unique_ptr<Handle> retire(Handle* handle, std::string_view role) {
  using traits = handle_traits<Handle>;
  if (handle == nullptr || !traits::set().remove(handle)) throw_not_live(handle, role, traits::name);
  return std::unique_ptr<Handle>(handle);
}

}  // namespace zoe::bindings
