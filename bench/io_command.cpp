// `zoe-bench io`: how fast the I/O engine moves data between locked host memory and one file.
#include <sys/vfs.h>

#include <atomic>
#include <exception>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "support/host_buffer.hpp"
#include "support/measure.hpp"
#include "support/stamped_data.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/engine_factory.hpp"
#include "zoe/io/file.hpp"

namespace zoe::bench {
namespace {

constexpr long tmpfs_magic = 0x01021994;
constexpr long ramfs_magic = 0x858458f6;

struct io_settings {
  std::string path;
  std::string size_text = "1GiB";
  std::string block_text = "1MiB";
  std::size_t queue_depth = 32;
  std::size_t threads = 1;
  std::string engine = "posix";
  std::string op = "both";
  bool buffered = false;
  bool verify = false;
  int loops = 3;
  bool json = false;
  std::optional<std::uint64_t> seed;
};

struct io_result {
  std::string op;
  double median_seconds = 0;
  double median_gib_per_s = 0;
  double best_gib_per_s = 0;
};

// Everything one pass needs: the file, one engine and one set of buffers per thread.
struct io_rig {
  io_settings settings;
  std::uint64_t size = 0;
  std::size_t block = 0;
  std::unique_ptr<io::file> file;
  std::vector<std::unique_ptr<io::io_engine>> engines;
  std::unique_ptr<host_buffer> memory;

  [[nodiscard]] std::span<std::byte> slot(std::size_t thread, std::size_t index) const {
    return memory->span().subspan((thread * settings.queue_depth + index) * block, block);
  }
};

// Called with each block read, in completion order; may throw to stop the pass.
using block_visitor = std::function<void(std::span<const std::byte>, std::uint64_t)>;

// One pass over the whole file: thread t moves its contiguous share of blocks with queue_depth
// requests in flight. Returns seconds from the first submit to the last completion.
double run_pass(io_rig& rig, io::io_op op, const stamped_data* stamper, const block_visitor& visit) {
  const std::size_t threads = rig.settings.threads;
  const std::uint64_t blocks = (rig.size + rig.block - 1) / rig.block;
  std::atomic<bool> go{false};
  std::vector<std::exception_ptr> errors(threads);
  std::vector<std::jthread> pool;
  for (std::size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
        io::io_engine& engine = *rig.engines[t];
        std::uint64_t next = blocks * t / threads;
        const std::uint64_t last = blocks * (t + 1) / threads;
        std::vector<io::io_completion> done;
        const auto submit = [&](std::size_t slot_index) {
          const std::uint64_t offset = next * rig.block;
          const std::size_t length = static_cast<std::size_t>(std::min<std::uint64_t>(rig.block, rig.size - offset));
          auto buffer = rig.slot(t, slot_index).first(length);
          if (op == io::io_op::write) stamper->stamp(buffer, offset);
          engine.submit({op, rig.file.get(), buffer, offset, (offset << 16) | slot_index});
          ++next;
        };
        for (std::size_t s = 0; s < rig.settings.queue_depth && next < last; ++s) submit(s);
        while (engine.outstanding() > 0) {
          done.clear();
          engine.wait(done, 1);
          for (const io::io_completion& c : done) {
            c.throw_if_failed();
            const std::size_t slot_index = c.user_data & 0xffff;
            if (visit) visit(rig.slot(t, slot_index).first(c.bytes), c.user_data >> 16);
            if (next < last) submit(slot_index);
          }
        }
      } catch (...) {
        errors[t] = std::current_exception();
      }
    });
  }
  const auto start = bench_clock::now();
  go.store(true, std::memory_order_release);
  pool.clear();
  if (op == io::io_op::write && !rig.file->direct()) rig.file->sync();  // buffered: wait for the drive too
  const double seconds = seconds_since(start);
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return seconds;
}

// The seed stamped in the file's first sector, if the file holds a complete earlier run.
std::optional<std::uint64_t> existing_seed(io_rig& rig) {
  if (rig.file->logical_size() < rig.size) return std::nullopt;
  std::optional<std::uint64_t> seed;
  auto sector = rig.slot(0, 0).first(sector_size);
  const io::io_request r{io::io_op::read, rig.file.get(), sector, 0, 0};
  rig.engines[0]->run(std::span(&r, 1));
  return stamped_data::seed_of(sector);
}

