// `zoe-bench alloc`: the defragmenting arena on a ZeRO-3-like trace (against the same arena with
// compaction off), compaction bandwidth against a single-thread memcpy, and the cost of a pool
// acquire/release.
#include <algorithm>
#include <cstring>
#include <memory>
#include <iomanip>
#include <iostream>
#include <optional>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "support/measure.hpp"
#include "zoe/allocators/arena.hpp"
#include "zoe/allocators/buffer_pool.hpp"
#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"

namespace zoe::bench {
namespace {

struct alloc_settings {
  int layers = 24;
  std::uint64_t hidden = 2048;
  int steps = 3;
  std::uint64_t seed = 1;
  double headroom = 1.1;
  std::uint64_t pool_iterations = 1'000'000;
  std::string compaction_size_text = "512MiB";
  bool json = false;
};

// One event of the trace: allocate `bytes` as buffer `id`, or free buffer `id`.
struct trace_op {
  bool alloc;
  std::uint32_t id;
  std::uint64_t bytes;
};

// The ZeRO-3-like trace: per step, forward fetches layer l+1 while l computes and releases l after
// use, leaving an activation checkpoint behind; backward walks the layers in reverse, fetching
// again, leaving a gradient partition and dropping the checkpoint; small persistent parameters
// appear between layers in the first step and live forever.
class trace_builder {
 public:
  explicit trace_builder(const alloc_settings& s) : s_(s), rng_(s.seed) {}

  std::vector<trace_op> build() {
    const std::uint64_t h = s_.hidden;
    constexpr std::uint64_t b = 2;  // bytes per element: fp16/bf16 parameters and activations
    const std::vector<std::uint64_t> layer_tensors{3 * h * h * b, h * h * b, 4 * h * h * b, h * 4 * h * b, 3 * h * b,
                                                   h * b,         4 * h * b, h * b,         h * b,         h * b};
    std::uint64_t layer_bytes = 0;
    for (const auto t : layer_tensors) layer_bytes += t;
    const auto layers = static_cast<std::size_t>(s_.layers);
    for (int step = 0; step < s_.steps; ++step) {
      std::vector<std::vector<std::uint32_t>> fetched(layers);
      std::vector<std::uint32_t> checkpoints(layers);
      std::vector<std::uint32_t> gradients;
      const auto fetch = [&](std::size_t l) {
        // The order tensors arrive in depends on which all-gather finishes first.
        std::vector<std::uint64_t> order = layer_tensors;
        std::shuffle(order.begin(), order.end(), rng_);
        for (const auto t : order) fetched[l].push_back(alloc(t));
      };
      const auto release = [&](std::size_t l) {
        for (const auto id : fetched[l]) free(id);
        fetched[l].clear();
      };
      fetch(0);
      for (std::size_t l = 0; l < layers; ++l) {
        if (l + 1 < layers) fetch(l + 1);
        checkpoints[l] = alloc((1024 + rng_() % 1024) * h * b);  // one sequence's activations
        if (step == 0) {
          alloc(h * b + 256 * (rng_() % 8));  // persistent small parameters, never freed
          alloc(h * b);
        }
        release(l);
      }
      fetch(layers - 1);
      for (std::size_t l = layers; l-- > 0;) {
        if (l > 0) fetch(l - 1);
        gradients.push_back(alloc(layer_bytes / 8));  // this rank's gradient partition of the layer
        free(checkpoints[l]);
        release(l);
      }
      for (const auto id : gradients) free(id);  // the optimizer step consumed them
    }
    return std::move(ops_);
  }

 private:
  std::uint32_t alloc(std::uint64_t bytes) {
    const auto id = next_++;
    ops_.push_back({true, id, bytes});
    return id;
  }
  void free(std::uint32_t id) { ops_.push_back({false, id, 0}); }

