#include "async_backend.hpp"

#include <sys/eventfd.h>

#include <cerrno>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"

namespace zoe::io::detail {

std::size_t async_capacity(const engine_options& options, std::size_t kernel_limit, std::string_view backend) {
  options.validate();
  const std::size_t n = options.queue_depth * options.intra_op_parallelism;
  ZOE_EXPECTS(n <= kernel_limit, "queue_depth ", options.queue_depth, " x intra_op_parallelism ",
              options.intra_op_parallelism, " = ", n, " requests in flight is more than one ", backend,
              " queue holds (", kernel_limit, ")");
  return n;
}

async_backend::async_backend(const engine_options& options, std::size_t capacity)
    : slots_(capacity), single_submit_(options.single_submit), overlap_events_(options.overlap_events) {
  ZOE_ASSERT(capacity > 0);
  free_slots_.reserve(capacity);
  for (std::size_t i = capacity; i > 0; --i) free_slots_.push_back(static_cast<std::uint32_t>(i - 1));
  offer_.reserve(capacity);
  ready_.reserve(capacity);
}

void async_backend::submit(std::span<const raw_op> ops) {
  on_calling_thread();
  ZOE_EXPECTS(ops.size() <= free_slots_.size(), "submit of ", ops.size(), " operations with only ", free_slots_.size(),
              " of ", slots_.size(), " slots free");
  // io_backend::submit: throw only having taken none (free_slots_ never reallocates: it was
  // reserved for every slot).
  const std::size_t waiting_before = waiting_.size();
  try {
    for (const raw_op& op : ops) {
      waiting_.push_back(free_slots_.back());
      free_slots_.pop_back();
      slots_[waiting_.back()] = op;
    }
  } catch (...) {
    for (; waiting_.size() > waiting_before; waiting_.pop_back()) free_slots_.push_back(waiting_.back());
    throw;
  }
  offer_waiting();  // never throws: from here on every op comes back from reap()
  if (unposted_ && notify_fd_ >= 0) static_cast<void>(::eventfd_write(notify_fd_, 1));
  unposted_ = false;
}

void async_backend::offer_waiting() {
  while (!waiting_.empty()) {
    // single_submit: one kernel call per operation, as DeepSpeed's knob means; otherwise the
    // whole batch in one call.
    const std::size_t n = single_submit_ ? 1 : waiting_.size();
    offer_.assign(waiting_.begin(), waiting_.begin() + static_cast<std::ptrdiff_t>(n));
    in_kernel_ += n;  // before start(): complete() of a slot that failed to start counts down
    std::size_t taken = 0;
    try {
      taken = start(offer_);
    } catch (const std::exception& e) {
      in_kernel_ -= n;  // start() throws having taken none of the offer
      fail_waiting(e);
      return;
    }
    ZOE_ASSERT(taken <= n);
    in_kernel_ -= n - taken;
    waiting_.erase(waiting_.begin(), waiting_.begin() + static_cast<std::ptrdiff_t>(taken));
    if (taken < n) {
      if (in_kernel_ > 0) return;  // a completion will make room; reap offers the rest again
      if (taken == 0) {
        // The kernel refuses more and holds nothing whose completion would make room: waiting
        // would never end. Report it; the engine retries EAGAIN a bounded number of times.
        const std::uint32_t slot = waiting_.front();
        waiting_.pop_front();
        ++in_kernel_;
        complete_unposted(slot, -EAGAIN);
      }
      // Otherwise it took some and they all finished at once: offer the rest straight away.
    }
  }
}

void async_backend::fail_waiting(const std::exception& e) {
  // The ops were accepted, so they come back as results; the reason goes to the log because a
  // result carries only an errno (the engine's message names the file and offset).
  const auto* io = dynamic_cast<const io_error*>(&e);
  const int os_errno = io != nullptr && io->os_errno() != 0 ? io->os_errno() : EIO;
  log::error("the ", name(), " backend could not start ", waiting_.size(), " operations, which fail with ",
             errno_text(os_errno), ": ", e.what());
  for (; !waiting_.empty(); waiting_.pop_front()) {
    ++in_kernel_;
    complete_unposted(waiting_.front(), -os_errno);
  }
}

void async_backend::complete(std::uint32_t slot, std::int64_t result) {
  ready_.push_back({slots_[slot].tag, result});
  free_slots_.push_back(slot);
  --in_kernel_;
}

void async_backend::complete_unposted(std::uint32_t slot, std::int64_t result) {
  complete(slot, result);
  unposted_ = true;
}

std::size_t async_backend::reap(std::vector<raw_result>& out, std::size_t min_results) {
  on_calling_thread();
  // overlap_events off: DeepSpeed's meaning is "wait for the whole batch before going on", so a
  // blocking reap waits for everything outstanding.
  const std::size_t want = (!overlap_events_ && min_results > 0) ? ready_.size() + unfinished() : min_results;
  bool polled = false;
  // A blocking reap returns as soon as enough are ready; a non-blocking one looks once.
  while (ready_.size() < want || (want == 0 && !polled)) {
    offer_waiting();  // completions made room for operations the kernel refused earlier
    if (in_kernel_ == 0) {
      ZOE_CHECK(waiting_.empty(), internal_error, "operations waiting with none in the kernel");
      break;  // nothing left to wait for (asked for more than was submitted)
    }
    const std::size_t missing = want > ready_.size() ? want - ready_.size() : 0;
    wait(std::min(missing, in_kernel_));
    polled = true;
  }
  const std::size_t n = ready_.size();
  out.insert(out.end(), ready_.begin(), ready_.end());
  ready_.clear();
  unposted_ = false;
  return n;
}

void async_backend::drain_before_close(std::string_view backend) noexcept {
  try {
    waiting_.clear();  // never started: nothing to wait for
    while (in_kernel_ > 0) wait(in_kernel_);
  } catch (const std::exception& e) {
    log::error("closing the ", backend, " backend with ", in_kernel_,
               " operations in flight, which may still touch their buffers: ", e.what());
  }
}

}  // namespace zoe::io::detail