double gib_per_s(std::uint64_t bytes, double seconds) {
  return static_cast<double>(bytes) / seconds / static_cast<double>(GiB);
}

io_result measure(io_rig& rig, io::io_op op, const stamped_data& data) {
  std::vector<double> seconds;
  double best = 0;
  for (int loop = 1; loop <= rig.settings.loops; ++loop) {
    const double s = run_pass(rig, op, &data, {});
    seconds.push_back(s);
    best = std::max(best, gib_per_s(rig.size, s));
    std::cerr << "zoe-bench io: " << io::op_name(op) << " loop " << loop << "/" << rig.settings.loops << ": "
              << format_bytes(rig.size) << " in " << std::fixed << std::setprecision(3) << s << " s, "
              << std::setprecision(2) << gib_per_s(rig.size, s) << " GiB/s\n";
  }
  const double med = median(seconds);
  return {io::op_name(op), med, gib_per_s(rig.size, med), best};
}

void verify(io_rig& rig, const stamped_data& data) {
  std::cerr << "zoe-bench io: verifying " << format_bytes(rig.size) << " of " << rig.file->path().string() << "\n";
  run_pass(rig, io::io_op::read, nullptr, [&](std::span<const std::byte> block, std::uint64_t offset) {
    if (auto bad = data.check(block, offset)) {
      throw corruption_error(str("verify failed in '", rig.file->path().string(), "' ", *bad));
    }
  });
  std::cerr << "zoe-bench io: verified, every sector is intact\n";
}

void print(const io_rig& rig, const std::vector<io_result>& results) {
  const io_settings& s = rig.settings;
  if (s.json) {
    for (const io_result& r : results) {
      const nlohmann::json j{{"bench", "io"},
                             {"mode", "raw"},
                             {"engine", std::string(rig.engines[0]->backend_name())},
                             {"op", r.op},
                             {"direct", rig.file->direct()},
                             {"path", rig.file->path().string()},
                             {"block_size", rig.block},
                             {"queue_depth", s.queue_depth},
                             {"threads", s.threads},
                             {"bytes", rig.size},
                             {"loops", s.loops},
                             {"seconds", r.median_seconds},
                             {"gib_per_s", r.median_gib_per_s},
                             {"best_gib_per_s", r.best_gib_per_s}};
      std::cout << j.dump() << "\n";
    }
    return;
  }
  std::cout << std::left << std::setw(7) << "op" << std::setw(8) << "engine" << std::setw(8) << "direct"
            << std::setw(10) << "block" << std::setw(6) << "qd" << std::setw(9) << "threads" << std::setw(10)
            << "size" << std::setw(14) << "median GiB/s" << "best GiB/s\n";
  for (const io_result& r : results) {
    std::cout << std::left << std::setw(7) << r.op << std::setw(8) << rig.engines[0]->backend_name() << std::setw(8)
              << (rig.file->direct() ? "yes" : "no") << std::setw(10) << format_bytes(rig.block) << std::setw(6)
              << s.queue_depth << std::setw(9) << s.threads << std::setw(10) << format_bytes(rig.size) << std::fixed
              << std::setprecision(2) << std::setw(14) << r.median_gib_per_s << r.best_gib_per_s << "\n";
  }
}

void check_directory(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  ZOE_EXPECTS(std::filesystem::exists(status), "--path '", path, "' does not exist");
  ZOE_EXPECTS(std::filesystem::is_directory(status), "--path '", path, "' is not a directory");
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) == 0 && (fs.f_type == tmpfs_magic || fs.f_type == ramfs_magic)) {
    log::warn("--path '", path, "' is on ", fs.f_type == tmpfs_magic ? "tmpfs" : "ramfs",
              ": this measures memory, not a drive");
  }
}

