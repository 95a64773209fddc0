// The mover's I/O thread: every piece's state machine, the priority order and the in-flight budget.
#include "zoe/engine/swap/mover.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <utility>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine {

namespace {
std::size_t class_index(move_priority p) noexcept { return static_cast<std::size_t>(p); }
}  // namespace

mover::mover(io::swap_store* store, allocators::pinned_host_resource* pinned, device* dev, mover_options options)
    : store_(store), dev_(dev), specs_(std::move(options.pools)) {
  for (const mover_pool_spec& s : specs_) {
    ZOE_EXPECTS(s.slot_bytes > 0 || s.slot_count == 0, "mover pool '", s.key, "': slots of zero bytes");
    ZOE_EXPECTS(pinned != nullptr || s.slot_count == 0, "mover pool '", s.key, "' needs pinned memory");
    if (s.slot_count == 0) {
      pools_.emplace_back();
      continue;
    }
    pools_.push_back(std::make_unique<allocators::buffer_pool>(
        *pinned, allocators::buffer_pool_options{
                     .buffer_count = s.slot_count, .buffer_size = s.slot_bytes, .name = str("mover.", s.key)}));
  }
  if (store_ != nullptr) {
    paths_ = std::max<std::size_t>(1, store_->options().paths.size());
    // The store's io.queue_depth is the config's aio.queue_depth.
    const std::size_t depth = store_->options().io.queue_depth;
    budget_ = depth * paths_;
    // One request per path stays free for demand pieces (when there is more than one to share).
    background_budget_ = depth > 1 ? budget_ - paths_ : budget_;
  }
  pool_blocked_.assign(pools_.size(), false);
  wake_ = std::make_shared<const wake_signal>();
  thread_ = std::jthread([this] { run_thread(); });
}

mover::~mover() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake();
  thread_.join();
}

std::size_t mover::pool(const std::string& key) const {
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    if (specs_[i].key == key) return i;
  }
  throw usage_error(str("the mover has no pool 'mover.", key, "'"));
}

bool mover::has_pool(const std::string& key) const noexcept {
  return std::any_of(specs_.begin(), specs_.end(), [&](const mover_pool_spec& s) { return s.key == key; });
}

const mover_pool_spec& mover::pool_spec(std::size_t pool) const {
  ZOE_EXPECTS(pool < specs_.size(), "the mover has no pool ", pool);
  return specs_[pool];
}

std::size_t mover::pool_low_water(std::size_t pool) const {
  ZOE_EXPECTS(pool < specs_.size(), "the mover has no pool ", pool);
  return pools_[pool] ? pools_[pool]->stats().min_available : 0;
}

std::uint64_t mover::chunk_bytes() const noexcept { return store_ != nullptr ? store_->options().io.block_size : 4096; }

void mover::submit(piece p) {
  ZOE_EXPECTS(p.bytes > 0, "mover: a piece of ", p.what, " without bytes");
  ZOE_EXPECTS(store_ != nullptr || (!p.read && !p.write), "mover: ", p.what,
              " has NVMe I/O but there is no swap store");
  if (p.pool == no_pool) {
    ZOE_EXPECTS(p.buffer.size() >= p.bytes, "mover: a piece of ", p.what, " of ", p.bytes, " bytes in a buffer of ",
                p.buffer.size());
  } else {
    ZOE_EXPECTS(p.pool < specs_.size() && pools_[p.pool], "mover: a piece of ", p.what, " names pool ", p.pool,
                ", which has no slots");
    ZOE_EXPECTS(p.bytes <= specs_[p.pool].slot_bytes, "mover: a piece of ", p.what, " of ", p.bytes,
                " bytes does not fit a slot of 'mover.", specs_[p.pool].key, "' (", specs_[p.pool].slot_bytes, ")");
  }
  bool first = false;
  {
    const std::lock_guard lock(mutex_);
    first = queued_.empty();
    queued_.push_back(active{.p = std::move(p), .seq = next_seq_++});
  }
  // The I/O thread takes the whole queue at once: a wake is owed only for the first piece in it.
  if (first) wake();
}

void mover::run(piece p) {
  auto outcome = std::make_shared<std::promise<std::optional<carried_error>>>();
  std::future<std::optional<carried_error>> over = outcome->get_future();
  auto done = std::move(p.done);
  p.done = [outcome, done = std::move(done)](const carried_error* e) {
    if (done) done(e);
    outcome->set_value(e != nullptr ? std::optional<carried_error>(*e) : std::nullopt);
  };
  submit(std::move(p));
  if (std::optional<carried_error> failure = over.get()) failure->raise();
}

