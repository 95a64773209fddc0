#pragma once
// An io_backend that wraps another and injects failures: an errno (EIO, ENOSPC, EINTR, ...), a
// short transfer, a submit() that throws (a broken backend), or an operation held back until the
// test releases it, for operations that touch a chosen file range. It also checks the engine
// against the io_backend contract (reap never asks for more than is in flight). With no rules it
// is a plain pass-through, so the typed backend suite runs on it unchanged.

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "zoe/io/io_backend.hpp"

namespace zoe::testing {

struct fault_rule {
  std::optional<io::io_op> op;  ///< only this kind (both if empty)
  std::uint64_t begin = 0;      ///< file range the operation must touch
  std::uint64_t end = std::numeric_limits<std::uint64_t>::max();
  int inject_errno = 0;      ///< fail with -inject_errno without doing anything
  std::size_t short_to = 0;  ///< or: transfer only this many bytes (really) and report that
  /// or: submit() throws io_error (with inject_errno, EIO if 0) and takes none of its batch, as
  /// io_backend::submit says a broken backend does
  bool throw_on_submit = false;
  /// or: keep the operation back, in flight but not started, until fault_plan::release_held()
  bool hold = false;
  int times = 1;  ///< how many operations it hits; -1 for all
};

/// Rules shared between the test and the backend it handed to an engine. Thread-safe.
class fault_plan {
 public:
  void add(const fault_rule& rule);
  /// The rule that applies to `op`, consuming one of its `times`, if any.
  [[nodiscard]] std::optional<fault_rule> take(const io::raw_op& op);
  [[nodiscard]] int fired() const;
  /// Drops the rules (fired() keeps its count), e.g. before the test reads back what it wrote.
  void clear();
  /// Lets the held operations go on: the next submit() or reap() starts them, and every backend's
  /// notify fd says so.
  void release_held();
  [[nodiscard]] bool held_released() const;
  /// The eventfd a backend of this plan signals its results on (while the test runs, it stays open).
  void notify_on_release(int eventfd);

 private:
  mutable std::mutex mutex_;
  std::vector<fault_rule> rules_;
  int fired_ = 0;
  bool release_ = false;
  std::vector<int> notify_fds_;
};

class fault_injecting_backend final : public io::io_backend {
 public:
  fault_injecting_backend(std::unique_ptr<io::io_backend> inner, std::shared_ptr<fault_plan> plan);

  [[nodiscard]] std::string_view name() const noexcept override { return inner_->name(); }
  [[nodiscard]] std::size_t capacity() const noexcept override { return inner_->capacity(); }
  void submit(std::span<const io::raw_op> ops) override;
  /// Throws internal_error if asked to block for more results than are in flight (the engine
  /// broke the io_backend contract; the real backends would hang) or for held operations only.
  std::size_t reap(std::vector<io::raw_result>& out, std::size_t min_results) override;
  /// Passes the eventfd on to the wrapped backend, and signals it for results it injects.
  void notify_on_result(int eventfd) override;
  bool register_buffers(std::span<const std::span<std::byte>> regions) override {
    return inner_->register_buffers(regions);
  }

  /// Operations held back by a `hold` rule right now.
  [[nodiscard]] std::size_t held() const noexcept { return held_.size(); }

 private:
  void forward(std::span<const io::raw_op> ops);
  void start_released();

  std::unique_ptr<io::io_backend> inner_;
  std::shared_ptr<fault_plan> plan_;
  std::vector<io::raw_result> injected_;
  std::vector<io::raw_op> forward_;
  std::vector<io::raw_op> held_;
  std::size_t inner_in_flight_ = 0;
  int notify_fd_ = -1;
};

}  // namespace zoe::testing
