#pragma once
// What `zoe-bench io` moves data to and from: the raw engine on one file, or the swap store
// (checksums on) through one channel per thread. Both are driven per thread, like the engine.

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "zoe/io/engine_options.hpp"
#include "zoe/io/io_request.hpp"

namespace zoe::bench {

class io_target {
 public:
  virtual ~io_target() = default;
  io_target() = default;
  io_target(const io_target&) = delete;
  io_target& operator=(const io_target&) = delete;

  /// "raw" or "store", as the JSON "mode".
  [[nodiscard]] virtual std::string mode() const = 0;
  [[nodiscard]] virtual std::string engine_name() const = 0;
  [[nodiscard]] virtual bool direct() const = 0;
  /// Where the data lives, for messages.
  [[nodiscard]] virtual std::string where() const = 0;
  /// A line for the progress output about what setting the target up cost, if anything.
  [[nodiscard]] virtual std::string setup_note() const { return {}; }
  /// True when the target already holds `size` bytes of a complete earlier run (raw file only).
  [[nodiscard]] virtual bool holds_earlier_run() const = 0;

  /// Per-thread queue: `thread` indexes the worker's own engine or channel.
  virtual void submit(std::size_t thread, io::io_op op, std::span<std::byte> buffer, std::uint64_t offset,
                      std::uint64_t tag) = 0;
  virtual void wait(std::size_t thread, std::vector<io::io_completion>& out) = 0;
  [[nodiscard]] virtual std::size_t outstanding(std::size_t thread) const = 0;
  /// Registers the benchmark buffers once with every engine (fixed buffers where the backend
  /// has them), as the swap store and buffer pools will.
  virtual void register_buffers(std::span<const std::span<std::byte>> regions) = 0;
  /// Called once after a timed write pass (buffered I/O syncs here).
  virtual void after_write() {}
};

/// DIR/zoe-bench.dat through one engine per thread.
std::unique_ptr<io_target> make_raw_target(const std::filesystem::path& dir, std::uint64_t size, bool buffered,
                                           const std::string& engine, const io::engine_options& options,
                                           std::size_t threads);

/// A swap store in DIR holding one extent of `size` bytes, one channel per thread.
std::unique_ptr<io_target> make_store_target(const std::filesystem::path& dir, std::uint64_t size, bool buffered,
                                             const std::string& engine, const io::engine_options& options,
                                             std::size_t threads);

}  // namespace zoe::bench