  const alloc_settings& s_;
  std::mt19937_64 rng_;
  std::vector<trace_op> ops_;
  std::uint32_t next_ = 0;
};

// Peak of live bytes as the arena counts them (each block rounded to its alignment).
std::uint64_t peak_live_bytes(const std::vector<trace_op>& ops, std::size_t alignment) {
  std::vector<std::uint64_t> sizes;
  std::uint64_t live = 0;
  std::uint64_t peak = 0;
  for (const auto& op : ops) {
    if (op.alloc) {
      if (sizes.size() <= op.id) sizes.resize(op.id + 1);
      sizes[op.id] = align_up(op.bytes, alignment);
      live += sizes[op.id];
      peak = std::max(peak, live);
    } else {
      live -= sizes[op.id];
    }
  }
  return peak;
}

struct replay_result {
  std::string arena;
  std::uint64_t allocations = 0;
  std::uint64_t failed = 0;
  allocators::arena_stats stats;
  double seconds = 0;
};

replay_result replay(device& dev, const std::vector<trace_op>& ops, std::size_t capacity, bool compaction) {
  allocators::arena arena(dev, capacity, {.compaction = compaction, .name = compaction ? "defrag" : "nodefrag"});
  std::vector<std::optional<allocators::arena_block>> blocks;
  replay_result r;
  r.arena = arena.name();
  const auto start = bench_clock::now();
  for (const auto& op : ops) {
    if (op.alloc) {
      if (blocks.size() <= op.id) blocks.resize(op.id + 1);
      ++r.allocations;
      blocks[op.id] = arena.try_allocate(op.bytes);
      if (blocks[op.id]) {
        // Touch both ends as a fetch would write them.
        auto* p = static_cast<unsigned char*>(blocks[op.id]->data());
        p[0] = 1;
        p[op.bytes - 1] = 1;
      } else {
        ++r.failed;
      }
    } else {
      blocks[op.id].reset();  // a failed allocation has nothing to free
    }
  }
  r.seconds = seconds_since(start);
  blocks.clear();
  r.stats = arena.stats();
  return r;
}

// A compaction bandwidth against a single-thread memcpy of the same bytes, both as medians of
// runs that alternate on this thread (the machine is shared and noisy; alternating spreads the
// noise over both sides). Rates count bytes read plus written, as memcpy_probe counts them.
struct bandwidth_comparison {
  double compaction_gib_per_s = 0;
  double memcpy_gib_per_s = 0;
  std::uint64_t bytes_per_run = 0;
  int runs = 0;
  [[nodiscard]] double ratio() const { return compaction_gib_per_s / memcpy_gib_per_s; }
};

constexpr int bandwidth_runs = 7;

// Synthetic: a full arena of 64 blocks, every other block freed, one compact() (it moves half the
// arena in 32 non-overlapping block moves), alternating with a memcpy of the bytes it moves.
bandwidth_comparison synthetic_compaction(device& dev, std::size_t bytes) {
  constexpr std::size_t blocks = 64;
  const std::size_t block = align_down(bytes / blocks, 256);
  bandwidth_comparison out;
  out.bytes_per_run = block * blocks / 2;
  memcpy_probe probe(out.bytes_per_run, 1);
  std::vector<double> compaction_rates;
  std::vector<double> memcpy_rates;
  for (int r = 0; r < bandwidth_runs; ++r) {
    allocators::arena arena(dev, block * blocks, {.name = "compaction"});
    std::vector<allocators::arena_block> held;
    for (std::size_t i = 0; i < blocks; ++i) {
      held.push_back(arena.allocate(block));
      std::memset(held.back().data(), static_cast<int>(i), block);  // give content
    }
    for (std::size_t i = 0; i < blocks; i += 2) held[i].reset();
    memcpy_rates.push_back(probe.gib_per_s(probe.run_once()));
    const auto before = arena.stats();
    const auto moved = arena.compact();
    const auto after = arena.stats();
    ZOE_CHECK(moved == out.bytes_per_run, ::zoe::internal_error, "the synthetic compaction moved ", moved,
              " bytes, expected ", out.bytes_per_run);
    compaction_rates.push_back(gib_per_s(2 * moved, after.seconds_compacting - before.seconds_compacting));
  }
  out.compaction_gib_per_s = median(compaction_rates);
  out.memcpy_gib_per_s = median(memcpy_rates);
  out.runs = bandwidth_runs;
  return out;
}

// The trace's own compactions: each replay with compaction on gives one rate (all its bytes moved
// over all its time compacting, waits and bookkeeping included), alternating with memcpy runs of
// the bytes one of its compactions moves on average, as many as it compacted. Nothing when the
// trace (a small model, a generous headroom) never compacts.
std::optional<bandwidth_comparison> trace_compaction(device& dev, const std::vector<trace_op>& ops,
                                                     std::size_t capacity) {
  bandwidth_comparison out;
  std::unique_ptr<memcpy_probe> probe;
  std::vector<double> compaction_rates;
  std::vector<double> memcpy_rates;
  for (int r = 0; r < bandwidth_runs; ++r) {
    const auto replayed = replay(dev, ops, capacity, true);
    const auto& st = replayed.stats;
    if (st.compactions == 0) return std::nullopt;
    compaction_rates.push_back(gib_per_s(2 * st.bytes_moved, st.seconds_compacting));
    if (!probe) {
      out.bytes_per_run = st.bytes_moved / st.compactions;
      probe = std::make_unique<memcpy_probe>(out.bytes_per_run, 1);
    }
    double seconds = 0;
    for (std::uint64_t c = 0; c < st.compactions; ++c) seconds += probe->run_once();
    memcpy_rates.push_back(probe->gib_per_s(seconds / static_cast<double>(st.compactions)));
  }
  out.compaction_gib_per_s = median(compaction_rates);
  out.memcpy_gib_per_s = median(memcpy_rates);
  out.runs = bandwidth_runs;
  return out;
}

double pool_acquire_release_ns(device& dev, std::uint64_t iterations) {
  allocators::pinned_host_resource resource(dev);
  allocators::buffer_pool pool(resource, {.buffer_count = 8, .buffer_size = 4 * KiB, .name = "bench pool"});
  std::vector<double> per_op;
  for (int r = 0; r < 5; ++r) {
    const auto start = bench_clock::now();
    for (std::uint64_t i = 0; i < iterations; ++i) {
      auto lease = pool.acquire();
      // Keep the compiler from dropping the pair as dead code.
      asm volatile("" : : "r"(lease.data()) : "memory");
    }
    per_op.push_back(seconds_since(start) * 1e9 / static_cast<double>(iterations));
  }
  return median(per_op);
}

void run_alloc(const alloc_settings& s) {
  ZOE_EXPECTS(s.layers > 0 && s.hidden > 0 && s.steps > 0, "--layers, --hidden and --steps must be positive");
  ZOE_EXPECTS(s.headroom >= 1.0, "--headroom must be at least 1.0, got ", s.headroom);
  const std::uint64_t compaction_bytes = parse_bytes(s.compaction_size_text, "--compaction-size");

  const auto ops = trace_builder(s).build();
  constexpr std::size_t alignment = 256;
  const std::uint64_t peak = peak_live_bytes(ops, alignment);
  const auto capacity =
      static_cast<std::size_t>(align_up(static_cast<std::uint64_t>(static_cast<double>(peak) * s.headroom), alignment));
  const auto dev = make_host_device(std::max<std::uint64_t>(capacity, compaction_bytes) + 64 * MiB);
  std::cerr << "zoe-bench alloc: " << ops.size() << " trace operations, peak live " << format_bytes(peak) << ", arena "
            << format_bytes(capacity) << "\n";

  std::vector<replay_result> results;
  results.push_back(replay(*dev, ops, capacity, true));
  results.push_back(replay(*dev, ops, capacity, false));
  const auto synthetic = synthetic_compaction(*dev, compaction_bytes);
  const auto traced = trace_compaction(*dev, ops, capacity);
  const double pool_ns = pool_acquire_release_ns(*dev, s.pool_iterations);

  if (s.json) {
    for (const auto& r : results) {
      const nlohmann::json j{{"bench", "alloc"},
                             {"arena", r.arena},
                             {"failed_allocs", r.failed},
                             {"allocations", r.allocations},
                             {"peak_bytes", peak},
                             {"capacity_bytes", capacity},
                             {"compactions", r.stats.compactions},
                             {"bytes_moved", r.stats.bytes_moved},
                             {"compaction_copies", r.stats.copies},
                             {"seconds_compacting", r.stats.seconds_compacting},
                             {"seconds", r.seconds},
                             {"layers", s.layers},
                             {"hidden", s.hidden},
                             {"steps", s.steps},
                             {"seed", s.seed}};
      std::cout << j.dump() << "\n";
    }
    const auto bandwidth_line = [](const char* workload, const bandwidth_comparison& c) {
      std::cout << nlohmann::json{{"bench", "alloc"},
                                  {"measure", "compaction_bandwidth"},
                                  {"workload", workload},
                                  {"bytes", c.bytes_per_run},
                                  {"runs", c.runs},
                                  {"compaction_gib_per_s", c.compaction_gib_per_s},
                                  {"memcpy_1thread_gib_per_s", c.memcpy_gib_per_s},
                                  {"ratio", c.ratio()}}
                       .dump()
                << "\n";
    };
    bandwidth_line("synthetic", synthetic);
    if (traced) bandwidth_line("trace", *traced);
    std::cout
        << nlohmann::json{{"bench", "alloc"}, {"measure", "pool_acquire_release"}, {"ns_per_pair", pool_ns}}.dump()
        << "\n";
    return;
  }
  std::cout << "ZeRO-3-like trace: " << s.layers << " layers, hidden " << s.hidden << ", " << s.steps << " steps, seed "
            << s.seed << "; peak live " << format_bytes(peak) << ", arena " << format_bytes(capacity) << "\n";
  std::cout << std::left << std::setw(10) << "arena" << std::right << std::setw(8) << "allocs" << std::setw(8)
            << "failed" << std::setw(13) << "compactions" << std::setw(14) << "moved" << std::setw(14) << "compacting s"
            << "\n";
  for (const auto& r : results) {
    std::cout << std::left << std::setw(10) << r.arena << std::right << std::setw(8) << r.allocations << std::setw(8)
              << r.failed << std::setw(13) << r.stats.compactions << std::setw(14) << format_bytes(r.stats.bytes_moved)
              << std::setw(14) << std::fixed << std::setprecision(3) << r.stats.seconds_compacting << "\n";
  }
  std::vector<std::pair<const char*, bandwidth_comparison>> comparisons{{"synthetic", synthetic}};
  if (traced) comparisons.emplace_back("trace", *traced);
  for (const auto& [workload, c] : comparisons) {
    std::cout << std::setprecision(2) << "compaction (" << workload << ", median of " << c.runs << ") "
              << c.compaction_gib_per_s << " GiB/s vs single-thread memcpy of " << format_bytes(c.bytes_per_run) << " "
              << c.memcpy_gib_per_s << " GiB/s (ratio " << c.ratio() << ", target >= 0.7)\n";
  }
  std::cout << std::setprecision(1) << "pool acquire+release " << pool_ns << " ns (target < 1000)\n";
}

}  // namespace

void add_alloc_command(CLI::App& app) {
  auto settings = std::make_shared<alloc_settings>();
  CLI::App* cmd =
      app.add_subcommand("alloc", "defragmenting arena on a ZeRO-3-like trace, compaction bandwidth, pool cost");
  cmd->add_option("--layers", settings->layers, "Transformer layers in the trace")->capture_default_str();
  cmd->add_option("--hidden", settings->hidden, "Hidden size h")->capture_default_str();
  cmd->add_option("--steps", settings->steps, "Training steps replayed")->capture_default_str();
  cmd->add_option("--seed", settings->seed, "Seed of the trace")->capture_default_str();
  cmd->add_option("--headroom", settings->headroom, "Arena size as a multiple of the peak live bytes")
      ->capture_default_str();
  cmd->add_option("--compaction-size", settings->compaction_size_text, "Arena size of the compaction bandwidth test")
      ->capture_default_str();
  cmd->add_option("--pool-iterations", settings->pool_iterations, "Acquire/release pairs per timing")
      ->capture_default_str();
  cmd->add_flag("--json", settings->json, "One JSON object per line");
  cmd->callback([settings] { run_alloc(*settings); });
}

}  // namespace zoe::bench