mover_stats mover::stats() const {
  const std::lock_guard lock(mutex_);
  return stats_;
}

std::string mover::backend_name() const {
  const std::lock_guard lock(mutex_);
  return backend_;
}

mover::wake_signal::wake_signal() : fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
  if (fd < 0) throw io_error(str("mover: eventfd failed: ", std::strerror(errno)), errno);
}

mover::wake_signal::~wake_signal() { ::close(fd); }

void mover::wake_signal::signal() const noexcept {
  const std::uint64_t one = 1;
  // A full counter (never, in practice) is already readable: nothing is lost.
  [[maybe_unused]] const auto n = ::write(fd, &one, sizeof one);
}

void mover::run_thread() noexcept {
  std::unique_ptr<io::swap_channel> channel;
  if (store_ != nullptr) {
    try {
      // The channel lives and dies on this thread: its io_uring ring has one issuer.
      channel = std::make_unique<io::swap_channel>(*store_);
      std::vector<std::span<std::byte>> regions;
      for (const auto& pool : pools_) {
        if (!pool) continue;
        const auto slots = pool->buffers();
        regions.emplace_back(slots.front().data(), static_cast<std::size_t>(slots.back().data() + slots.back().size() -
                                                                            slots.front().data()));
      }
      if (!regions.empty()) channel->register_buffers(regions);
      const std::lock_guard lock(mutex_);
      backend_ = std::string(channel->backend_name());
    } catch (...) {
      broken_ = carried_error::of(std::current_exception());
      channel.reset();
    }
  }
  for (;;) {
    try {
      loop(channel.get());
      return;
    } catch (...) {
      // The channel broke: destroying it waits for its requests, after which no buffer is in use.
      broken_ = carried_error::of(std::current_exception());
      log::error("mover: the swap channel failed; every NVMe piece fails from now on: ", broken_->message);
      channel.reset();
      for (auto& a : active_) {
        a->at_kernel = a->background = false;
        if (a->at == stage::reading || a->at == stage::writing) fail(*a, *broken_);
      }
      in_flight_ = 0;
      background_in_flight_ = 0;
    }
  }
}

void mover::loop(io::swap_channel* channel) {
  while (take_queued()) {
    // Requests back from the kernel and completions first, so the requests they free go out in
    // this pass. The channel lists a request as back before it verifies it, and verifies it only
    // in a later poll: its share of the budget is refilled before the hashing, not after.
    bool progressed = false;
    if (channel != nullptr && channel->outstanding() > 0) {
      done_.clear();
      landed_.clear();
      channel->poll(done_, landed_);
      for (const std::uint64_t user_data : landed_) {
        give_back_request(*reinterpret_cast<active*>(user_data));  // NOLINT(performance-no-int-to-ptr)
      }
      for (const io::io_completion& c : done_) on_io(c);
      progressed = !landed_.empty() || !done_.empty();
    }
    progressed |= advance(channel);
    retire();
    note_busy(channel);
    if (progressed) continue;
    sleep(channel);
  }
}

void mover::sleep(io::swap_channel* channel) {
  const bool io_out = channel != nullptr && channel->outstanding() > 0;
  // Wakes on a submission, a raise, the end of a hook's device work (the wake fd) or the channel.
  pollfd fds[2] = {{.fd = wake_->fd, .events = POLLIN, .revents = 0}, {.fd = -1, .events = POLLIN, .revents = 0}};
  nfds_t n = 1;
  if (io_out) {
    fds[1].fd = channel->notify_fd();
    n = 2;
  }
  if (::poll(fds, n, -1) < 0 && errno != EINTR) {
    throw io_error(str("mover: poll failed: ", std::strerror(errno)), errno);
  }
  if ((fds[0].revents & POLLIN) != 0) {
    std::uint64_t count = 0;
    [[maybe_unused]] const auto r = ::read(wake_->fd, &count, sizeof count);
  }
}

std::uint64_t mover::new_group() noexcept {
  const std::lock_guard lock(mutex_);
  return next_group_++;
}

void mover::raise(std::uint64_t group) noexcept {
  if (group == 0) return;
  try {
    const std::lock_guard lock(mutex_);
    raised_.push_back(group);
  } catch (const std::bad_alloc&) {
    return;  // the pieces keep their class: slower, never wrong
  }
  wake();
}

