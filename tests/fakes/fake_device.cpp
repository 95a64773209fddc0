#include "fake_device.hpp"

#include <thread>
#include <utility>

#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::testing {
namespace {

// An injected failure armed for the nth call: counts this call and says whether it is the one.
bool counts_down_to_this_call(int& calls_left) { return calls_left > 0 && --calls_left == 0; }

}  // namespace

fake_device::fake_device(std::unique_ptr<device> inner) : inner_(std::move(inner)) {}

// The inner streams and events go before the inner device that made them.
fake_device::~fake_device() {
  streams_.clear();
  events_.clear();
}

void fake_device::fail_allocation(int nth) {
  const std::lock_guard lock(mutex_);
  allocations_until_failure_ = nth;
}

void fake_device::fail_copy(int nth) {
  const std::lock_guard lock(mutex_);
  copies_until_failure_ = nth;
}

void fake_device::refuse_launch(int nth) {
  const std::lock_guard lock(mutex_);
  launches_until_refusal_ = nth;
}

void fake_device::fail_stream_sync(int nth) {
  const std::lock_guard lock(mutex_);
  stream_syncs_until_failure_ = nth;
}

void fake_device::refuse_registration(bool refuse) {
  const std::lock_guard lock(mutex_);
  refuse_registration_ = refuse;
}

void fake_device::refuse_launches(bool refuse) {
  const std::lock_guard lock(mutex_);
  refuse_launches_ = refuse;
}

void fake_device::fail_event_syncs(bool fail) {
  const std::lock_guard lock(mutex_);
  fail_event_syncs_ = fail;
}

void fake_device::report_kind(device_kind kind) {
  const std::lock_guard lock(mutex_);
  reported_kind_ = kind;
}

device_kind fake_device::kind() const noexcept {
  const std::lock_guard lock(mutex_);
  return reported_kind_.value_or(inner_->kind());
}

void fake_device::delay_tasks(std::chrono::milliseconds delay) {
  const std::lock_guard lock(mutex_);
  delay_ = delay;
}

device_calls fake_device::calls() const {
  const std::lock_guard lock(mutex_);
  return calls_;
}

std::string fake_device::name() const { return str("fake over ", inner_->name()); }

void* fake_device::allocate(std::size_t bytes, stream_view stream) {
  {
    const std::lock_guard lock(mutex_);
    ++calls_.allocate;
    if (counts_down_to_this_call(allocations_until_failure_)) {
      throw memory_error(str(name(), ": injected out of memory allocating ", bytes, " bytes"));
    }
  }
  return inner_->allocate(bytes, stream);
}

void fake_device::deallocate(void* p, std::size_t bytes, stream_view stream) noexcept {
  {
    const std::lock_guard lock(mutex_);
    ++calls_.deallocate;
  }
  inner_->deallocate(p, bytes, stream);
}

bool fake_device::register_host(void* p, std::size_t bytes) {
  {
    const std::lock_guard lock(mutex_);
    ++calls_.register_host;
    if (refuse_registration_) throw device_error(str(name(), ": injected refusal to register ", bytes, " bytes"));
  }
  return inner_->register_host(p, bytes);
}

void fake_device::unregister_host(void* p, std::size_t bytes) noexcept {
  {
    const std::lock_guard lock(mutex_);
    ++calls_.unregister_host;
  }
  inner_->unregister_host(p, bytes);
}

void fake_device::hold_stream_creation() {
  const std::lock_guard lock(mutex_);
  hold_streams_ = true;
}

void fake_device::release_stream_creation() {
  {
    const std::lock_guard lock(mutex_);
    hold_streams_ = false;
  }
  streams_changed_.notify_all();
}

void fake_device::wait_for_held_creations(int n) {
  std::unique_lock lock(mutex_);
  streams_changed_.wait(lock, [&] { return held_creations_ >= n; });
}

device_stream fake_device::create_stream() {
  {
    std::unique_lock lock(mutex_);
    if (hold_streams_) {
      ++held_creations_;
      streams_changed_.notify_all();
      streams_changed_.wait(lock, [this] { return !hold_streams_; });
      --held_creations_;
    }
  }
  device_stream inner = inner_->create_stream();
  void* native = inner.view().native();
  const std::lock_guard lock(mutex_);
  streams_.emplace(native, std::move(inner));
  return {*this, native};
}

device_event fake_device::create_event() {
  device_event inner = inner_->create_event();
  void* native = inner.native();
  const std::lock_guard lock(mutex_);
  events_.emplace(native, std::move(inner));
  return {*this, native};
}

const device_event& fake_device::inner_event(const device_event& e) const {
  const std::lock_guard lock(mutex_);
  const auto it = events_.find(e.native());
  if (it == events_.end()) throw usage_error(str(name(), ": the event was not made by this device"));
  return it->second;
}

void fake_device::record(const device_event& event, stream_view stream) { inner_->record(inner_event(event), stream); }
bool fake_device::query(const device_event& event) { return inner_->query(inner_event(event)); }
void fake_device::wait(stream_view stream, const device_event& event) { inner_->wait(stream, inner_event(event)); }
void fake_device::synchronize(const device_event& event) {
  inner_->synchronize(inner_event(event));
  const std::lock_guard lock(mutex_);
  if (fail_event_syncs_) throw device_error(str(name(), ": injected failure of an event's work"));
}
float fake_device::elapsed_ms(const device_event& start, const device_event& end) {
  return inner_->elapsed_ms(inner_event(start), inner_event(end));
}

void fake_device::copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind, stream_view stream) {
  {
    const std::lock_guard lock(mutex_);
    ++calls_.copy_async;
    if (counts_down_to_this_call(copies_until_failure_)) {
      throw device_error(str(name(), ": injected refusal to copy ", bytes, " bytes"));
    }
  }
  inner_->copy_async(dst, src, bytes, kind, stream);
}

void fake_device::memset_async(void* dst, int value, std::size_t bytes, stream_view stream) {
  inner_->memset_async(dst, value, bytes, stream);
}

void fake_device::launch_host(stream_view stream, std::function<void()> task) {
  std::chrono::milliseconds delay{0};
  {
    const std::lock_guard lock(mutex_);
    ++calls_.launch_host;
    if (refuse_launches_ || counts_down_to_this_call(launches_until_refusal_)) {
      throw device_error(str(name(), ": injected refusal to launch a host task"));
    }
    delay = delay_;
  }
  if (delay.count() > 0 && task) {
    inner_->launch_host(stream, [delay, task = std::move(task)] {
      std::this_thread::sleep_for(delay);
      task();
    });
    return;
  }
  inner_->launch_host(stream, std::move(task));
}

void fake_device::synchronize(stream_view stream) {
  bool fail = false;
  {
    const std::lock_guard lock(mutex_);
    ++calls_.synchronize;
    fail = counts_down_to_this_call(stream_syncs_until_failure_);
  }
  inner_->synchronize(stream);
  if (fail) throw device_error(str(name(), ": injected failure of a stream's work"));
}

void fake_device::synchronize() {
  {
    const std::lock_guard lock(mutex_);
    ++calls_.synchronize;
  }
  inner_->synchronize();
}

void fake_device::destroy_stream(void* native) noexcept {
  device_stream inner;
  {
    const std::lock_guard lock(mutex_);
    const auto it = streams_.find(native);
    if (it == streams_.end()) return;
    inner = std::move(it->second);
    streams_.erase(it);
  }
  // `inner` is destroyed here, outside the lock: it waits for the stream's work.
}

void fake_device::destroy_event(void* native) noexcept {
  const std::lock_guard lock(mutex_);
  events_.erase(native);
}

}  // namespace zoe::testing
