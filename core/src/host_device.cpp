// The host device: "device memory" is host memory under a hard byte budget, a stream is one
// worker thread running its work in order, an event is a sequence counter that work on other
// streams can wait on. It behaves like the CUDA device in everything the engine can observe, so
// every test of the tiers runs here.
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>
#include <unordered_map>
#include <vector>

#include "device_copy.hpp"
#include "stream_failures.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/byte_accounting.hpp"
#include "zoe/core/checked.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"

namespace zoe {
namespace {

using clock_type = std::chrono::steady_clock;

// What cudaMalloc guarantees, so code tested here does not rely on more than the GPU gives.
constexpr std::size_t device_alignment = 256;

class host_stream {
 public:
  // A task that throws leaves its failure in `failures` under the stream's key: its address as
  // stream views carry it, or nullptr for the default stream.
  host_stream(bool is_default, detail::stream_failures& failures)
      : key_(is_default ? nullptr : this), failures_(failures) {}
  ~host_stream() {
    // Work already queued still runs, as cudaStreamDestroy lets it finish.
    wait_idle();
  }
  host_stream(const host_stream&) = delete;
  host_stream& operator=(const host_stream&) = delete;

  void submit(std::function<void()> task) {
    {
      const std::lock_guard lock(mutex_);
      queue_.push_back(std::move(task));
    }
    work_cv_.notify_one();
  }

  void wait_idle() {
    std::unique_lock lock(mutex_);
    idle_cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
  }

 private:
  void run(const std::stop_token& stop) {
    std::unique_lock lock(mutex_);
    while (true) {
      work_cv_.wait(lock, stop, [this] { return !queue_.empty(); });
      if (queue_.empty()) return;  // stop requested and nothing left
      auto task = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      try {
        task();
      } catch (...) {
        failures_.record(key_, std::current_exception());
      }
      task = nullptr;  // release captures before reporting idle
      lock.lock();
      busy_ = false;
      if (queue_.empty()) idle_cv_.notify_all();
    }
  }

  const void* const key_;
  detail::stream_failures& failures_;
  std::mutex mutex_;
  std::condition_variable_any work_cv_;
  std::condition_variable_any idle_cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  // Last member: the thread starts once everything it touches exists, and is joined first.
  std::jthread worker_{[this](const std::stop_token& stop) { run(stop); }};
};

// Record n completes when the work queued before the n-th record() has run. `completed` only
// grows, so a waiter for record n is released by any later completion too.
struct host_event_state {
  std::mutex mutex;
  std::condition_variable cv;
  std::uint64_t recorded = 0;
  std::uint64_t completed = 0;
  clock_type::time_point completed_at{};
};

struct host_event {
  std::shared_ptr<host_event_state> state = std::make_shared<host_event_state>();
};

const std::shared_ptr<host_event_state>& shared_state_of(const device_event& e) {
  ZOE_EXPECTS(e.valid(), "host device: the event is empty (default-constructed or moved from)");
  return static_cast<host_event*>(e.native())->state;
}

host_event_state& state_of(const device_event& e) { return *shared_state_of(e); }

// mlock, or one warning naming RLIMIT_MEMLOCK and false when the OS refuses.
bool lock_or_warn(void* p, std::size_t bytes) {
  if (::mlock(p, bytes) == 0) return true;
  const int err = errno;
  if (err != ENOMEM && err != EPERM && err != EAGAIN) {
    throw memory_error(str("host device: mlock of ", format_bytes(bytes), " failed: ", errno_text(err)));
  }
  rlimit lim{};
  ::getrlimit(RLIMIT_MEMLOCK, &lim);
  const std::string limit = lim.rlim_cur == RLIM_INFINITY ? std::string("unlimited") : format_bytes(lim.rlim_cur);
  log::warn_once("device.host.mlock",
                 str("cannot lock ", format_bytes(bytes), " of pinned host memory: RLIMIT_MEMLOCK is ", limit,
                     " and the process lacks CAP_IPC_LOCK (", errno_text(err),
                     "); continuing with unlocked memory. Raise it with `ulimit -l` or limits.conf."));
  return false;
}

class host_device final : public device {
 public:
  explicit host_device(std::uint64_t budget) : budget_(budget) {}
  ~host_device() override {
    default_stream_.reset();
    const std::lock_guard lock(mutex_);
    if (!live_.empty()) {
      log::error("host device destroyed with ", live_.size(), " allocations (", format_bytes(current_.load()),
                 ") still live");
    }
    for (const auto& [p, bytes] : live_) std::free(p);
  }
  host_device(const host_device&) = delete;
  host_device& operator=(const host_device&) = delete;

