// The mover alone, over a real swap store whose backend a test wraps: byte-exact round trips
// under random schedules with failures injected, the per-path queue-depth budget counted at the
// backend (and given back before verification), demand pieces served before prefetches and
// write-behinds, and hooks' device work that wakes the mover rather than holding it.
#include "zoe/engine/swap/mover.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <unistd.h>

#include "io_test_support.hpp"
#include "swap_store_support.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"

namespace zoe::testing {
namespace {

using engine::carried_error;
using engine::move_priority;
using engine::mover;
using engine::mover_options;
using ::testing::HasSubstr;

// What every backend of a store shares with the test: requests in flight per file (one file per
// swap path), the most seen, the reads submitted, a switch that holds back operations of one
// length, and a rate of injected EIO failures.
struct backend_watch {
  std::mutex mutex;
  std::map<int, std::size_t> in_flight;  ///< by fd
  std::map<int, std::size_t> peak;
  std::size_t reads = 0;                    ///< read operations submitted, held ones included
  std::atomic<std::size_t> hold_length{0};  ///< operations of this many bytes wait while non-zero
  std::vector<int> notify_fds;              ///< to wake the engines when the hold ends
  std::mt19937_64 rng{1};
  std::atomic<double> fail_rate{0};
  std::uint64_t failed = 0;

  /// Requests at the backends now (held ones included).
  std::size_t at_backend() {
    const std::lock_guard lock(mutex);
    std::size_t n = 0;
    for (const auto& [fd, count] : in_flight) n += count;
    return n;
  }

  std::size_t reads_submitted() {
    const std::lock_guard lock(mutex);
    return reads;
  }

  void release() {
    hold_length = 0;
    const std::lock_guard lock(mutex);
    const std::uint64_t one = 1;
    for (int fd : notify_fds) [[maybe_unused]] auto n = ::write(fd, &one, sizeof one);
  }
};

class watching_backend final : public io::io_backend {
 public:
  watching_backend(std::unique_ptr<io::io_backend> inner, std::shared_ptr<backend_watch> w)
      : inner_(std::move(inner)), watch_(std::move(w)) {}

  [[nodiscard]] std::string_view name() const noexcept override { return inner_->name(); }
  [[nodiscard]] std::size_t capacity() const noexcept override { return inner_->capacity(); }
  void notify_on_result(int eventfd) override {
    notify_fd_ = eventfd;
    {
      const std::lock_guard lock(watch_->mutex);
      watch_->notify_fds.push_back(eventfd);
    }
    inner_->notify_on_result(eventfd);
  }
  bool register_buffers(std::span<const std::span<std::byte>> regions) override {
    return inner_->register_buffers(regions);
  }

  void submit(std::span<const io::raw_op> ops) override {
    std::vector<io::raw_op> now;
    {
      const std::lock_guard lock(watch_->mutex);
      for (const io::raw_op& op : ops) {
        const std::size_t n = ++watch_->in_flight[op.fd];
        watch_->peak[op.fd] = std::max(watch_->peak[op.fd], n);
        if (op.op == io::io_op::read) ++watch_->reads;
        if (watch_->fail_rate > 0 && std::uniform_real_distribution<double>(0, 1)(watch_->rng) < watch_->fail_rate) {
          ++watch_->failed;
          injected_.push_back({op.tag, -EIO});
          fds_[op.tag] = op.fd;
        } else if (watch_->hold_length != 0 && op.length == watch_->hold_length) {
          held_.push_back(op);
        } else {
          now.push_back(op);
        }
      }
    }
    for (const io::raw_op& op : now) fds_[op.tag] = op.fd;
    for (const io::raw_op& op : held_) fds_[op.tag] = op.fd;
    forward(now);
    if (!injected_.empty()) {
      const std::uint64_t one = 1;
      [[maybe_unused]] auto n = ::write(notify_fd_, &one, sizeof one);
    }
  }

  std::size_t reap(std::vector<io::raw_result>& out, std::size_t min_results) override {
    if (watch_->hold_length == 0 && !held_.empty()) {
      std::vector<io::raw_op> released = std::move(held_);
      held_.clear();
      forward(released);
    }
    const std::size_t first = out.size();
    out.insert(out.end(), injected_.begin(), injected_.end());
    injected_.clear();
    const std::size_t have = out.size() - first;
    const std::size_t want = min_results > have ? std::min(min_results - have, inner_in_flight_) : 0;
    const std::size_t got = inner_->reap(out, want);
    inner_in_flight_ -= got;
    const std::lock_guard lock(watch_->mutex);
    for (std::size_t i = first; i < out.size(); ++i) {
      --watch_->in_flight[fds_.at(out[i].tag)];
      fds_.erase(out[i].tag);
    }
    return out.size() - first;
  }

