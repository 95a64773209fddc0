// replay_raw: a step's NVMe bytes through the raw I/O engine, watched at the backend: the bytes
// asked for in each direction, reads and writes in flight together within the queue depth on
// every swap path, then the reads alone and the writes alone after them, inside scratch files that
// leave nothing behind, and failures that name the file.
#include "zoe/engine/swap/raw_replay.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "fault_injecting_backend.hpp"
#include "io_test_support.hpp"
#include "swap_store_support.hpp"
#include "zoe/core/error.hpp"

namespace zoe::testing {
namespace {

using ::testing::HasSubstr;

// What the replay's backends did, per file: requests in flight by direction, the most in flight at
// once, whether a read and a write were ever in flight together, the furthest byte touched, and
// the order of the operations submitted; and the same again per backend (each of the replay's io
// engines has its own) and file, in `by_backend`, keyed by the backend's number in creation order.
struct replay_watch {
  struct per_file {
    std::size_t reads = 0;
    std::size_t writes = 0;
    std::size_t peak = 0;
    bool both_at_once = false;
    std::uint64_t end = 0;
    std::vector<io::io_op> order;

    // Where the last operation of `op` falls in the replay's order, as a fraction of it: the
    // replay begins at the first read (the file is written whole before it, untimed).
    [[nodiscard]] double last_of(io::io_op op) const {
      const auto first = std::find(order.begin(), order.end(), io::io_op::read);
      const auto last = std::find(order.rbegin(), order.rend(), op).base();
      return static_cast<double>(last - first) / static_cast<double>(order.end() - first);
    }
  };
  std::mutex mutex;
  std::map<int, per_file> files;
  std::map<std::pair<int, int>, per_file> by_backend;  // (backend number, fd)
  int backends = 0;

  // The backends' views of file `fd`, in the order the backends were made.
  [[nodiscard]] std::vector<per_file> phases_of(int fd) const {
    std::vector<per_file> out;
    for (const auto& [key, f] : by_backend) {
      if (key.second == fd) out.push_back(f);
    }
    return out;
  }
};

void record_submit(replay_watch::per_file& f, const io::raw_op& op) {
  ++(op.op == io::io_op::read ? f.reads : f.writes);
  f.peak = std::max(f.peak, f.reads + f.writes);
  f.both_at_once = f.both_at_once || (f.reads > 0 && f.writes > 0);
  f.end = std::max(f.end, op.offset + op.length);
  f.order.push_back(op.op);
}

class watching_backend final : public io::io_backend {
 public:
  watching_backend(std::unique_ptr<io::io_backend> inner, std::shared_ptr<replay_watch> w, int number)
      : inner_(std::move(inner)), watch_(std::move(w)), number_(number) {}

  [[nodiscard]] std::string_view name() const noexcept override { return inner_->name(); }
  [[nodiscard]] std::size_t capacity() const noexcept override { return inner_->capacity(); }
  void notify_on_result(int eventfd) override { inner_->notify_on_result(eventfd); }

  void submit(std::span<const io::raw_op> ops) override {
    {
      const std::lock_guard lock(watch_->mutex);
      for (const io::raw_op& op : ops) {
        record_submit(watch_->files[op.fd], op);
        record_submit(watch_->by_backend[{number_, op.fd}], op);
        out_[op.tag] = {op.fd, op.op};
      }
    }
    inner_->submit(ops);
  }

  std::size_t reap(std::vector<io::raw_result>& out, std::size_t min_results) override {
    const std::size_t first = out.size();
    const std::size_t got = inner_->reap(out, min_results);
    const std::lock_guard lock(watch_->mutex);
    for (std::size_t i = first; i < out.size(); ++i) {
      const auto [fd, op] = out_.at(out[i].tag);
      for (replay_watch::per_file* f : {&watch_->files[fd], &watch_->by_backend[{number_, fd}]}) {
        --(op == io::io_op::read ? f->reads : f->writes);
      }
      out_.erase(out[i].tag);
    }
    return got;
  }