  device_kind kind() const noexcept override { return device_kind::host; }
  std::string name() const override { return str("host device (budget ", format_bytes(budget_), ")"); }
  std::optional<std::string> pci_bus_id() const override { return std::nullopt; }

  void* allocate(std::size_t bytes, stream_view /*stream*/) override {
    if (bytes == 0) return nullptr;
    // A size within device_alignment of 2^64 does not round up: more than any budget.
    const std::optional<std::uint64_t> rounded = align_up_checked(bytes, device_alignment);
    std::uint64_t now = current_.load();
    if (!rounded || !detail::try_reserve(current_, *rounded, budget_, now)) {
      throw memory_error(str("host device out of memory: cannot allocate ", format_bytes(bytes), " with ",
                             format_bytes(now), " of its ", format_bytes(budget_),
                             " budget in use (zoe.device.budget_bytes / ZOE_DEVICE_BUDGET)"));
    }
    void* p = std::aligned_alloc(device_alignment, *rounded);
    if (p == nullptr) {
      current_ -= *rounded;
      throw memory_error(str("host device: the OS refused ", format_bytes(*rounded), " within the budget"));
    }
    detail::raise_peak(peak_, now + *rounded);
    const std::lock_guard lock(mutex_);
    live_.emplace(p, *rounded);
    return p;
  }

  void deallocate(void* p, std::size_t bytes, stream_view stream) noexcept override {
    if (p == nullptr) return;
    if (stream.is_default()) {
      release(p, bytes);
      return;
    }
    try {
      stream_of(stream).submit([this, p, bytes] { release(p, bytes); });
    } catch (...) {
      release(p, bytes);  // out of memory queueing the free: free now rather than leak
    }
  }

  device_usage usage() const noexcept override { return {current_.load(), peak_.load(), budget_}; }

  bool register_host(void* p, std::size_t bytes) override {
    ZOE_EXPECTS(p != nullptr && bytes > 0, "host device: register_host needs memory, got ", p, " and ", bytes,
                " bytes");
    return lock_or_warn(p, bytes);
  }

  void unregister_host(void* p, std::size_t bytes) noexcept override {
    if (p != nullptr) ::munlock(p, bytes);
  }

  device_stream create_stream() override {
    auto s = std::make_shared<host_stream>(false, failures_);
    void* native = s.get();
    // Registered so synchronize() of the whole device finds it.
    const std::lock_guard lock(mutex_);
    streams_.emplace(native, std::move(s));
    return {*this, native};
  }

  device_event create_event() override {
    auto e = std::make_unique<host_event>();
    return {*this, e.release()};
  }

  void record(const device_event& event, stream_view stream) override {
    std::shared_ptr<host_event_state> st = shared_state_of(event);
    std::uint64_t target = 0;
    {
      const std::lock_guard lock(st->mutex);
      target = ++st->recorded;
    }
    stream_of(stream).submit([st, target] {
      {
        const std::lock_guard lock(st->mutex);
        if (target > st->completed) {
          st->completed = target;
          st->completed_at = clock_type::now();
        }
      }
      st->cv.notify_all();
    });
  }

  bool query(const device_event& event) override {
    host_event_state& st = state_of(event);
    const std::lock_guard lock(st.mutex);
    return st.completed >= st.recorded;
  }

  void wait(stream_view stream, const device_event& event) override {
    std::shared_ptr<host_event_state> st = shared_state_of(event);
    std::uint64_t target = 0;
    {
      const std::lock_guard lock(st->mutex);
      target = st->recorded;
    }
    if (target == 0) return;  // never recorded: nothing to wait for, as in CUDA
    stream_of(stream).submit([st, target] {
      std::unique_lock lock(st->mutex);
      st->cv.wait(lock, [&] { return st->completed >= target; });
    });
  }

  void synchronize(const device_event& event) override {
    host_event_state& st = state_of(event);
    std::unique_lock lock(st.mutex);
    const std::uint64_t target = st.recorded;
    st.cv.wait(lock, [&] { return st.completed >= target; });
  }

  float elapsed_ms(const device_event& start, const device_event& end) override {
    const auto completion = [](host_event_state& st, const char* which) {
      const std::lock_guard lock(st.mutex);
      ZOE_EXPECTS(st.recorded > 0, "host device: elapsed_ms: the ", which, " event was never recorded");
      ZOE_EXPECTS(st.completed >= st.recorded, "host device: elapsed_ms: the ", which, " event has not completed");
      return st.completed_at;
    };
    const auto a = completion(state_of(start), "start");
    const auto b = completion(state_of(end), "end");
    return std::chrono::duration<float, std::milli>(b - a).count();
  }

