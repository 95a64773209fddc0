#pragma once
// What the io_uring and libaio backends share. Both hand operations to a kernel queue and learn
// of their completion later, so both need the same bookkeeping: a fixed table of slots (the slot
// index is the user data the kernel gives back), operations the kernel has not accepted yet
// (libaio may take part of a batch), results ready to hand out, and what the DeepSpeed knobs
// single_submit and overlap_events mean. A subclass only talks to its kernel interface.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <string_view>
#include <vector>

#include "zoe/io/engine_options.hpp"
#include "zoe/io/io_backend.hpp"

namespace zoe::io::detail {

/// queue_depth x intra_op_parallelism: the requests in flight DeepSpeed's knobs ask for. Throws
/// usage_error naming the knobs when it exceeds `kernel_limit` (what one ring or context holds).
[[nodiscard]] std::size_t async_capacity(const engine_options& options, std::size_t kernel_limit,
                                         std::string_view backend);

/// Thread-safety: as io_backend, one thread at a time.
class async_backend : public io_backend {
 public:
  [[nodiscard]] std::size_t capacity() const noexcept final { return slots_.size(); }
  void submit(std::span<const raw_op> ops) final;
  std::size_t reap(std::vector<raw_result>& out, std::size_t min_results) final;
  void notify_on_result(int eventfd) override { notify_fd_ = eventfd; }

 protected:
  async_backend(const engine_options& options, std::size_t capacity);

  /// Hands the slots to the kernel, in order, and returns how many it took (a prefix). A slot
  /// that failed to start (its -errno known at once) counts as taken and is reported through
  /// complete(). Returning fewer means "full for now"; the rest are offered again after a
  /// completion. Throws io_error if the kernel interface itself broke, and then only having
  /// taken none of the slots (the waiting operations then fail with its errno).
  virtual std::size_t start(std::span<const std::uint32_t> slots) = 0;
  /// Delivers finished operations through complete(): every one that is ready, and blocks until
  /// at least `min_completions` were delivered (0: never blocks). `min_completions` never exceeds
  /// in_kernel(). Throws io_error if the kernel interface itself broke.
  virtual void wait(std::size_t min_completions) = 0;

  /// Called first in every submit() and reap(), before any bookkeeping: a backend whose kernel
  /// object belongs to one thread (an io_uring single-issuer ring) checks the caller here.
  virtual void on_calling_thread() {}

  /// The operation in `slot` (valid from start() until its complete()).
  [[nodiscard]] const raw_op& op_in(std::uint32_t slot) const noexcept { return slots_[slot]; }
  /// Records the result of the operation in `slot` exactly as the kernel gave it (bytes or
  /// -errno) and frees the slot.
  void complete(std::uint32_t slot, std::int64_t result);
  /// complete() for a result the kernel never posted (an operation it refused to start): the
  /// kernel signals no eventfd for it, so submit() does before it returns.
  void complete_unposted(std::uint32_t slot, std::int64_t result);
  /// The eventfd to make readable when a result is ready (notify_on_result), or -1.
  [[nodiscard]] int notify_fd() const noexcept { return notify_fd_; }
  /// Operations the kernel holds (taken by start(), not yet complete()d).
  [[nodiscard]] std::size_t in_kernel() const noexcept { return in_kernel_; }
  /// Operations accepted by submit() that are not complete: in the kernel or waiting to enter it.
  [[nodiscard]] std::size_t unfinished() const noexcept { return in_kernel_ + waiting_.size(); }
  [[nodiscard]] bool overlap_events() const noexcept { return overlap_events_; }
  /// For subclass destructors: waits for everything in the kernel, because it may still be
  /// reading or writing caller memory. Logs (never throws) if the kernel interface fails.
  void drain_before_close(std::string_view backend) noexcept;

 private:
  /// Offers waiting operations to the kernel; never throws.
  void offer_waiting();
  void fail_waiting(const std::exception& e);

  std::vector<raw_op> slots_;
  std::vector<std::uint32_t> free_slots_;
  std::deque<std::uint32_t> waiting_;  ///< accepted by submit(), not yet by the kernel
  std::vector<std::uint32_t> offer_;
  std::vector<raw_result> ready_;
  std::size_t in_kernel_ = 0;
  bool unposted_ = false;  ///< ready_ holds a result no eventfd was signalled for
  int notify_fd_ = -1;
  bool single_submit_ = false;
  bool overlap_events_ = true;
};

}  // namespace zoe::io::detail