bool mover::take_queued() {
  const std::lock_guard lock(mutex_);
  for (active& q : queued_) {
    // New pieces come after every piece of their class and before the lower classes: (priority, seq) order.
    const auto at = std::upper_bound(
        active_.begin(), active_.end(), q.p.priority,
        [](move_priority p, const std::unique_ptr<active>& a) { return class_index(p) < class_index(a->p.priority); });
    active_.insert(at, std::make_unique<active>(std::move(q)));
  }
  queued_.clear();
  // After the pieces queued before the raise: every piece of the group submitted so far is here.
  if (!raised_.empty()) {
    apply_raises(raised_);
    raised_.clear();
  }
  return !(stopping_ && active_.empty());
}

void mover::apply_raises(const std::vector<std::uint64_t>& groups) {
  bool changed = false;
  for (auto& a : active_) {
    if (a->p.priority == move_priority::demand || a->p.group == 0) continue;
    if (std::find(groups.begin(), groups.end(), a->p.group) == groups.end()) continue;
    a->p.priority = move_priority::demand;
    changed = true;
    // A request of it already in flight is the compute's now: it leaves the background's share,
    // which may start another prefetch in its place (the drive keeps its whole queue depth while
    // the compute waits, and a demand piece still finds a request free unless demand holds them).
    if (a->background) {
      a->background = false;
      --background_in_flight_;
    }
  }
  if (!changed) return;
  std::stable_sort(
      active_.begin(), active_.end(), [](const std::unique_ptr<active>& x, const std::unique_ptr<active>& y) {
        return std::pair(class_index(x->p.priority), x->seq) < std::pair(class_index(y->p.priority), y->seq);
      });
}

bool mover::advance(io::swap_channel* channel) {
  bool progressed = false;
  // Two passes: the requests first, then the hooks. A hook's copy wakes the device's stream, which
  // may take the CPU from this thread; the drive should not wait on that for its next request.
  for (const bool hooks : {false, true}) {
    std::fill(pool_blocked_.begin(), pool_blocked_.end(), false);
    for (auto& owned : active_) {
      active& a = *owned;
      if (a.at == stage::want_slot && a.p.pool != no_pool && pool_blocked_[a.p.pool]) continue;
      progressed |= step(a, channel, hooks);
      // A piece still waiting for a slot holds the pool for itself: no later piece takes one.
      if (a.at == stage::want_slot) pool_blocked_[a.p.pool] = true;
    }
  }
  return progressed;
}

bool mover::budget_for(move_priority cls) const noexcept {
  if (in_flight_ >= budget_) return false;
  return cls == move_priority::demand || background_in_flight_ < background_budget_;
}

bool mover::step(active& a, io::swap_channel* channel, bool hooks) {
  bool progressed = false;
  for (;;) {
    switch (a.at) {
      case stage::want_slot: {
        if (a.p.pool == no_pool) {
          a.bytes = a.p.buffer.first(a.p.bytes);
        } else {
          std::optional<allocators::buffer_lease> lease = pools_[a.p.pool]->try_acquire();
          if (!lease) {
            if (!a.waited) {
              a.waited = true;
              ++unpublished_.slot_waits;
            }
            return progressed;
          }
          a.lease = std::move(*lease);
          a.bytes = a.lease.span().first(a.p.bytes);
        }
        a.at = a.p.read ? stage::want_read : stage::want_hook;
        break;
      }
      case stage::want_read:
      case stage::want_write: {
        const bool read = a.at == stage::want_read;
        if (!channel) {
          fail(a, broken_.value_or(carried_error{error_category::internal, 0, "the mover has no swap channel"}));
          return true;
        }
        if (!budget_for(a.p.priority)) return progressed;
        submit_io(a, *channel, read ? io::io_op::read : io::io_op::write);
        return true;
      }
      case stage::want_hook: {
        if (!hooks) return progressed;
        std::optional<stream_view> busy;
        try {
          if (a.p.hook) busy = a.p.hook(a.bytes);
          if (busy) {
            ZOE_ASSERT(dev_ != nullptr);
            // A task after the hook's work says the bytes are free and wakes this thread: nothing
            // polls the device. It holds the flag and the wake fd, never the piece or the mover.
            a.released = std::make_shared<std::atomic<bool>>(false);
            dev_->launch_host(*busy, [released = a.released, wake = wake_] {
              released->store(true, std::memory_order_release);
              wake->signal();
            });
          }
        } catch (...) {
          const carried_error e = carried_error::of(std::current_exception());
          // The slot goes back when the piece fails: not before the work already queued on it is over.
          if (busy) settle(*busy);
          fail(a, e);
          return true;
        }
        if (busy) {
          ++hooked_;
          a.at = stage::hooked;
          // Without a write the piece is done now: its device work is ordered by the client's stream.
          if (!a.p.write) report(a, nullptr);
        } else if (a.p.write) {
          a.at = stage::want_write;
        } else {
          report(a, nullptr);
          a.at = stage::over;
        }
        progressed = true;
        break;
      }
      case stage::hooked: {
        if (!a.released->load(std::memory_order_acquire)) return progressed;
        a.released.reset();
        --hooked_;
        a.at = a.p.write && !a.reported ? stage::want_write : stage::over;
        progressed = true;
        break;
      }
      case stage::reading:
      case stage::writing:
      case stage::over: return progressed;
    }
  }
}

