#pragma once
// A checkpoint_fs that wraps another and plays a crash, in the manner of leveldb's fault-injection
// test: it keeps a model of what the drive holds durably (each file's bytes as of its last sync,
// each folder's names as of its last sync_directory) beside what is visible now. At a chosen
// operation it "crashes": that operation and every later one throw simulated_crash, and
// drop_unsynced() then rewrites the folder to its durable state: bytes appended since a file's last
// sync are gone, and a create, rename, exchange or remove not followed by a sync of its folder is
// undone (a file removed or renamed over comes back with its synced bytes). It can also fail one
// chosen operation with an io_error, the rest running normally.
//
// The model is pessimistic where POSIX leaves a choice: create() over an existing file empties its
// durable bytes at once, and unsynced data is always lost whole.

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include "zoe/engine/checkpoint/checkpoint_fs.hpp"

namespace zoe::testing {

/// What every operation throws from the crash on: not a zoe::error, so no caller mistakes it for
/// an I/O failure it could handle.
class simulated_crash : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Thread-safe (one lock around the model). Everything under `root` must go through it.
class fault_checkpoint_fs final : public engine::checkpoint_fs {
 public:
  /// Tracks the folder `root` (which must exist); what is there now counts as durable.
  fault_checkpoint_fs(engine::checkpoint_fs& base, std::filesystem::path root);
  ~fault_checkpoint_fs() override;
  fault_checkpoint_fs(const fault_checkpoint_fs&) = delete;
  fault_checkpoint_fs& operator=(const fault_checkpoint_fs&) = delete;

  /// Operations so far: every call of the fs and of its writers and readers counts one.
  [[nodiscard]] std::uint64_t operations() const;
  /// Operation number `n` (counted from 0 by operations()) and every one after it crash.
  void crash_at(std::uint64_t n);
  /// Operation number `n` throws io_error (EIO, naming the path); the others run.
  void fail_at(std::uint64_t n);
  /// Whether the crash has happened.
  [[nodiscard]] bool crashed() const;
  /// Rewrites root to what the model says is durable, forgets the crash and the failure, and
  /// counts operations from 0 again.
  void drop_unsynced();

  [[nodiscard]] std::unique_ptr<engine::checkpoint_writer> create(const std::filesystem::path& path) override;
  [[nodiscard]] std::unique_ptr<engine::checkpoint_reader> open(const std::filesystem::path& path) override;
  [[nodiscard]] bool exists(const std::filesystem::path& path) override;
  [[nodiscard]] bool is_link(const std::filesystem::path& path) override;
  void create_directory(const std::filesystem::path& path) override;
  void sync_directory(const std::filesystem::path& path) override;
  void rename(const std::filesystem::path& from, const std::filesystem::path& to) override;
  void exchange(const std::filesystem::path& a, const std::filesystem::path& b) override;
  void remove(const std::filesystem::path& path) override;
  [[nodiscard]] std::vector<std::string> list(const std::filesystem::path& path) override;

  struct node;  // a file or folder of the model (public for the writer and reader wrappers)
  /// Counts one operation on `path` named `what`; throws simulated_crash or the injected io_error.
  void step(std::string_view what, const std::filesystem::path& path);
  /// Appends to / syncs a file of the model. Called by the writer wrapper under no lock of ours.
  void appended(node& file, std::span<const std::byte> data);
  void synced(node& file);

 private:
  /// The model's node at `path` (visible names), or null.
  [[nodiscard]] std::shared_ptr<node> find(const std::filesystem::path& path) const;
  /// The folder holding `path` and the last component's name; throws usage_error outside root.
  [[nodiscard]] std::pair<std::shared_ptr<node>, std::string> parent_of(const std::filesystem::path& path) const;

  engine::checkpoint_fs& base_;
  std::filesystem::path root_;
  mutable std::mutex mutex_;
  std::shared_ptr<node> model_;
  std::uint64_t operations_ = 0;
  std::optional<std::uint64_t> crash_at_;
  std::optional<std::uint64_t> fail_at_;
  bool crashed_ = false;
};

}  // namespace zoe::testing
