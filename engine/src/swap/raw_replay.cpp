// replay_raw: a step's NVMe bytes through the I/O engine alone, timed both directions at once
// and one direction after the other; the faster is the floor (raw_replay.hpp).
#include "zoe/engine/swap/raw_replay.hpp"

#include <algorithm>
#include <array>
#include <barrier>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <span>
#include <thread>
#include <utility>
#include <vector>

#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"
#include "zoe/io/engine_factory.hpp"
#include "zoe/io/file.hpp"
#include "zoe/io/io_engine.hpp"

namespace zoe::engine {
namespace {

using clock = std::chrono::steady_clock;

struct span_of_time {
  clock::time_point start;
  clock::time_point end;
};

std::uint64_t round_up(std::uint64_t n, std::uint64_t unit) { return (n + unit - 1) / unit * unit; }

// One direction of a replay: `want` bytes moved in block-sized requests that go round the
// scratch range [base, base + length).
struct lane {
  io::io_op op = io::io_op::read;
  std::uint64_t base = 0;
  std::uint64_t length = 0;
  std::uint64_t want = 0;
  std::uint64_t issued = 0;

  [[nodiscard]] bool done() const noexcept { return issued >= want; }
  // The share of `want` issued so far (1 when there is nothing to do).
  [[nodiscard]] double progress() const noexcept {
    return want == 0 ? 1.0 : static_cast<double>(issued) / static_cast<double>(want);
  }
};

// O_DIRECT memory for queue_depth requests of a block each, filled once with bytes that no
// storage layer could take for zeros (a virtual disk may turn zero writes into discards).
class slots {
 public:
  slots(std::size_t count, std::size_t block, std::size_t alignment) : block_(block) {
    const std::size_t bytes = round_up(count * block, alignment);
    memory_.reset(static_cast<std::byte*>(std::aligned_alloc(alignment, bytes)));
    if (memory_ == nullptr) throw memory_error(str("replay_raw: cannot allocate ", bytes, " bytes of request buffers"));
    std::uint64_t x = 0x9e3779b97f4a7c15ULL;
    for (std::size_t i = 0; i < bytes; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      memory_.get()[i] = static_cast<std::byte>(x);
    }
  }

  [[nodiscard]] std::span<std::byte> slot(std::size_t i, std::size_t bytes) const noexcept {
    return {memory_.get() + i * block_, bytes};
  }

 private:
  struct release {
    void operator()(std::byte* p) const noexcept { std::free(p); }
  };
  std::size_t block_;
  std::unique_ptr<std::byte, release> memory_;
};

// Keeps `depth` requests in flight on `e` until both lanes are done; each freed slot takes the
// next request of the lane that is further behind its share.
void pump(io::io_engine& e, io::file& f, const slots& memory, std::size_t block, std::size_t depth, lane& reads,
          lane& writes) {
  std::vector<io::io_completion> done;
  const auto submit = [&](std::size_t slot) {
    lane& l = writes.done() || (!reads.done() && reads.progress() <= writes.progress()) ? reads : writes;
    const std::uint64_t bytes = std::min<std::uint64_t>(block, l.want - l.issued);
    const std::uint64_t offset = l.base + l.issued % l.length;
    e.submit(io::io_request{.op = l.op,
                            .target = &f,
                            .buffer = memory.slot(slot, static_cast<std::size_t>(bytes)),
                            .offset = offset,
                            .user_data = slot});
    l.issued += bytes;
  };
  for (std::size_t s = 0; s < depth && !(reads.done() && writes.done()); ++s) submit(s);
  while (e.outstanding() > 0) {
    done.clear();
    e.wait(done);
    for (const io::io_completion& c : done) {
      c.throw_if_failed();  // the engine's destructor waits for the rest before the slots go
      if (!(reads.done() && writes.done())) submit(static_cast<std::size_t>(c.user_data));
    }
  }
}

std::unique_ptr<io::io_engine> make_engine(const io::swap_store& store, std::string_view backend) {
  const io::engine_options& options = store.options().io;
  std::unique_ptr<io::io_backend> b = io::choose_backend(backend, options).backend;
  if (store.options().wrap_backend) b = store.options().wrap_backend(std::move(b));
  return std::make_unique<io::io_engine>(std::move(b), options);
}

// One swap path's share: its scratch file laid and written once, then, with every path, the timed
// replay. Returns the replay engine's figures.
class path_replay {
 public:
  path_replay(const io::swap_store& store, std::string_view backend, const std::filesystem::path& folder,
              std::uint64_t read_bytes, std::uint64_t write_bytes, std::uint64_t scratch_bytes)
      : store_(store), backend_(backend), folder_(folder) {
    const std::uint64_t block = store.options().io.block_size;
    const auto region = [&](std::uint64_t want) { return round_up(std::min(want, scratch_bytes), block); };
    reads_ = lane{.op = io::io_op::read, .base = 0, .length = region(read_bytes), .want = read_bytes};
    writes_ = lane{.op = io::io_op::write, .base = reads_.length, .length = region(write_bytes), .want = write_bytes};
  }

  // The timed phases, in order: both directions at once, then reads alone, then writes alone.
  static constexpr std::size_t phases = 3;

