#pragma once
// What becomes of an exception thrown by a host task on a stream, for every device alike: it is
// kept, per stream, until that stream (or the whole device) is next synchronized, which throws it
// as a device_error naming the device. A CUDA host function cannot report into its stream, so the
// device keeps the failure beside the stream instead; the host device does the same, so both honour
// one contract.

#include <exception>
#include <mutex>
#include <string>
#include <unordered_map>

namespace zoe::detail {

/// The first failure of each stream's host tasks since that stream was last synchronized.
/// Streams are keys (the native handle; nullptr for the default stream). Thread-safe.
class stream_failures {
 public:
  /// Keeps `failure` for `stream` unless an earlier one is still unreported. Never throws (a task's
  /// failure must not be lost to an allocation failure: it is logged instead).
  void record(const void* stream, std::exception_ptr failure) noexcept;
  /// Throws, as device_error naming `device_name`, the failure kept for `stream`, and forgets it.
  void rethrow(const void* stream, const std::string& device_name);
  /// Throws the first failure kept for any stream (as rethrow does) and forgets them all.
  void rethrow_any(const std::string& device_name);
  /// Forgets the failure of a stream being destroyed; one left unreported is logged, not lost.
  void forget(const void* stream, const std::string& device_name) noexcept;

 private:
  // Removes and returns the failure kept for `stream` (nullptr if none).
  std::exception_ptr take(const void* stream) noexcept;

  std::mutex mutex_;
  std::unordered_map<const void*, std::exception_ptr> failures_;
};

}  // namespace zoe::detail
