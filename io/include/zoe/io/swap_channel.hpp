#pragma once
// One thread's way into the swap store: reads and writes of extents, asynchronous like io_engine,
// over one engine per store path. Writes record each chunk's checksum once they are known good;
// reads verify every chunk they touch before reporting success.

#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "zoe/io/io_request.hpp"
#include "zoe/io/swap_store.hpp"

namespace zoe::io {

class io_engine;

struct swap_request {
  io_op op = io_op::read;
  swap_extent extent;
  std::uint64_t offset = 0;      ///< within the extent
  std::span<std::byte> buffer;   ///< untouched by writes; stays owned by the caller
  std::uint64_t user_data = 0;
};

/// Driven by one thread at a time. The store must outlive the channel.
///
/// With checksums on, a read that starts or ends inside a chunk reads that chunk whole into
/// scratch memory of the channel (at most two chunks per read: its first and its last), verifies
/// it and copies out the part asked for; the whole chunks in between are read into the caller's
/// buffer and verified there.
class swap_channel {
 public:
  /// Throws what make_engine throws for the store's backend.
  explicit swap_channel(swap_store& store);
  /// Waits for everything in flight; never throws.
  ~swap_channel();
  swap_channel(const swap_channel&) = delete;
  swap_channel& operator=(const swap_channel&) = delete;

  /// Queues a request. Throws usage_error when it cannot start: unknown extent, a range outside
  /// it, or a write that does not start on a chunk boundary of the extent and cover whole chunks
  /// (or end at the extent's end). A read of never-written data completes as failed.
  void submit(const swap_request& request);
  /// Like io_engine::poll / wait. A completion that failed its checksum has corrupt == true.
  std::size_t poll(std::vector<io_completion>& out);
  std::size_t wait(std::vector<io_completion>& out, std::size_t min_count = 1);
  /// Submits, waits for all, throws io_error or corruption_error for the first failure.
  void run(std::span<const swap_request> requests);
  [[nodiscard]] std::size_t outstanding() const noexcept { return outstanding_; }
  /// Registers caller memory with every engine of the channel (io_engine::register_buffers), so
  /// requests from it use fixed buffers where the backend has them. Returns whether they do.
  bool register_buffers(std::span<const std::span<std::byte>> regions);
  /// The I/O backend the channel's engines took ("posix", ...).
  [[nodiscard]] std::string_view backend_name() const noexcept;

 private:
  struct pending;
  struct free_memory {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  using scratch_memory = std::unique_ptr<std::byte, free_memory>;

  void submit_range(std::uint32_t slot, std::uint64_t extent_offset, std::span<std::byte> buffer);
  [[nodiscard]] bool take_scratch(pending& p);
  void on_piece(const io_completion& c, std::vector<io_completion>& out);
  void finish(std::uint32_t slot, std::vector<io_completion>& out);
  std::size_t collect(std::vector<io_completion>& out, std::size_t min_count, bool block);
  // Blocks until nothing is outstanding (no count: requests may complete inside submit()).
  void collect_all(std::vector<io_completion>& out) { collect(out, std::numeric_limits<std::size_t>::max(), true); }

  swap_store& store_;
  std::vector<std::unique_ptr<io_engine>> engines_;
  std::vector<std::unique_ptr<pending>> slots_;
  std::vector<std::uint32_t> free_slots_;
  std::vector<io_completion> ready_;
  std::vector<io_completion> scratch_completions_;
  scratch_memory spare_scratch_;  ///< two chunks, kept for the next partial read
  std::size_t outstanding_ = 0;
};

}  // namespace zoe::io