 private:
  void forward(const std::vector<io::raw_op>& ops) {
    if (ops.empty()) return;
    inner_in_flight_ += ops.size();
    inner_->submit(ops);
  }

  std::unique_ptr<io::io_backend> inner_;
  std::shared_ptr<backend_watch> watch_;
  std::vector<io::raw_result> injected_;
  std::vector<io::raw_op> held_;
  std::map<std::uint64_t, int> fds_;  ///< the file of each operation out, by tag
  std::size_t inner_in_flight_ = 0;
  int notify_fd_ = -1;
};

// A store over `paths` folders at `queue_depth`, its backends watched, and a mover on it.
struct rig {
  rig(std::size_t paths, std::size_t queue_depth, std::vector<engine::mover_pool_spec> pools)
      : dev(make_host_device(64 * MiB)), pinned(*dev), watch(std::make_shared<backend_watch>()) {
    std::vector<std::filesystem::path> folders;
    for (std::size_t i = 0; i < paths; ++i) {
      dirs.push_back(std::make_unique<scratch_dir>());
      folders.push_back(dirs.back()->path());
    }
    io::swap_store_options so = store_options(folders, 64 * MiB);
    so.io.queue_depth = queue_depth;
    so.wrap_backend = [w = watch](std::unique_ptr<io::io_backend> inner) {
      return std::unique_ptr<io::io_backend>(std::make_unique<watching_backend>(std::move(inner), w));
    };
    store = std::make_unique<io::swap_store>(std::move(so));
    m = std::make_unique<mover>(store.get(), &pinned, dev.get(), mover_options{.pools = std::move(pools)});
  }
  ~rig() { m.reset(); }
  rig(const rig&) = delete;
  rig& operator=(const rig&) = delete;