 private:
  std::unique_ptr<io::io_backend> inner_;
  std::shared_ptr<replay_watch> watch_;
  int number_;
  std::map<std::uint64_t, std::pair<int, io::io_op>> out_;
};

// A store over `paths` fresh folders at `queue_depth`, its backends wrapped by `wrap`.
struct rig {
  rig(std::size_t paths, std::size_t queue_depth,
      std::function<std::unique_ptr<io::io_backend>(std::unique_ptr<io::io_backend>)> wrap) {
    std::vector<std::filesystem::path> folders;
    for (std::size_t i = 0; i < paths; ++i) {
      dirs.push_back(std::make_unique<scratch_dir>());
      folders.push_back(dirs.back()->path());
    }
    io::swap_store_options so = store_options(folders, 4 * MiB);
    so.io.queue_depth = queue_depth;
    so.wrap_backend = std::move(wrap);
    store = std::make_unique<io::swap_store>(std::move(so));
  }

  // Every name under the store's folders.
  [[nodiscard]] std::set<std::filesystem::path> names() const {
    std::set<std::filesystem::path> out;
    for (const auto& d : dirs) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(d->path())) out.insert(e.path());
    }
    return out;
  }

  std::vector<std::unique_ptr<scratch_dir>> dirs;
  std::unique_ptr<io::swap_store> store;
};

rig watched_rig(std::size_t paths, std::size_t queue_depth, const std::shared_ptr<replay_watch>& watch) {
  return rig(paths, queue_depth, [watch](std::unique_ptr<io::io_backend> inner) {
    int number = 0;
    {
      const std::lock_guard lock(watch->mutex);
      number = watch->backends++;
    }
    return std::unique_ptr<io::io_backend>(std::make_unique<watching_backend>(std::move(inner), watch, number));
  });
}

TEST(raw_replay, MovesTheBytesAskedTogetherThenReadsAloneThenWritesAloneWithinTheQueueDepthOnEveryPath) {
  constexpr std::size_t depth = 4;
  auto watch = std::make_shared<replay_watch>();
  rig r = watched_rig(2, depth, watch);
  watch->files.clear();  // the store's own prewrite
  watch->by_backend.clear();
  // Not whole chunks, and more reads than writes: the short tails and the mix both count.
  const std::uint64_t reads = 40 * store_chunk + 1000;
  const std::uint64_t writes = 24 * store_chunk + 4096;

  const engine::raw_replay_result out = engine::replay_raw(*r.store, "posix", reads, writes);
  EXPECT_EQ(out.io.read.bytes, reads);
  EXPECT_EQ(out.io.write.bytes, writes);
  EXPECT_EQ(out.io.read.errors + out.io.write.errors, 0U);
  EXPECT_GT(out.together_seconds, 0);
  EXPECT_GT(out.apart_seconds, 0);
  // The floor: the faster of the two ways, and the way named is the one that took that time.
  EXPECT_EQ(out.seconds, std::min(out.together_seconds, out.apart_seconds));
  EXPECT_EQ(out.seconds, out.fastest == engine::raw_replay_way::together ? out.together_seconds : out.apart_seconds);
  ASSERT_EQ(watch->files.size(), 2U);  // one scratch file per path
  for (const auto& [fd, f] : watch->files) {
    EXPECT_LE(f.peak, depth) << "fd " << fd;
    EXPECT_EQ(f.reads + f.writes, 0U) << "fd " << fd;
    // The file written whole (untimed), then the two timed ways, each through an engine of its own.
    const std::vector<replay_watch::per_file> phases = watch->phases_of(fd);
    ASSERT_EQ(phases.size(), 3U) << "fd " << fd << ": the laying, both directions at once, one after the other";
    EXPECT_EQ(std::count(phases[0].order.begin(), phases[0].order.end(), io::io_op::read), 0) << "fd " << fd;
    const replay_watch::per_file& together = phases[1];
    EXPECT_TRUE(together.both_at_once) << "fd " << fd;
    // Side by side to the end, not one direction after the other.
    EXPECT_GT(together.last_of(io::io_op::read), 0.9) << "fd " << fd;
    EXPECT_GT(together.last_of(io::io_op::write), 0.9) << "fd " << fd;
    // Then every read, alone, and after the last of them every write, alone, as many as at once.
    const replay_watch::per_file& apart = phases[2];
    EXPECT_FALSE(apart.both_at_once) << "fd " << fd;
    EXPECT_TRUE(
        std::is_partitioned(apart.order.begin(), apart.order.end(), [](io::io_op op) { return op == io::io_op::read; }))
        << "fd " << fd;
    EXPECT_EQ(std::count(apart.order.begin(), apart.order.end(), io::io_op::read),
              std::count(together.order.begin(), together.order.end(), io::io_op::read))
        << "fd " << fd;
    EXPECT_EQ(std::count(apart.order.begin(), apart.order.end(), io::io_op::write),
              std::count(together.order.begin(), together.order.end(), io::io_op::write))
        << "fd " << fd;
    EXPECT_GT(std::count(apart.order.begin(), apart.order.end(), io::io_op::write), 0) << "fd " << fd;
    EXPECT_LE(apart.peak, depth) << "fd " << fd;
  }
}

