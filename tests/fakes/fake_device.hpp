#pragma once
// A device for tests: wraps a real one (the host device by default) and forwards every call, while
// counting the calls, failing chosen allocations as an exhausted GPU would (memory_error), refusing
// host registration and host tasks as a driver would (device_error), and delaying host tasks so a test can hold
// work in flight. With nothing injected it is a plain pass-through, so the device contract suite
// runs on it unchanged. Streams and events are the inner device's: their views pass through as is.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "zoe/core/device.hpp"

namespace zoe::testing {

/// How often each member was called.
struct device_calls {
  int allocate = 0;
  int deallocate = 0;
  int register_host = 0;
  int unregister_host = 0;
  int launch_host = 0;
  int copy_async = 0;
  int synchronize = 0;  ///< of a stream or of the whole device
};

class fake_device final : public device {
 public:
  explicit fake_device(std::unique_ptr<device> inner);
  ~fake_device() override;
  fake_device(const fake_device&) = delete;
  fake_device& operator=(const fake_device&) = delete;

  // ---- what the test injects (thread-safe) -----------------------------------------------------
  /// The `nth` allocate() from now (1 = the next) throws memory_error without allocating.
  void fail_allocation(int nth);
  /// While set, register_host() throws device_error, as cudaHostRegister's refusal does.
  void refuse_registration(bool refuse);
  /// Every host task launched from now on first sleeps this long on its stream.
  void delay_tasks(std::chrono::milliseconds delay);
  /// While set, launch_host() throws device_error without queuing, as a refused cudaLaunchHostFunc.
  void refuse_launches(bool refuse);
  /// While set, synchronize(event) waits for the event and then throws device_error, as a CUDA
  /// event sync reports a kernel that faulted before it.
  void fail_event_syncs(bool fail);
  /// The `nth` copy_async() from now (1 = the next; 0: none) throws device_error without queuing,
  /// as a refused cudaMemcpyAsync.
  void fail_copy(int nth);
  /// The `nth` launch_host() from now (1 = the next; 0: none) throws device_error without queuing.
  void refuse_launch(int nth);
  /// The `nth` synchronize(stream) from now (1 = the next; 0: none) waits for the stream and then
  /// throws device_error, as a CUDA stream sync reports work that faulted on it.
  void fail_stream_sync(int nth);
  /// Reports `kind` from kind() from now on, while the inner device still does the work: code that
  /// branches on the kind (launch_kernel) takes its CUDA branch on a machine without a GPU.
  void report_kind(device_kind kind);
  /// While held, create_stream() waits until release_stream_creation(): a test holds a stream (or
  /// an engine, which makes streams) in the middle of its build to race another call against it.
  void hold_stream_creation();
  void release_stream_creation();
  /// Blocks until `n` create_stream() calls wait at the hold (no sleeping on the test's side).
  void wait_for_held_creations(int n);
  [[nodiscard]] device_calls calls() const;

  // ---- the device, forwarded --------------------------------------------------------------------
  [[nodiscard]] device_kind kind() const noexcept override;
  [[nodiscard]] std::string name() const override;
  [[nodiscard]] std::optional<std::string> pci_bus_id() const override { return inner_->pci_bus_id(); }
  [[nodiscard]] void* allocate(std::size_t bytes, stream_view stream) override;
  void deallocate(void* p, std::size_t bytes, stream_view stream) noexcept override;
  [[nodiscard]] device_usage usage() const noexcept override { return inner_->usage(); }
  bool register_host(void* p, std::size_t bytes) override;
  void unregister_host(void* p, std::size_t bytes) noexcept override;
  [[nodiscard]] device_stream create_stream() override;
  [[nodiscard]] device_event create_event() override;
  void record(const device_event& event, stream_view stream) override;
  [[nodiscard]] bool query(const device_event& event) override;
  void wait(stream_view stream, const device_event& event) override;
  void synchronize(const device_event& event) override;
  [[nodiscard]] float elapsed_ms(const device_event& start, const device_event& end) override;
  void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind, stream_view stream) override;
  void memset_async(void* dst, int value, std::size_t bytes, stream_view stream) override;
  void launch_host(stream_view stream, std::function<void()> task) override;
  void synchronize(stream_view stream) override;
  void synchronize() override;

 protected:
  void destroy_stream(void* native) noexcept override;
  void destroy_event(void* native) noexcept override;

 private:
  // An event handed out by this device wraps the inner device's event of the same native handle.
  // The reference outlives the lock: map nodes do not move, and only destroying the caller's own
  // event (which it holds for the call) erases this one.
  [[nodiscard]] const device_event& inner_event(const device_event& e) const;

  std::unique_ptr<device> inner_;
  mutable std::mutex mutex_;
  device_calls calls_;
  int allocations_until_failure_ = 0;   // 0: none planned
  int copies_until_failure_ = 0;        // 0: none planned
  int launches_until_refusal_ = 0;      // 0: none planned
  int stream_syncs_until_failure_ = 0;  // 0: none planned
  bool refuse_registration_ = false;
  bool refuse_launches_ = false;
  bool fail_event_syncs_ = false;
  std::optional<device_kind> reported_kind_;
  std::chrono::milliseconds delay_{0};
  bool hold_streams_ = false;
  int held_creations_ = 0;                   // create_stream() calls waiting at the hold
  std::condition_variable streams_changed_;  // the hold or held_creations_ changed
  // The inner owners, by native handle; destroying ours destroys theirs.
  std::unordered_map<void*, device_stream> streams_;
  std::unordered_map<void*, device_event> events_;
};

}  // namespace zoe::testing
