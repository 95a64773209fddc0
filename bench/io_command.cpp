// `zoe-bench io`: how fast zoe moves data between locked host memory and a drive, raw through the
// I/O engine and (with --store) through the checksummed swap store.
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <random>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "io_pass.hpp"
#include "io_settings.hpp"
#include "io_sweep.hpp"
#include "support/measure.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/engine_factory.hpp"
#include "zoe/io/file_system.hpp"

namespace zoe::bench {
namespace {

struct io_result {
  std::string mode;
  std::string op;
  std::vector<double> seconds;
  double median_seconds = 0;
  double median_gib_per_s = 0;
  double best_gib_per_s = 0;
};

// A target ready to time: its data written once and the stamps the timed writes will use.
struct prepared_target {
  std::unique_ptr<io_target> target;
  std::unique_ptr<stamped_data> data;
};

prepared_target prepare(std::unique_ptr<io_target> target, const io_settings& s, const pass_layout& layout,
                        const host_buffer& memory) {
  const std::span<std::byte> regions[] = {memory.span()};
  target->register_buffers(regions);
  std::cerr << "zoe-bench io: " << target->mode() << " mode, engine " << target->engine_name() << ", "
            << target->where() << (target->direct() ? " (O_DIRECT)" : " (buffered)") << "\n";
  if (const std::string note = target->setup_note(); !note.empty()) std::cerr << "zoe-bench io: " << note << "\n";
  std::optional<std::uint64_t> seed = earlier_seed(*target, layout, memory);
  if (!seed && s.op == "write" && target->holds_earlier_run()) {
    // The file has its size but not our stamps (another tool, such as fio in compare_fio, wrote it
    // last). Every timed pass overwrites each byte, so laying it out first would be wasted time;
    // --verify then reads what the last timed pass wrote, all stamped with this seed.
    seed = s.seed.value_or(std::random_device{}());
    std::cerr << "zoe-bench io: " << target->where() << " already holds " << format_bytes(layout.size)
              << " not written by zoe-bench; the timed writes overwrite all of it\n";
  } else if (!seed) {
    // Reads and writes both run against data already written: a write into fresh space costs
    // the file system extra work (extent conversion) that a steady-state overwrite does not.
    seed = s.seed.value_or(std::random_device{}());
    std::cerr << "zoe-bench io: writing " << format_bytes(layout.size) << " once before timing\n";
    const stamped_data fill(*seed);
    run_pass(*target, layout, memory, io::io_op::write, &fill, {});
  } else if (s.op != "read") {
    seed = s.seed.value_or(*seed + 1);  // a new run's stamps, so torn blocks are visible
  }
  return {std::move(target), std::make_unique<stamped_data>(*seed)};
}

void verify(const prepared_target& p, const pass_layout& layout, const host_buffer& memory) {
  std::cerr << "zoe-bench io: verifying " << format_bytes(layout.size) << " of " << p.target->where() << "\n";
  run_pass(*p.target, layout, memory, io::io_op::read, nullptr,
           [&](std::span<const std::byte> block, std::uint64_t offset) {
             if (auto bad = p.data->check(block, offset)) {
               throw corruption_error(str("verify failed in '", p.target->where(), "' ", *bad));
             }
           });
  std::cerr << "zoe-bench io: verified " << p.target->mode() << ", every sector is intact\n";
}

void print(const io_settings& s, const std::vector<prepared_target>& targets, const std::vector<io_result>& results) {
  const auto target_of = [&](const std::string& mode) -> const io_target& {
    for (const auto& p : targets) {
      if (p.target->mode() == mode) return *p.target;
    }
    throw internal_error("no target for mode " + mode);
  };
  if (s.json) {
    for (const io_result& r : results) {
      const io_target& t = target_of(r.mode);
      const nlohmann::json j{{"bench", "io"},
                             {"mode", r.mode},
                             {"engine", t.engine_name()},
                             {"op", r.op},
                             {"direct", t.direct()},
                             {"path", t.where()},
                             {"block_size", s.block},
                             {"queue_depth", s.queue_depth},
                             {"threads", s.threads},
                             {"bytes", s.size},
                             {"loops", s.loops},
                             {"seconds", r.median_seconds},
                             {"gib_per_s", r.median_gib_per_s},
                             {"best_gib_per_s", r.best_gib_per_s}};
      std::cout << j.dump() << "\n";
    }
    return;
  }
  std::cout << std::left << std::setw(7) << "mode" << std::setw(7) << "op" << std::setw(8) << "engine" << std::setw(8)
            << "direct" << std::setw(10) << "block" << std::setw(6) << "qd" << std::setw(9) << "threads"
            << std::setw(10) << "size" << std::setw(14) << "median GiB/s"
            << "best GiB/s\n";
  for (const io_result& r : results) {
    const io_target& t = target_of(r.mode);
    std::cout << std::left << std::setw(7) << r.mode << std::setw(7) << r.op << std::setw(8) << t.engine_name()
              << std::setw(8) << (t.direct() ? "yes" : "no") << std::setw(10) << format_bytes(s.block) << std::setw(6)
              << s.queue_depth << std::setw(9) << s.threads << std::setw(10) << format_bytes(s.size) << std::fixed
              << std::setprecision(2) << std::setw(14) << r.median_gib_per_s << r.best_gib_per_s << "\n";
  }
}

void run_io(io_settings s) {
  s.check();
  if (s.sweep) {
    run_sweep(s);
    return;
  }
  const io::engine_options options{.block_size = s.block, .queue_depth = s.queue_depth};
  const pass_layout layout{s.size, s.block, s.queue_depth, s.threads};
  std::cerr << "zoe-bench io: " << format_bytes(layout.buffer_bytes()) << " of locked buffers\n";
  const host_buffer memory(layout.buffer_bytes());

  std::vector<prepared_target> targets;
  targets.push_back(
      prepare(make_raw_target(s.path, s.size, s.buffered, s.engine, options, s.threads), s, layout, memory));
  if (s.store) {
    targets.push_back(
        prepare(make_store_target(s.path, s.size, s.buffered, s.engine, options, s.threads), s, layout, memory));
  }

  std::vector<io::io_op> ops;
  if (s.op != "read") ops.push_back(io::io_op::write);
  if (s.op != "write") ops.push_back(io::io_op::read);
  std::vector<io_result> results;
  for (const io::io_op op : ops) {
    const std::size_t first = results.size();
    for (const auto& p : targets) results.push_back({p.target->mode(), io::op_name(op), {}, 0, 0, 0});
    // Loops alternate between the modes, so a noisy moment hurts both alike.
    for (int loop = 1; loop <= s.loops; ++loop) {
      for (std::size_t i = 0; i < targets.size(); ++i) {
        const prepared_target& p = targets[i];
        const double seconds = run_pass(*p.target, layout, memory, op, p.data.get(), {});
        results[first + i].seconds.push_back(seconds);
        std::cerr << "zoe-bench io: " << p.target->mode() << " " << io::op_name(op) << " loop " << loop << "/"
                  << s.loops << ": " << format_bytes(s.size) << " in " << std::fixed << std::setprecision(3) << seconds
                  << " s, " << std::setprecision(2) << gib_per_s(s.size, seconds) << " GiB/s\n";
      }
    }
  }
  for (io_result& r : results) {
    r.median_seconds = median(r.seconds);
    r.median_gib_per_s = gib_per_s(s.size, r.median_seconds);
    for (const double sec : r.seconds) r.best_gib_per_s = std::max(r.best_gib_per_s, gib_per_s(s.size, sec));
  }
  if (s.verify) {
    for (const auto& p : targets) verify(p, layout, memory);
  }
  print(s, targets, results);
}

}  // namespace

void check_bench_directory(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  ZOE_EXPECTS(std::filesystem::exists(status), "--path '", path, "' does not exist");
  ZOE_EXPECTS(std::filesystem::is_directory(status), "--path '", path, "' is not a directory");
  if (const auto memory = io::memory_file_system(path)) {
    log::warn("--path '", path, "' is on ", *memory, ": this measures memory, not a drive");
  }
}

void io_settings::check() {
  size = parse_bytes(size_text, "--size");
  block = static_cast<std::size_t>(parse_bytes(block_text, "--block-size"));
  ZOE_EXPECTS(size > 0 && size % sector_size == 0, "--size must be a positive multiple of 4 KiB, got ", size_text);
  check_bench_directory(path);
  check_engine_options(block, queue_depth, "--block-size / --queue-depth");
}

void check_engine_options(std::size_t block, std::size_t queue_depth, std::string_view flags) {
  try {
    io::engine_options{.block_size = block, .queue_depth = queue_depth}.validate();
  } catch (const usage_error& e) {
    throw usage_error(str(flags, ": ", e.what()));
  }
}

void add_io_command(CLI::App& app) {
  auto s = std::make_shared<io_settings>();
  CLI::App* cmd = app.add_subcommand("io", "bandwidth of a drive through the I/O engine and the swap store");
  cmd->footer(
      "Times passes over DIR/zoe-bench.dat (and, with --store, over a swap store in DIR). The data is written once "
      "before timing if missing, so both reads and writes measure data already written. Each loop moves everything "
      "once; the figure is the median over loops, from the first submit to the last completion. Data is "
      "self-verifying: every 4 KiB sector is stamped with its offset and the run's seed. Exit 2: bad flags; "
      "exit 1: I/O error or bad data.");
  const auto engines = io::available_backends_and_auto();
  cmd->add_option("--path", s->path, "directory to measure in (a real drive, not tmpfs)")->required();
  cmd->add_option("--size", s->size_text, "bytes per pass (e.g. 1GiB; a multiple of 4 KiB)")->capture_default_str();
  cmd->add_option("--block-size", s->block_text, "bytes per request (a power of two, 4 KiB to 1 GiB)")
      ->capture_default_str();
  cmd->add_option("--queue-depth", s->queue_depth, "requests in flight per thread")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--threads", s->threads, "worker threads, each with its own engine and share of the data")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--engine", s->engine, "I/O backend")->check(CLI::IsMember(engines))->capture_default_str();
  CLI::Option* op = cmd->add_option("--op", s->op, "what to time")
                        ->check(CLI::IsMember({"read", "write", "both"}))
                        ->capture_default_str();
  cmd->add_flag("--buffered", s->buffered, "use the page cache instead of O_DIRECT (writes then end with fdatasync)");
  CLI::Option* store =
      cmd->add_flag("--store", s->store,
                    "also run the workload through the swap store (checksums on) and report \"mode\": \"store\"");
  CLI::Option* verify =
      cmd->add_flag("--verify", s->verify,
                    "after timing, read everything back and check every sector; exit 1 naming the first bad offset");
  cmd->add_option("--loops", s->loops, "timed passes per op and mode")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--seed", s->seed, "seed of the data written (default: random, or the file's seed + 1)");
  cmd->add_flag("--json", s->json, "print one JSON object per result instead of the table");
  // The sweep times raw reads and writes alike and verifies nothing: these flags would be ignored.
  cmd->add_flag("--sweep", s->sweep,
                "try every combination of the --sweep-* lists, print the table and the best as a DeepSpeed aio block")
      ->excludes(op)
      ->excludes(store)
      ->excludes(verify);
  cmd->add_option("--sweep-block-sizes", s->sweep_block_sizes, "block sizes to sweep")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--sweep-queue-depths", s->sweep_queue_depths, "queue depths to sweep")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--sweep-threads", s->sweep_threads, "thread counts to sweep")
      ->delimiter(',')
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--sweep-engines", s->sweep_engines, "engines to sweep (default: every one in this build)")
      ->delimiter(',')
      ->check(CLI::IsMember(io::available_backends()));
  cmd->callback([s] { run_io(*s); });
}

}  // namespace zoe::bench
