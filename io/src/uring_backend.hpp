#pragma once
// The io_uring backend (liburing). One ring per backend, and so one per engine, which is one per
// worker thread: the engine is driven by one thread, so the ring has a single issuer.
//
// intra_op_parallelism N gives one ring of queue_depth x N entries rather than N rings. N rings
// driven by one thread would cost N submit calls where one does, and a thread cannot block on N
// rings at once without an eventfd and epoll on top; the kernel spreads the requests of one ring
// over the device's hardware queues anyway. So the N x depth requests DeepSpeed's N threads would
// keep in flight are in flight here with one syscall per submit or wait and no helper thread.
//
// Files are registered lazily (a sparse table, one slot per file the first time it is used) and
// buffers when the caller registers them; operations inside a registered buffer use
// READ_FIXED / WRITE_FIXED, all others plain READ / WRITE. Every CQE's res goes to the engine
// unchanged.
//
// Thread-safety: the thread that last drove the ring is its issuer; with DEFER_TASKRUN only it
// can wait for completions. An idle backend follows a new driving thread (a fresh ring); a busy
// one refuses other threads (usage_error), and its destructor on another thread, unable to wait
// and unwilling to close the ring under operations still writing caller memory, terminates.

#include <liburing.h>

#include <cstdint>
#include <string>
#include <vector>

#include "async_backend.hpp"

namespace zoe::io::detail {

/// "SINGLE_ISSUER|DEFER_TASKRUN|..." for the IORING_SETUP_* flags we choose from.
[[nodiscard]] std::string setup_flag_names(unsigned flags);

class uring_backend final : public async_backend {
 public:
  /// Sets up the ring. Throws io_error naming the reason when the kernel refuses io_uring
  /// (disabled by sysctl kernel.io_uring_disabled or a seccomp filter: EPERM / ENOSYS), and
  /// usage_error when queue_depth x intra_op_parallelism exceeds what a ring holds.
  explicit uring_backend(const engine_options& options);
  ~uring_backend() override;

  [[nodiscard]] std::string_view name() const noexcept override { return "uring"; }
  /// Registers the regions as fixed buffers (split into pieces of at most 1 GiB, the kernel's
  /// limit), replacing any registered before. Returns false, after one warning, when the kernel
  /// refuses (RLIMIT_MEMLOCK, file-backed memory); I/O then uses plain reads and writes. Call only
  /// with nothing in flight (throws usage_error otherwise).
  bool register_buffers(std::span<const std::span<std::byte>> regions) override;
  /// Registers the eventfd with the ring (io_uring_register_eventfd), and with every ring the
  /// backend opens later for a new driving thread. Throws io_error if the kernel refuses.
  void notify_on_result(int eventfd) override;

  /// The IORING_SETUP_* flags the ring was created with.
  [[nodiscard]] unsigned setup_flags() const noexcept { return flags_; }
  /// Operations sent as READ_FIXED / WRITE_FIXED, and with a registered file, since creation.
  [[nodiscard]] std::uint64_t fixed_buffer_ops() const noexcept { return fixed_buffer_ops_; }
  [[nodiscard]] std::uint64_t fixed_file_ops() const noexcept { return fixed_file_ops_; }

 private:
  struct registered_file {
    int fd = -1;
    std::uint64_t identity = 0;  ///< open_file_identity() when registered
    int slot = -1;               ///< index in the ring's file table; -1: not registrable
  };
  struct registered_buffer {
    std::uintptr_t begin = 0;
    std::uintptr_t end = 0;
    int index = 0;
  };

  std::size_t start(std::span<const std::uint32_t> slots) override;
  void wait(std::size_t min_completions) override;
  void on_calling_thread() override { follow_driving_thread(); }

  void open_ring();
  void close_ring() noexcept;
  void follow_driving_thread();
  bool register_regions();
  void register_notify_fd();
  void forget_closed_files();
  [[nodiscard]] int file_slot(int fd);
  [[nodiscard]] int buffer_index(const std::byte* buffer, std::size_t length) const;
  std::size_t deliver_completions();

  io_uring ring_{};
  bool ring_open_ = false;
  unsigned flags_ = 0;
  std::uint64_t owner_ = 0;  ///< the thread that is the ring's single issuer (SINGLE_ISSUER)

  bool file_table_ = false;
  std::vector<registered_file> files_;
  std::vector<int> free_file_slots_;
  std::uint64_t closes_seen_ = 0;

  std::vector<std::span<std::byte>> regions_;  ///< as the caller gave them, to register again
  std::vector<registered_buffer> buffers_;     ///< sorted by begin

  std::uint64_t fixed_buffer_ops_ = 0;
  std::uint64_t fixed_file_ops_ = 0;
};

}  // namespace zoe::io::detail