  std::unique_ptr<device> dev;
  allocators::pinned_host_resource pinned;
  std::shared_ptr<backend_watch> watch;
  std::vector<std::unique_ptr<scratch_dir>> dirs;
  std::unique_ptr<io::swap_store> store;
  std::unique_ptr<mover> m;
};

std::vector<std::byte> pattern(std::size_t n, std::uint64_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937_64 g(seed);
  for (auto& b : v) b = static_cast<std::byte>(g());
  return v;
}

// A piece that writes `src` to `to`, copied into a slot by its hook (the client's memory stays).
mover::piece write_piece(std::size_t pool, const std::vector<std::byte>& src, io::swap_extent to,
                         move_priority cls = move_priority::write_behind) {
  mover::piece p;
  p.priority = cls;
  p.pool = pool;
  p.bytes = src.size();
  p.write = mover::io_range{to, 0};
  p.hook = [&src](std::span<std::byte> slot) {
    std::memcpy(slot.data(), src.data(), src.size());
    return std::nullopt;
  };
  p.what = "a test value";
  return p;
}

// A piece that reads `from` into `out` through a slot.
mover::piece read_piece(std::size_t pool, std::vector<std::byte>& out, io::swap_extent from,
                        move_priority cls = move_priority::demand) {
  mover::piece p;
  p.priority = cls;
  p.pool = pool;
  p.bytes = out.size();
  p.read = mover::io_range{from, 0};
  p.hook = [&out](std::span<std::byte> slot) {
    std::memcpy(out.data(), slot.data(), out.size());
    return std::nullopt;
  };
  p.what = "a test value";
  return p;
}

// Runs `p`, retrying while it fails (each failure must name the extent and the offset, and the
// io engine's message names the swap file); returns the failures seen.
int run_until_good(mover& m, const std::function<mover::piece()>& make) {
  for (int failures = 0;; ++failures) {
    try {
      m.run(make());
      return failures;
    } catch (const io_error& e) {
      EXPECT_THAT(e.what(), HasSubstr("swap extent"));
      EXPECT_THAT(e.what(), HasSubstr("at byte 0"));
      EXPECT_THAT(e.what(), HasSubstr("zoe-swap"));  // the file's folder: the path
    }
    if (failures > 100) throw std::runtime_error("a piece failed 100 times in a row");
  }
}

class mover_round_trip : public ::testing::TestWithParam<std::uint64_t> {};

// Four clients at once, each with its own values: writes (write-behind), demand reads, prefetch
// reads and read-modify-writes (read the home, add, write a shadow, commit by swapping the two),
// in a random order per seed, with one request in ten failing. Every value read equals the last
// one committed: a failed write lost nothing (the client's source, or the home behind the
// shadow, is still there) and a failed read is simply read again.
TEST_P(mover_round_trip, EveryClientReadsBackWhatItCommittedUnderFailures) {
  rig r(2, 4,
        {{.key = "a", .slot_bytes = 64 * KiB, .slot_count = 3}, {.key = "b", .slot_bytes = 64 * KiB, .slot_count = 2}});
  const std::size_t a = r.m->pool("a");
  const std::size_t b = r.m->pool("b");
  r.watch->fail_rate = 0.1;
  std::atomic<int> failures{0};
  std::vector<std::thread> clients;
  for (std::uint64_t c = 0; c < 4; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937_64 rng(GetParam() * 131 + c);
      const std::size_t pool = c % 2 == 0 ? a : b;
      const std::size_t bytes = (c + 1) * 5000;  // not a whole chunk: the extent's end ends the write
      io::swap_extent home = r.store->allocate(bytes);
      io::swap_extent shadow = r.store->allocate(bytes);
      std::vector<std::byte> value = pattern(bytes, c);
      failures += run_until_good(*r.m, [&] { return write_piece(pool, value, home); });
      for (int i = 0; i < 40; ++i) {
        switch (rng() % 4) {
          case 0: {
            value = pattern(bytes, rng());
            failures += run_until_good(*r.m, [&] { return write_piece(pool, value, home); });
            break;
          }
          case 1:
          case 2: {
            std::vector<std::byte> got(bytes);
            const auto cls = rng() % 2 == 0 ? move_priority::demand : move_priority::prefetch;
            failures += run_until_good(*r.m, [&] { return read_piece(pool, got, home, cls); });
            EXPECT_EQ(got, value) << "client " << c << " step " << i;
            break;
          }
          default: {
            const auto add = static_cast<std::byte>(rng() | 1U);
            failures += run_until_good(*r.m, [&] {
              mover::piece p;
              p.priority = move_priority::demand;
              p.pool = pool;
              p.bytes = bytes;
              p.read = mover::io_range{home, 0};
              p.write = mover::io_range{shadow, 0};
              p.hook = [add](std::span<std::byte> s) {
                for (auto& x : s) x = static_cast<std::byte>(static_cast<unsigned>(x) + static_cast<unsigned>(add));
                return std::nullopt;
              };
              p.what = "an accumulation";
              return p;
            });
            std::swap(home, shadow);  // the commit: the shadow is the home now
            for (auto& x : value) x = static_cast<std::byte>(static_cast<unsigned>(x) + static_cast<unsigned>(add));
            break;
          }
        }
      }
      std::vector<std::byte> last(bytes);
      failures += run_until_good(*r.m, [&] { return read_piece(pool, last, home); });
      EXPECT_EQ(last, value) << "client " << c;
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_GT(failures.load(), 0) << "no failure was injected: the schedule tested nothing of it";
  const engine::mover_stats s = r.m->stats();
  EXPECT_EQ(s.failed_pieces, static_cast<std::uint64_t>(failures.load()));
  // The pieces went through both pools' slots (a low water is never above the slot count, so
  // only being below it says anything).
  EXPECT_LT(r.m->pool_low_water(a), 3U);
  EXPECT_LT(r.m->pool_low_water(b), 2U);
}

INSTANTIATE_TEST_SUITE_P(Seeds, mover_round_trip, ::testing::Values(1, 2, 3, 4, 5));

// Clients on eight threads submit as fast as they can; no swap file ever sees more requests in
// flight than the aio queue depth, however many clients share the mover.
TEST(MoverBudget, RequestsInFlightPerPathStayWithinTheQueueDepth) {
  constexpr std::size_t depth = 3;
  rig r(2, depth, {{.key = "slots", .slot_bytes = 64 * KiB, .slot_count = 32}});
  const std::size_t pool = r.m->pool("slots");
  std::vector<std::thread> clients;
  for (std::uint64_t c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      const io::swap_extent e = r.store->allocate(4 * 64 * KiB);
      std::vector<std::vector<std::byte>> values;
      for (std::uint64_t k = 0; k < 4; ++k) values.push_back(pattern(64 * KiB, c * 10 + k));
      std::vector<std::future<void>> over;
      for (int round = 0; round < 3; ++round) {
        std::vector<std::shared_ptr<std::promise<void>>> promises;
        for (std::uint64_t k = 0; k < 4; ++k) {
          mover::piece p =
              write_piece(pool, values[k], e, k % 2 == 0 ? move_priority::write_behind : move_priority::prefetch);
          p.write->offset = k * 64 * KiB;
          auto done = std::make_shared<std::promise<void>>();
          over.push_back(done->get_future());
          p.done = [done](const carried_error* err) {
            if (err != nullptr) ADD_FAILURE() << err->message;
            done->set_value();
          };
          r.m->submit(std::move(p));
        }
        for (auto& f : over) f.wait();
        over.clear();
        for (std::uint64_t k = 0; k < 4; ++k) {
          std::vector<std::byte> got(64 * KiB);
          mover::piece p = read_piece(pool, got, e);
          p.read->offset = k * 64 * KiB;
          r.m->run(std::move(p));
          EXPECT_EQ(got, values[k]);
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  const std::lock_guard lock(r.watch->mutex);
  ASSERT_EQ(r.watch->peak.size(), 2U);  // both paths were used
  for (const auto& [fd, peak] : r.watch->peak) {
    EXPECT_LE(peak, depth) << "fd " << fd;
    EXPECT_GE(peak, 1U);
  }
  EXPECT_LE(r.m->stats().peak_in_flight, depth * 2);
}

// A piece whose done fails the test on an error, then sets `over`.
mover::piece signalling(mover::piece p, std::promise<void>& over) {
  p.done = [&over](const carried_error* e) {
    if (e != nullptr) ADD_FAILURE() << e->message;
    over.set_value();
  };
  return p;
}

// Spins (bounded) until `ready`; false when it never came.
bool eventually(const std::function<bool()>& ready) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!ready()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::yield();
  }
  return true;
}

// A request's share of the budget goes back when the kernel returns it, before its checksums are
// verified: the next request is at the drive by then, so the hashing never holds the drive's queue
// short. The budget is one request; a read of a damaged value `a` takes it (held at the backend)
// while a second read `c` waits for it with its slot. When a's failure (the damage caught) is
// reported, which happens right after its verification, c's read must already have been submitted.
// Nothing is timed: the order of the two is what is checked.
TEST(MoverBudget, ARequestBackFromTheKernelGivesItsShareBackBeforeItIsVerified) {
  rig r(1, 1, {{.key = "slots", .slot_bytes = 64 * KiB, .slot_count = 8}});
  const std::size_t pool = r.m->pool("slots");
  const io::swap_extent a = r.store->allocate(8192);  // the store's first extent: at offset 0 of its file
  const io::swap_extent c = r.store->allocate(4096);
  const std::vector<std::byte> a_value = pattern(8192, 1);
  const std::vector<std::byte> c_value = pattern(4096, 2);
  r.m->run(write_piece(pool, a_value, a));
  r.m->run(write_piece(pool, c_value, c));
  flip_byte(only_swap_file(*r.store), 100);
  r.watch->hold_length = 8192;  // a's read
  const std::size_t reads_before = r.watch->reads_submitted();

  std::vector<std::byte> a_got(8192);
  std::promise<std::size_t> a_failed;  // the reads submitted when a's failure was reported
  mover::piece a_read = read_piece(pool, a_got, a);
  a_read.done = [&](const carried_error* e) {
    EXPECT_TRUE(e != nullptr && e->category == error_category::corrupt) << "the damaged value was read";
    a_failed.set_value(r.watch->reads_submitted() - reads_before);
  };
  r.m->submit(std::move(a_read));
  ASSERT_TRUE(eventually([&] { return r.watch->at_backend() == 1; }));
  std::vector<std::byte> c_got(4096);
  std::promise<void> c_done;
  r.m->submit(signalling(read_piece(pool, c_got, c), c_done));
  // c holds a slot (a holds another, and the writes left the pool at 7 free): it waits for the request.
  const bool c_waits = eventually([&] { return r.m->pool_low_water(pool) == 6; });
  r.watch->release();
  ASSERT_TRUE(c_waits);

  EXPECT_EQ(a_failed.get_future().get(), 2U) << "c's read waited for a's verification";
  c_done.get_future().wait();
  EXPECT_EQ(c_got, c_value);
}

// The backend holds every prefetch and write-behind (operations of 4096 bytes) until a demand
// read (8192 bytes) has completed. Queued first in order, those would fill the queue depth and the
// demand would wait behind them for ever; the mover must start the demand read anyway. The wait is
// bounded, so a mover that gets it wrong fails here instead of hanging.
TEST(MoverPriority, DemandIsNeverQueuedBehindPrefetchesOrWriteBehinds) {
  rig r(1, 2, {{.key = "slots", .slot_bytes = 64 * KiB, .slot_count = 8}});
  const std::size_t pool = r.m->pool("slots");
  std::vector<io::swap_extent> small;
  std::vector<std::vector<std::byte>> values;
  for (std::uint64_t k = 0; k < 5; ++k) {
    small.push_back(r.store->allocate(4096));
    values.push_back(pattern(4096, k));
    r.m->run(write_piece(pool, values[k], small[k]));
  }
  const io::swap_extent big = r.store->allocate(8192);
  const std::vector<std::byte> big_value = pattern(8192, 99);
  r.m->run(write_piece(pool, big_value, big));

  r.watch->hold_length = 4096;
  std::vector<std::vector<std::byte>> got(3, std::vector<std::byte>(4096));
  std::atomic<int> background_done{0};
  for (std::uint64_t k = 0; k < 3; ++k) {
    mover::piece p = read_piece(pool, got[k], small[k], move_priority::prefetch);
    p.done = [&](const carried_error* e) {
      if (e != nullptr) ADD_FAILURE() << e->message;
      ++background_done;
    };
    r.m->submit(std::move(p));
  }
  for (std::uint64_t k = 3; k < 5; ++k) {
    mover::piece p = write_piece(pool, values[k], small[k]);
    p.done = [&](const carried_error* e) {
      if (e != nullptr) ADD_FAILURE() << e->message;
      ++background_done;
    };
    r.m->submit(std::move(p));
  }
  std::vector<std::byte> demand(8192);
  auto over = std::async(std::launch::async, [&] { r.m->run(read_piece(pool, demand, big)); });
  const bool in_time = over.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  r.watch->release();  // either way, so the mover can finish and the test end
  ASSERT_TRUE(in_time) << "the demand read waited behind held prefetches and write-behinds";
  over.get();
  EXPECT_EQ(demand, big_value);
  r.m.reset();  // finishes the background pieces
  EXPECT_EQ(background_done.load(), 5);
  for (std::uint64_t k = 0; k < 3; ++k) EXPECT_EQ(got[k], values[k]);
}

// One path at queue depth 2, so the background's share is one request; a 4096-byte value `small`
// and an 8192-byte value `big` written, and from then on every operation of 4096 bytes (a read of
// `small`) held at the backend until release().
struct small_reads_held {
  explicit small_reads_held(std::uint64_t seed)
      : r(1, 2, {{.key = "slots", .slot_bytes = 64 * KiB, .slot_count = 8}}),
        pool(r.m->pool("slots")),
        small(r.store->allocate(4096)),
        small_value(pattern(4096, seed)),
        big(r.store->allocate(8192)),
        big_value(pattern(8192, seed + 1)) {
    r.m->run(write_piece(pool, small_value, small));
    r.m->run(write_piece(pool, big_value, big));
    r.watch->hold_length = 4096;
  }

  rig r;
  std::size_t pool;
  io::swap_extent small;
  std::vector<std::byte> small_value;
  io::swap_extent big;
  std::vector<std::byte> big_value;
};

// A prefetch the compute comes to wait on is raised to demand. The background's share is one
// request, which a held prefetch (4096 bytes) keeps; the prefetch the compute then waits on (8192
// bytes) is queued behind it and would wait until the hold ends. Raised, it takes the request kept
// for demand and completes while the hold lasts. Bounded: a mover that does not raise it fails
// here instead of hanging.
TEST(MoverPriority, ARaisedPrefetchIsNotServedBehindOtherPrefetches) {
  small_reads_held h(1);
  std::vector<std::byte> held(4096);
  std::promise<void> held_done;
  mover::piece first = signalling(read_piece(h.pool, held, h.small, move_priority::prefetch), held_done);
  first.group = h.r.m->new_group();
  h.r.m->submit(std::move(first));

  std::vector<std::byte> waited(8192);
  std::promise<void> waited_done;
  mover::piece second = signalling(read_piece(h.pool, waited, h.big, move_priority::prefetch), waited_done);
  const std::uint64_t group = h.r.m->new_group();
  second.group = group;
  h.r.m->submit(std::move(second));
  h.r.m->raise(group);  // the compute waits on it now

  const bool in_time = waited_done.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  h.r.watch->release();  // either way, so the mover can finish and the test end
  ASSERT_TRUE(in_time) << "the prefetch the compute waits on was served behind a held prefetch";
  EXPECT_EQ(waited, h.big_value);
  held_done.get_future().wait();
  EXPECT_EQ(held, h.small_value);
}

// A raised prefetch whose request is already at the drive is the compute's from then on: it leaves
// the background's share, so the next prefetch may start in its place. The share is one request;
// the held first prefetch takes it, is raised, and the second prefetch then completes while the
// hold lasts. Bounded: it fails instead of hanging.
TEST(MoverPriority, ARaisedRequestInFlightLeavesTheBackgroundsShare) {
  small_reads_held h(3);
  std::vector<std::byte> held(4096);
  std::promise<void> held_done;
  mover::piece first = signalling(read_piece(h.pool, held, h.small, move_priority::prefetch), held_done);
  const std::uint64_t group = h.r.m->new_group();
  first.group = group;
  h.r.m->submit(std::move(first));
  // Its request at the drive (held there) before the raise. (The mover's peak_in_flight cannot say
  // so: the writes above already made it 1.)
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (h.r.watch->at_backend() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  ASSERT_EQ(h.r.watch->at_backend(), 1U);
  h.r.m->raise(group);

  std::vector<std::byte> next(8192);
  std::promise<void> next_done;
  h.r.m->submit(signalling(read_piece(h.pool, next, h.big, move_priority::prefetch), next_done));

  const bool in_time = next_done.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  h.r.watch->release();  // either way, so the mover can finish and the test end
  ASSERT_TRUE(in_time) << "the raised request kept the background's share";
  EXPECT_EQ(next, h.big_value);
  held_done.get_future().wait();
  EXPECT_EQ(held, h.small_value);
}

// The end of a hook's device work wakes the mover (a task queued after it): the mover never sits
// blocked on that work, nor polls it. Here the work is held (its stream waits for the test) while a
// read of another value is submitted: the read is served while the hold lasts. Bounded: a mover
// that waits for the device work before it looks at submissions fails here instead of hanging.
TEST(MoverHooks, ASubmissionIsServedWhileAHooksDeviceWorkIsHeld) {
  rig r(1, 2, {{.key = "slots", .slot_bytes = 64 * KiB, .slot_count = 4}});
  const std::size_t pool = r.m->pool("slots");
  const io::swap_extent e = r.store->allocate(4096);
  const std::vector<std::byte> value = pattern(4096, 5);
  r.m->run(write_piece(pool, value, e));

  device_stream stream = r.dev->create_stream();
  std::promise<void> hold;
  const std::shared_future<void> held = hold.get_future().share();
  mover::piece busy;
  busy.pool = pool;
  busy.bytes = 4096;
  busy.hook = [&r, &stream, held](std::span<std::byte>) {
    r.dev->launch_host(stream.view(), [held] { held.wait(); });
    return std::optional<stream_view>(stream.view());
  };
  busy.what = "a held device copy";
  std::promise<void> busy_done;
  r.m->submit(signalling(std::move(busy), busy_done));
  busy_done.get_future().wait();  // its hook ran (without a write it is done then); its slot stays taken

  std::vector<std::byte> got(4096);
  auto over = std::async(std::launch::async, [&] { r.m->run(read_piece(pool, got, e)); });
  const bool in_time = over.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  hold.set_value();  // either way, so the mover can finish and the test end
  ASSERT_TRUE(in_time) << "the read waited for a hook's device work";
  over.get();
  EXPECT_EQ(got, value);
}

// A piece that cannot fit its slot, or names no pool, is refused before anything is queued.
TEST(MoverSubmit, RefusesPiecesThatCannotRunNamingWhy) {
  rig r(1, 2, {{.key = "slots", .slot_bytes = 64 * KiB, .slot_count = 1}});
  std::vector<std::byte> big(64 * KiB + 1);
  const io::swap_extent e = r.store->allocate(big.size());
  try {
    r.m->submit(write_piece(r.m->pool("slots"), big, e));
    FAIL() << "an oversized piece was taken";
  } catch (const usage_error& err) {
    EXPECT_THAT(err.what(), HasSubstr("does not fit a slot of 'mover.slots'"));
  }
  EXPECT_THROW((void)r.m->pool("params"), usage_error);
}

}  // namespace
}  // namespace zoe::testing