void run_io(const io_settings& settings) {
  io_rig rig;
  rig.settings = settings;
  rig.size = parse_bytes(settings.size_text, "--size");
  rig.block = static_cast<std::size_t>(parse_bytes(settings.block_text, "--block-size"));
  ZOE_EXPECTS(rig.size > 0 && rig.size % sector_size == 0, "--size must be a positive multiple of 4 KiB, got ",
              settings.size_text);
  check_directory(settings.path);
  const io::engine_options options{.block_size = rig.block, .queue_depth = settings.queue_depth};
  try {
    options.validate();
  } catch (const usage_error& e) {
    throw usage_error(str("--block-size / --queue-depth: ", e.what()));
  }

  rig.file = std::make_unique<io::file>(std::filesystem::path(settings.path) / "zoe-bench.dat", io::open_mode::read_write,
                                        io::file_options{.create = true, .direct = !settings.buffered});
  for (std::size_t t = 0; t < settings.threads; ++t) {
    io::backend_choice choice = io::choose_backend(settings.engine, options);
    if (t == 0 && !choice.explanation.empty()) std::cerr << "zoe-bench io: " << choice.explanation << "\n";
    rig.engines.push_back(std::make_unique<io::io_engine>(std::move(choice.backend), options));
  }
  const std::size_t buffer_bytes = settings.threads * settings.queue_depth * rig.block;
  std::cerr << "zoe-bench io: " << format_bytes(buffer_bytes) << " of locked buffers, engine "
            << rig.engines[0]->backend_name() << ", file " << rig.file->path().string()
            << (rig.file->direct() ? " (O_DIRECT)" : " (buffered)") << "\n";
  rig.memory = std::make_unique<host_buffer>(buffer_bytes);
  // Registered once, as the swap store and buffer pools will: io_uring then uses fixed buffers.
  const std::span<std::byte> regions[] = {rig.memory->span()};
  for (auto& engine : rig.engines) engine->register_buffers(regions);

  const bool writes = settings.op != "read";
  std::optional<std::uint64_t> seed = existing_seed(rig);
  if (!seed) {
    // Both reads and writes run against a file already written: a write into fresh space costs
    // the file system extra work (extent conversion) that a steady-state overwrite does not.
    seed = settings.seed.value_or(std::random_device{}());
    std::cerr << "zoe-bench io: writing " << format_bytes(rig.size) << " once before timing\n";
    const stamped_data fill(*seed);
    fill.fill_bodies(rig.memory->span());
    run_pass(rig, io::io_op::write, &fill, {});
  } else if (writes) {
    seed = settings.seed.value_or(*seed + 1);  // a new run's stamps, so torn blocks are visible
  }
  const stamped_data data(*seed);
  data.fill_bodies(rig.memory->span());

  std::vector<io_result> results;
  if (writes) results.push_back(measure(rig, io::io_op::write, data));
  if (settings.op != "write") results.push_back(measure(rig, io::io_op::read, data));
  if (settings.verify) verify(rig, data);
  print(rig, results);
}

}  // namespace

void add_io_command(CLI::App& app) {
  auto settings = std::make_shared<io_settings>();
  CLI::App* cmd = app.add_subcommand(
      "io",
      "Bandwidth of one file under DIR (DIR/zoe-bench.dat) through the I/O engine. The file is written once "
      "before timing if it is missing or short, so both reads and writes measure a file already written. Each "
      "loop moves the whole file; the figure is the median over loops, from the first submit to the last "
      "completion. Data is self-verifying (every 4 KiB sector stamped with its offset and the run's seed).");
  cmd->add_option("--path", settings->path, "directory to put zoe-bench.dat in (a real drive, not tmpfs)")->required();
  cmd->add_option("--size", settings->size_text, "file size (e.g. 1GiB; a multiple of 4 KiB)")->capture_default_str();
  cmd->add_option("--block-size", settings->block_text, "bytes per request (a multiple of 4 KiB)")->capture_default_str();
  cmd->add_option("--queue-depth", settings->queue_depth, "requests in flight per thread")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--threads", settings->threads, "worker threads, each with its own engine and share of the file")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--engine", settings->engine, "I/O backend")
      ->check(CLI::IsMember(io::available_backends_and_auto()))
      ->capture_default_str();
  cmd->add_option("--op", settings->op, "what to time")->check(CLI::IsMember({"read", "write", "both"}))->capture_default_str();
  cmd->add_flag("--buffered", settings->buffered, "use the page cache instead of O_DIRECT (writes then end with fdatasync)");
  cmd->add_flag("--verify", settings->verify,
                "after timing, read the file back and check every sector; exit 1 naming the first bad offset");
  cmd->add_option("--loops", settings->loops, "timed passes per op")->check(CLI::Range(1, 1000))->capture_default_str();
  cmd->add_option("--seed", settings->seed, "seed of the data written (default: random, or the file's seed + 1)");
  cmd->add_flag("--json", settings->json, "print one JSON object per result instead of the table");
  cmd->callback([settings] { run_io(*settings); });
}

}  // namespace zoe::bench