  void copy_async(void* dst, const void* src, std::size_t bytes, copy_kind kind, stream_view stream) override {
    if (bytes == 0) return;
    ZOE_EXPECTS(dst != nullptr && src != nullptr, "host device: copy of ", bytes, " bytes with a null pointer");
    // Compared as addresses: a range that runs past the end of the address space is no memory at
    // all, and a pointer moved past its object is undefined behaviour.
    const auto from = reinterpret_cast<std::uintptr_t>(src);
    const auto to = reinterpret_cast<std::uintptr_t>(dst);
    ZOE_EXPECTS(bytes <= std::numeric_limits<std::uintptr_t>::max() - std::max(from, to), "host device: copy of ",
                bytes, " bytes from ", src, " to ", dst, " runs past the end of the address space");
    ZOE_EXPECTS(to + bytes <= from || from + bytes <= to, "host device: copy of ", bytes,
                " bytes between overlapping ranges");
    const auto* s = static_cast<const std::byte*>(src);
    auto* d = static_cast<std::byte*>(dst);
    if (kind == copy_kind::device_to_device) {
      // Within device memory, as a GPU's copy engine would: without passing through the cache.
      // Copies from and to host memory stay plain memcpy: a CPU kernel may read them next.
      stream_of(stream).submit([d, s, bytes] { detail::copy_device_memory(d, s, bytes); });
    } else {
      stream_of(stream).submit([d, s, bytes] { std::memcpy(d, s, bytes); });
    }
  }

  void memset_async(void* dst, int value, std::size_t bytes, stream_view stream) override {
    if (bytes == 0) return;
    ZOE_EXPECTS(dst != nullptr, "host device: memset of ", bytes, " bytes at a null pointer");
    stream_of(stream).submit([dst, value, bytes] { std::memset(dst, value, bytes); });
  }

  void launch_host(stream_view stream, std::function<void()> task) override {
    ZOE_EXPECTS(static_cast<bool>(task), "host device: launch_host of an empty task");
    stream_of(stream).submit(std::move(task));
  }

  void synchronize(stream_view stream) override {
    stream_of(stream).wait_idle();
    failures_.rethrow(stream.native(), name());
  }

  void synchronize() override {
    // Shared owners, taken under the lock: a stream destroyed meanwhile by another thread lives on
    // until this walk lets go of it.
    std::vector<std::shared_ptr<host_stream>> all;
    {
      const std::lock_guard lock(mutex_);
      all.reserve(streams_.size() + 1);
      for (const auto& [native, s] : streams_) all.push_back(s);
      // The default stream is created under the same lock on first use (stream_of).
      if (default_stream_) all.push_back(default_stream_);
    }
    for (const auto& s : all) s->wait_idle();
    failures_.rethrow_any(name());
  }

 protected:
  void destroy_stream(void* native) noexcept override {
    std::shared_ptr<host_stream> s;
    {
      const std::lock_guard lock(mutex_);
      const auto it = streams_.find(native);
      if (it == streams_.end()) return;
      s = std::move(it->second);
      streams_.erase(it);
    }
    // Destroying a stream waits for its work even when a device synchronize() still holds it.
    s->wait_idle();
    failures_.forget(native, name());
  }

  void destroy_event(void* native) noexcept override { delete static_cast<host_event*>(native); }

 private:
  host_stream& stream_of(stream_view s) {
    if (!s.is_default()) return *static_cast<host_stream*>(s.native());
    // The default stream starts on first use: most users never touch it, and threads are scarce.
    const std::lock_guard lock(mutex_);
    if (!default_stream_) default_stream_ = std::make_shared<host_stream>(true, failures_);
    return *default_stream_;
  }

  void release(void* p, std::size_t bytes) noexcept {
    std::size_t rounded = 0;
    {
      const std::lock_guard lock(mutex_);
      const auto it = live_.find(p);
      if (it == live_.end()) {
        log::error("host device: deallocate of ", p, " which is not a live allocation (double free?)");
        return;
      }
      rounded = it->second;
      live_.erase(it);
    }
    if (align_up(bytes, device_alignment) != rounded) {
      log::error("host device: deallocate of ", p, " with ", bytes, " bytes, but it was allocated with ", rounded);
    }
    std::free(p);
    current_ -= rounded;
  }

  const std::uint64_t budget_;
  std::atomic<std::uint64_t> current_{0};
  std::atomic<std::uint64_t> peak_{0};
  mutable std::mutex mutex_;
  std::unordered_map<void*, std::size_t> live_;
  detail::stream_failures failures_;  // before the streams: their workers record into it
  std::unordered_map<void*, std::shared_ptr<host_stream>> streams_;
  std::shared_ptr<host_stream> default_stream_;
};

}  // namespace

std::unique_ptr<device> make_host_device(std::optional<std::uint64_t> budget_bytes) {
  return std::make_unique<host_device>(resolve_host_budget(budget_bytes));
}

}  // namespace zoe