TEST(raw_replay, GoesRoundTheScratchSpaceWhenTheBytesAreMore) {
  auto watch = std::make_shared<replay_watch>();
  rig r = watched_rig(1, 4, watch);
  watch->files.clear();
  const std::uint64_t scratch = 8 * store_chunk;

  const engine::raw_replay_result out =
      engine::replay_raw(*r.store, "posix", 30 * store_chunk, 20 * store_chunk, {.scratch_bytes = scratch});
  EXPECT_EQ(out.io.read.bytes, 30 * store_chunk);
  EXPECT_EQ(out.io.write.bytes, 20 * store_chunk);
  ASSERT_EQ(watch->files.size(), 1U);
  EXPECT_LE(watch->files.begin()->second.end, 2 * scratch);  // a read range and a write range
}

TEST(raw_replay, LeavesNothingInTheSwapFoldersAndTouchesNoBackendForZeroBytes) {
  auto watch = std::make_shared<replay_watch>();
  rig r = watched_rig(2, 4, watch);
  const std::set<std::filesystem::path> before = r.names();
  const int backends = watch->backends;

  EXPECT_EQ(engine::replay_raw(*r.store, "posix", 0, 0).seconds, 0);
  EXPECT_EQ(watch->backends, backends);
  (void)engine::replay_raw(*r.store, "posix", 9 * store_chunk, 5 * store_chunk);
  EXPECT_EQ(r.names(), before);
}

TEST(raw_replay, AFailedRequestNamesTheScratchFileAndLeavesNothing) {
  auto plan = std::make_shared<fault_plan>();
  rig r(1, 4, [plan](std::unique_ptr<io::io_backend> inner) {
    return std::unique_ptr<io::io_backend>(std::make_unique<fault_injecting_backend>(std::move(inner), plan));
  });
  const std::set<std::filesystem::path> before = r.names();
  plan->add(fault_rule{.op = io::io_op::read, .inject_errno = EIO});

  try {
    (void)engine::replay_raw(*r.store, "posix", 12 * store_chunk, 6 * store_chunk);
    FAIL() << "the failed read went unreported";
  } catch (const io_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("raw-replay.scratch"));
  }
  EXPECT_EQ(plan->fired(), 1);
  EXPECT_EQ(r.names(), before);
}

TEST(raw_replay, AFolderWithoutRoomForTheScratchFileIsNamed) {
  const std::unique_ptr<scoped_mount> small = scoped_mount::small_ext4(32 * MiB);
  if (small == nullptr) GTEST_SKIP() << "cannot mount a small ext4 here";
  io::swap_store store(store_options({small->path()}, 4 * MiB));

  try {
    (void)engine::replay_raw(store, "posix", 64 * MiB, 64 * MiB, {.scratch_bytes = 64 * MiB});
    FAIL() << "a scratch file larger than the folder's room was not refused";
  } catch (const io_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("raw-replay.scratch"));
    EXPECT_THAT(e.what(), HasSubstr(small->path().string()));
  }
}

}  // namespace
}  // namespace zoe::testing
