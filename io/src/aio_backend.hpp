#pragma once
// The libaio backend. One aio context per backend (so one per engine, one per worker thread)
// with queue_depth x intra_op_parallelism events, for the reason uring_backend.hpp gives for one
// ring: one thread drives the engine, and one io_submit / io_getevents then serves all the
// requests DeepSpeed's N threads would keep in flight, with no helper thread.
//
// libaio is asynchronous only with O_DIRECT; on a buffered file io_submit does the I/O itself
// before returning (still correct, just not overlapped).

#include <libaio.h>

#include <cstdint>
#include <vector>

#include "async_backend.hpp"

namespace zoe::io::detail {

/// The result of an io_event as the engine expects it: bytes transferred (possibly short) or
/// -errno. libaio declares res and res2 unsigned; the kernel fills them as signed 64-bit values.
/// res < 0 is the error. res2 is 0 for reads and writes on current kernels, but some drivers
/// used it for a second status, so a negative res2 fails the operation too, and any other
/// non-zero res2 is treated as EIO rather than trusted.
[[nodiscard]] std::int64_t aio_event_result(unsigned long res, unsigned long res2) noexcept;

class aio_backend final : public async_backend {
 public:
  /// io_setup. Throws io_error naming the reason when the kernel refuses (ENOSYS: no aio;
  /// EAGAIN: fs.aio-max-nr reached), usage_error when the knobs ask for too many events.
  explicit aio_backend(const engine_options& options);
  ~aio_backend() override;

  [[nodiscard]] std::string_view name() const noexcept override { return "aio"; }

 private:
  std::size_t start(std::span<const std::uint32_t> slots) override;
  void wait(std::size_t min_completions) override;
  /// Hands finished events to complete(), blocking until `min_count`; returns how many, or -errno.
  int deliver(int min_count);

  io_context_t context_ = nullptr;
  std::vector<iocb> iocbs_;  ///< one per slot, so the kernel's iocb pointer leads back to it
  std::vector<iocb*> batch_;
  std::vector<io_event> events_;
};

}  // namespace zoe::io::detail