void mover::settle(stream_view stream) noexcept {
  try {
    dev_->synchronize(stream);
  } catch (const std::exception& e) {
    log::error("mover: waiting for a failed hook's device work: ", e.what());
  }
}

void mover::submit_io(active& a, io::swap_channel& channel, io::io_op op) {
  const io_range& r = op == io::io_op::read ? *a.p.read : *a.p.write;
  try {
    channel.submit({op, r.extent, r.offset, a.bytes, reinterpret_cast<std::uint64_t>(&a)});
  } catch (...) {
    // Refused with nothing in flight: the piece ends here.
    fail_io(a, op, carried_error::of(std::current_exception()));
    return;
  }
  a.at = op == io::io_op::read ? stage::reading : stage::writing;
  a.at_kernel = true;
  ++in_flight_;
  a.background = a.p.priority != move_priority::demand;
  if (a.background) ++background_in_flight_;
  // Only a new peak is published (at most budget_ times), not every request.
  if (in_flight_ > peak_in_flight_) {
    peak_in_flight_ = in_flight_;
    const std::lock_guard lock(mutex_);
    stats_.peak_in_flight = peak_in_flight_;
  }
}

void mover::on_io(const io::io_completion& c) {
  active& a = *reinterpret_cast<active*>(c.user_data);  // NOLINT(performance-no-int-to-ptr)
  give_back_request(a);  // when the channel did not list it as back from the kernel first
  const bool read = a.at == stage::reading;
  if (!c.ok()) {
    fail_io(a, read ? io::io_op::read : io::io_op::write,
            carried_error{c.corrupt ? error_category::corrupt : error_category::io, c.os_errno, c.message});
    return;
  }
  (read ? unpublished_.bytes_read : unpublished_.bytes_written) += a.bytes.size();
  if (read) {
    a.at = stage::want_hook;
    return;
  }
  report(a, nullptr);
  a.at = stage::over;
}

void mover::give_back_request(active& a) noexcept {
  if (!a.at_kernel) return;
  a.at_kernel = false;
  --in_flight_;
  if (a.background) --background_in_flight_;
  a.background = false;  // only while its request is at the kernel
}

void mover::fail_io(active& a, io::io_op op, const carried_error& cause) {
  const bool read = op == io::io_op::read;
  const io_range& r = read ? *a.p.read : *a.p.write;
  carried_error e = cause;
  e.message = str(read ? "reading " : "writing ", a.p.what, " (", a.bytes.size(), " bytes) ", read ? "from" : "to",
                  " swap extent ", r.extent.id, " at byte ", r.offset, " of the extent failed: ", cause.message);
  fail(a, e);
}

void mover::fail(active& a, const carried_error& e) {
  report(a, &e);
  a.at = stage::over;
}

void mover::report(active& a, const carried_error* e) noexcept {
  if (a.reported) return;
  a.reported = true;
  {
    // The counts since the last report go out with this one, under one lock: every piece done is
    // counted before its client hears of it.
    const std::lock_guard lock(mutex_);
    stats_.bytes_read += std::exchange(unpublished_.bytes_read, 0);
    stats_.bytes_written += std::exchange(unpublished_.bytes_written, 0);
    stats_.slot_waits += std::exchange(unpublished_.slot_waits, 0);
    ++stats_.pieces;
    if (e != nullptr) ++stats_.failed_pieces;
  }
  if (a.p.done) a.p.done(e);
}

void mover::retire() {
  std::erase_if(active_, [](const std::unique_ptr<active>& a) { return a->at == stage::over; });
}

void mover::note_busy(const io::swap_channel* channel) {
  const auto now = std::chrono::steady_clock::now();
  if (channel != nullptr && channel->outstanding() > 0) {
    if (!busy_since_) busy_since_ = now;
    return;
  }
  if (!busy_since_) return;
  const std::lock_guard lock(mutex_);
  stats_.io_busy_seconds += std::chrono::duration<double>(now - *busy_since_).count();
  busy_since_.reset();
}

}  // namespace zoe::engine
