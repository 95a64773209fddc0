#include "io_sweep.hpp"

#include <iomanip>
#include <iostream>
#include <random>

#include <nlohmann/json.hpp>

#include "io_pass.hpp"
#include "support/measure.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/engine_factory.hpp"

namespace zoe::bench {
namespace {

struct sweep_point {
  std::string engine;
  std::size_t block = 0;
  std::size_t queue_depth = 0;
  std::size_t threads = 0;
  double read_gib_per_s = 0;
  double write_gib_per_s = 0;
};

double median_rate(io_target& target, const pass_layout& layout, const host_buffer& memory, io::io_op op,
                   const stamped_data& data, int loops) {
  std::vector<double> seconds;
  for (int i = 0; i < loops; ++i) seconds.push_back(run_pass(target, layout, memory, op, &data, {}));
  return gib_per_s(layout.size, median(seconds));
}

nlohmann::json aio_block(const sweep_point& p) {
  return {{"block_size", p.block},  {"queue_depth", p.queue_depth}, {"intra_op_parallelism", p.threads},
          {"single_submit", false}, {"overlap_events", true},       {"use_gds", false}};
}

// Every backend of this build that the kernel accepts, each refused one skipped with a note.
std::vector<std::string> accepted_backends(const io::engine_options& options) {
  std::vector<std::string> out;
  for (const auto& name : io::available_backends()) {
    try {
      (void)io::choose_backend(name, options);
      out.push_back(name);
    } catch (const io_error& e) {
      std::cerr << "zoe-bench io --sweep: skipping engine " << name << ": " << e.what() << "\n";
    }
  }
  if (out.empty()) throw io_error("zoe-bench io --sweep: the kernel refuses every engine of this build", 0);
  return out;
}

}  // namespace

void run_sweep(const io_settings& s) {
  std::vector<std::size_t> blocks;
  for (const auto& text : s.sweep_block_sizes) {
    blocks.push_back(static_cast<std::size_t>(parse_bytes(text, "--sweep-block-sizes")));
    for (const auto depth : s.sweep_queue_depths) {
      check_engine_options(blocks.back(), depth, "--sweep-block-sizes / --sweep-queue-depths");
    }
    ZOE_EXPECTS(s.size % blocks.back() == 0, "--sweep-block-sizes: ", text, " must divide --size ", s.size_text);
  }
  // Named engines must work; of the default (every one in this build) the refused ones are skipped.
  const std::vector<std::string> engines =
      s.sweep_engines.empty() ? accepted_backends({.block_size = s.block, .queue_depth = s.queue_depth})
                              : s.sweep_engines;
  std::size_t most = 0;
  for (const auto b : blocks) {
    for (const auto q : s.sweep_queue_depths) {
      for (const auto t : s.sweep_threads) most = std::max(most, b * q * t);
    }
  }
  const std::size_t points = engines.size() * blocks.size() * s.sweep_queue_depths.size() * s.sweep_threads.size();
  std::cerr << "zoe-bench io --sweep: " << points << " settings x " << s.loops << " loops of " << format_bytes(s.size)
            << " read and written, " << format_bytes(most) << " of locked buffers\n";
  const host_buffer memory(most);
  const stamped_data data(s.seed.value_or(std::random_device{}()));

  std::vector<sweep_point> results;
  bool laid_out = false;
  for (const auto& engine : engines) {
    for (const auto block : blocks) {
      for (const auto depth : s.sweep_queue_depths) {
        for (const auto threads : s.sweep_threads) {
          const io::engine_options options{.block_size = block, .queue_depth = depth};
          auto target = make_raw_target(s.path, s.size, s.buffered, engine, options, threads);
          const pass_layout layout{s.size, block, depth, threads};
          const std::span<std::byte> regions[] = {memory.span()};
          target->register_buffers(regions);
          if (!laid_out && !target->holds_earlier_run()) run_pass(*target, layout, memory, io::io_op::write, &data, {});
          laid_out = true;
          sweep_point p{target->engine_name(), block, depth, threads, 0, 0};
          p.write_gib_per_s = median_rate(*target, layout, memory, io::io_op::write, data, s.loops);
          p.read_gib_per_s = median_rate(*target, layout, memory, io::io_op::read, data, s.loops);
          std::cerr << "zoe-bench io --sweep: " << results.size() + 1 << "/" << points << " " << p.engine << " block "
                    << format_bytes(block) << " qd " << depth << " threads " << threads << ": read " << std::fixed
                    << std::setprecision(2) << p.read_gib_per_s << ", write " << p.write_gib_per_s << " GiB/s\n";
          results.push_back(p);
        }
      }
    }
  }

  double best_read = 0;
  double best_write = 0;
  for (const auto& p : results) {
    best_read = std::max(best_read, p.read_gib_per_s);
    best_write = std::max(best_write, p.write_gib_per_s);
  }
  // The recommendation is the most balanced setting: the one whose worse side is closest to the
  // best seen for that side, since a swap store reads and writes alike.
  const auto score = [&](const sweep_point& p) {
    return std::min(p.read_gib_per_s / best_read, p.write_gib_per_s / best_write);
  };
  const sweep_point* best = &results.front();
  for (const auto& p : results) {
    if (score(p) > score(*best)) best = &p;
  }

  if (s.json) {
    for (const auto& p : results) {
      std::cout << nlohmann::json{{"bench", "io"},
                                  {"mode", "sweep"},
                                  {"engine", p.engine},
                                  {"block_size", p.block},
                                  {"queue_depth", p.queue_depth},
                                  {"threads", p.threads},
                                  {"bytes", s.size},
                                  {"loops", s.loops},
                                  {"read_gib_per_s", p.read_gib_per_s},
                                  {"write_gib_per_s", p.write_gib_per_s}}
                       .dump()
                << "\n";
    }
    std::cout << nlohmann::json{{"bench", "io"},
                                {"mode", "sweep_best"},
                                {"engine", best->engine},
                                {"aio", aio_block(*best)}}
                     .dump()
              << "\n";
    return;
  }
  std::cout << std::left << std::setw(8) << "engine" << std::setw(10) << "block" << std::setw(6) << "qd" << std::setw(9)
            << "threads" << std::setw(12) << "read GiB/s"
            << "write GiB/s\n";
  for (const auto& p : results) {
    std::cout << std::left << std::setw(8) << p.engine << std::setw(10) << format_bytes(p.block) << std::setw(6)
              << p.queue_depth << std::setw(9) << p.threads << std::fixed << std::setprecision(2) << std::setw(12)
              << p.read_gib_per_s << p.write_gib_per_s << (&p == best ? "   <- best balance" : "") << "\n";
  }
  std::cout << "\nbest read " << std::setprecision(2) << best_read << " GiB/s, best write " << best_write
            << " GiB/s; recommended (zoe engine \"" << best->engine << "\"), as a DeepSpeed aio block:\n"
            << nlohmann::json{{"aio", aio_block(*best)}}.dump(2) << "\n";
}

}  // namespace zoe::bench
