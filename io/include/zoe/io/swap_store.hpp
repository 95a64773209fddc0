#pragma once
// The swap store: where the tiers keep shards on NVMe. Preallocated swap files under one or more
// directories (striped in block_size units, one I/O queue per directory), an extent allocator
// inside them, and an XXH3 checksum per block_size chunk of every extent, written on every write
// and verified on every read. Files live unlinked in a locked per-process folder, so a killed
// process leaves nothing behind once the next run starts.

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "zoe/io/engine_options.hpp"
#include "zoe/io/extent_allocator.hpp"
#include "zoe/io/io_backend.hpp"

namespace zoe::io {

class file;
class io_engine;
class swap_channel;
namespace detail {
class swap_directory;
struct extent_record;
}  // namespace detail

struct swap_store_options {
  std::vector<std::filesystem::path> paths;  ///< one folder per drive; data is striped across them
  std::uint64_t capacity = 0;                ///< bytes in all (rounded up to whole stripes)
  std::string engine = "auto";               ///< I/O backend for the channels ("auto": chosen once, by the store)
  engine_options io;                         ///< io.block_size is also the checksum chunk and stripe unit
  bool checksums = true;                     ///< XXH3 per chunk, verified on every read
  bool prewrite = true;                      ///< write the files once at creation (see prewrite_seconds)
  bool direct = true;                        ///< O_DIRECT (falls back to buffered where refused)
  /// Put in the per-process folder's name, zoe-swap-<label>-<pid>-<random> (empty: no label), so
  /// that processes sharing a path are told apart by what they are: the engine gives "rank-<r>".
  /// Letters, digits, '-' and '_' only, at most 64 (usage_error naming it otherwise).
  std::string folder_label;
  /// Optional: wraps every backend the store makes (for its channels and the prewrite), e.g. in a
  /// fault-injecting backend for tests. Called from the thread that makes the engine.
  std::function<std::unique_ptr<io_backend>(std::unique_ptr<io_backend>)> wrap_backend;
};

/// A handle to space in the store. Plain value; valid until swap_store::free.
struct swap_extent {
  std::uint64_t id = 0;
  std::uint64_t bytes = 0;
};

/// Thread-safe: allocate, free and open channels from any thread. Each swap_channel is driven by
/// one thread, like an io_engine.
class swap_store {
 public:
  /// Chooses the I/O backend (once, for every channel), then creates the folders and files. The
  /// capacity is rounded up to whole stripes (block_size times the number of paths), so every
  /// file holds a whole number of stripe units and all of it is preallocated now.
  /// Throws io_error naming a path that does not exist, is not a directory or is not writable, or
  /// cannot hold its share of the capacity, or when no backend works; usage_error for bad options
  /// (naming the option and value) or a backend not in this build.
  explicit swap_store(swap_store_options options);
  ~swap_store();
  swap_store(const swap_store&) = delete;
  swap_store& operator=(const swap_store&) = delete;

  /// Reserves `bytes`. Throws memory_error naming the sizes when no hole fits.
  [[nodiscard]] swap_extent allocate(std::uint64_t bytes);
  /// Returns the space. Throws usage_error naming the extent when it is unknown or a channel still
  /// has a request on it (submitted and not yet returned as a completion).
  void free(const swap_extent& extent);

  [[nodiscard]] const swap_store_options& options() const noexcept { return options_; }
  [[nodiscard]] std::uint64_t capacity() const noexcept;
  [[nodiscard]] std::uint64_t free_bytes() const;
  /// True only if every swap file really uses O_DIRECT.
  [[nodiscard]] bool direct() const noexcept;
  /// The per-process folders holding the (unlinked) swap files, one per path.
  [[nodiscard]] std::vector<std::filesystem::path> folders() const;
  /// Seconds spent writing the files once at creation (0 without prewrite).
  [[nodiscard]] double prewrite_seconds() const noexcept { return prewrite_seconds_; }

 private:
  friend class swap_channel;
  /// The record of `extent` with its in_flight count raised under the lock, so free() refuses it
  /// until the caller lowers the count; the shared_ptr keeps the record alive past that. Throws
  /// usage_error for an extent not allocated here.
  [[nodiscard]] std::shared_ptr<detail::extent_record> pin(const swap_extent& extent) const;
  /// An engine over the store's backend (wrapped by options().wrap_backend).
  [[nodiscard]] std::unique_ptr<io_engine> make_engine() const;
  /// The stripe unit, which is also the checksum chunk.
  [[nodiscard]] std::uint64_t stripe_unit() const noexcept { return options_.io.block_size; }
  /// Each swap file's share of the capacity.
  [[nodiscard]] std::uint64_t file_bytes() const noexcept { return allocator_.capacity() / options_.paths.size(); }
  void prewrite();

  swap_store_options options_;
  std::string backend_;  ///< options_.engine, with "auto" resolved to the backend it took
  std::vector<std::unique_ptr<detail::swap_directory>> directories_;
  std::vector<std::unique_ptr<file>> files_;
  double prewrite_seconds_ = 0;

  mutable std::shared_mutex mutex_;
  extent_allocator allocator_;
  std::unordered_map<std::uint64_t, std::shared_ptr<detail::extent_record>> extents_;
  std::uint64_t next_id_ = 1;
};

}  // namespace zoe::io