  // Makes and fills the scratch file (untimed), then for each phase arrives at `gate` and, once
  // every path has arrived, replays that phase; each phase's time goes to `time[phase]`. The
  // scratch file is synced before each gate, so no phase competes with the flush of the writes
  // before it. A failure drops this path from `gate`, so the other paths do not wait for it.
  // Returns the figures of the engine of the two ways (together, apart).
  std::pair<io::io_stats, io::io_stats> run(std::barrier<>& gate, std::array<span_of_time, phases>& time) {
    try {
      const io::engine_options& options = store_.options().io;
      io::file f(folder_ / "raw-replay.scratch", io::open_mode::read_write,
                 io::file_options{.create = true, .direct = store_.options().direct, .unlinked = true});
      const std::uint64_t size = reads_.length + writes_.length;
      f.preallocate(size);
      const slots memory(options.queue_depth, options.block_size, std::max<std::size_t>(f.memory_alignment(), 4096));
      {
        // Written whole once, as the swap store writes its files at creation.
        const std::unique_ptr<io::io_engine> e = make_engine(store_, backend_);
        lane none{.op = io::io_op::read, .length = 1};
        lane all{.op = io::io_op::write, .length = size, .want = size};
        pump(*e, f, memory, options.block_size, options.queue_depth, none, all);
      }
      const lane no_reads{.op = io::io_op::read, .length = 1};
      const lane no_writes{.op = io::io_op::write, .length = 1};
      // Each phase starts from the drive, not from a write cache on its way there (a virtual
      // disk's host page cache, a drive's own): a timed phase must not compete with the flush of
      // the writes before it.
      const auto timed = [&](io::io_engine& e, std::size_t phase, lane reads, lane writes) {
        f.sync();
        gate.arrive_and_wait();
        time[phase].start = clock::now();
        pump(e, f, memory, options.block_size, options.queue_depth, reads, writes);
        time[phase].end = clock::now();
      };
      const std::unique_ptr<io::io_engine> together = make_engine(store_, backend_);
      timed(*together, 0, reads_, writes_);
      const std::unique_ptr<io::io_engine> apart = make_engine(store_, backend_);
      timed(*apart, 1, reads_, no_writes);
      timed(*apart, 2, no_reads, writes_);
      return {together->stats(), apart->stats()};
    } catch (...) {
      gate.arrive_and_drop();
      throw;
    }
  }

 private:
  const io::swap_store& store_;
  std::string_view backend_;
  std::filesystem::path folder_;
  lane reads_;
  lane writes_;
};

}  // namespace

raw_replay_result replay_raw(const io::swap_store& store, std::string_view backend, std::uint64_t read_bytes,
                             std::uint64_t write_bytes, const raw_replay_options& options) {
  raw_replay_result out;
  if (read_bytes == 0 && write_bytes == 0) return out;
  const std::vector<std::filesystem::path> folders = store.folders();
  const std::uint64_t block = store.options().io.block_size;
  // The store stripes in block units over its paths: path i takes blocks [n i / P, n (i + 1) / P)
  // of each direction, the last block's short tail with the last path.
  const auto share = [&](std::uint64_t bytes, std::size_t i) {
    const std::uint64_t blocks = bytes / block;
    const std::uint64_t first = blocks * i / folders.size();
    const std::uint64_t last = blocks * (i + 1) / folders.size();
    return (last - first) * block + (i + 1 == folders.size() ? bytes % block : 0);
  };
  std::vector<std::unique_ptr<path_replay>> paths;
  for (std::size_t i = 0; i < folders.size(); ++i) {
    const std::uint64_t reads = share(read_bytes, i);
    const std::uint64_t writes = share(write_bytes, i);
    if (reads == 0 && writes == 0) continue;  // fewer blocks than paths
    paths.push_back(std::make_unique<path_replay>(store, backend, folders[i], reads, writes, options.scratch_bytes));
  }
  std::barrier<> gate(static_cast<std::ptrdiff_t>(paths.size()));
  std::vector<std::exception_ptr> errors(paths.size());
  std::vector<std::pair<io::io_stats, io::io_stats>> figures(paths.size());
  std::vector<std::array<span_of_time, path_replay::phases>> times(paths.size());
  {
    std::vector<std::jthread> threads;
    for (std::size_t i = 0; i < paths.size(); ++i) {
      threads.emplace_back([&, i] {
        try {
          figures[i] = paths[i]->run(gate, times[i]);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  // A phase runs from its first start to its last end over the paths.
  const auto phase_seconds = [&](std::size_t phase) {
    clock::time_point first = times.front()[phase].start;
    clock::time_point last = times.front()[phase].end;
    for (const auto& t : times) {
      first = std::min(first, t[phase].start);
      last = std::max(last, t[phase].end);
    }
    return std::chrono::duration<double>(last - first).count();
  };
  out.together_seconds = phase_seconds(0);
  out.apart_seconds = phase_seconds(1) + phase_seconds(2);
  out.fastest = out.apart_seconds < out.together_seconds ? raw_replay_way::apart : raw_replay_way::together;
  out.seconds = std::min(out.together_seconds, out.apart_seconds);
  for (const auto& [together, apart] : figures) out.io += out.fastest == raw_replay_way::together ? together : apart;
  return out;
}

}  // namespace zoe::engine
