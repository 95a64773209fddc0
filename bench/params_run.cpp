#include "params_run.hpp"

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <random>
#include <thread>

#include "io_pass.hpp"
#include "io_settings.hpp"
#include "support/counts.hpp"
#include "support/measure.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/engine_resources.hpp"
#include "zoe/io/swap_channel.hpp"

namespace zoe::bench {
namespace {

std::vector<engine::module_spec> make_model(const params_settings& s, kernels::dtype type) {
  const std::uint64_t count = s.layers * s.per_layer;
  std::vector<engine::module_spec> out;
  for (std::size_t l = 0; l < s.layers; ++l) {
    engine::module_spec m{str("layer", l), {}};
    for (std::size_t j = 0; j < s.per_layer; ++j) {
      const std::uint64_t k = l * s.per_layer + j;
      // Equal shares, the remainder spread over the first parameters.
      const std::uint64_t numel = s.params / count + (k < s.params % count ? 1 : 0);
      m.parameters.push_back({str("layer", l, ".w", j), {numel}, type});
    }
    out.push_back(std::move(m));
  }
  return out;
}

// Writes random bytes to every working shard's NVMe home once (initialization, as a checkpoint
// load would), through a channel of the store, and marks them written.
void fill_homes(engine::engine_resources& resources) {
  std::uint64_t largest = 0;
  for (const auto& p : resources.layout().parameters()) {
    largest = std::max(largest, resources.tiers().location(p.id, engine::working_state(p)).bytes);
  }
  ZOE_CHECK(resources.store() != nullptr, internal_error, "no parameter is on nvme");
  const host_buffer memory(largest);
  std::mt19937_64 rng(std::random_device{}());
  auto* words = reinterpret_cast<std::uint64_t*>(memory.span().data());
  io::swap_channel channel(*resources.store());
  for (const auto& p : resources.layout().parameters()) {
    const engine::state_kind state = engine::working_state(p);
    const engine::state_location& home = resources.tiers().location(p.id, state);
    ZOE_CHECK(home.where == engine::tier::nvme, internal_error, "parameter '", p.name, "' is not on nvme");
    for (std::size_t i = 0; i < home.bytes / sizeof(std::uint64_t); ++i) words[i] = rng();
    const io::swap_request write{io::io_op::write, home.extent, 0, memory.span().first(home.bytes), 0};
    channel.run({&write, 1});
    resources.tiers().mark_written(p.id, state);
  }
}

struct step_result {
  double seconds = 0;
  double waited = 0;  // seconds the compute waited on fetches: in fetch() and in the handle's wait
};

// One forward pass over the layers: fetch, wait, compute (sleep), release.
step_result run_step(engine::coordinator& coord, std::size_t layers, std::chrono::nanoseconds compute) {
  step_result r;
  const auto start = bench_clock::now();
  coord.begin_step();
  for (std::size_t l = 0; l < layers; ++l) {
    // fetch() itself waits when the arena is full (back-pressure): that is waiting on a fetch too.
    const auto before = bench_clock::now();
    const engine::fetch_handle h = coord.fetch(static_cast<engine::module_id>(l));
    h.wait();
    r.waited += seconds_since(before);
    if (compute.count() > 0) std::this_thread::sleep_for(compute);
    coord.release(static_cast<engine::module_id>(l));
  }
  coord.end_step();
  r.seconds = seconds_since(start);
  return r;
}

}  // namespace

void params_settings::check() {
  params = parse_count(params_text, "--params");
  ZOE_EXPECTS(layers > 0 && per_layer > 0, "--layers and --per-layer must be positive");
  ZOE_EXPECTS(params >= layers * per_layer, "--params ", params, " is fewer than one per parameter tensor (--layers ",
              layers, " x --per-layer ", per_layer, ")");
  ZOE_EXPECTS(!compute_ms || *compute_ms >= 0, "--compute-ms must not be negative");
  ZOE_EXPECTS(steps > 0, "--steps must be positive");
  check_bench_directory(path);
  config = {};
  config.zero.stage = 3;
  engine::offload_param_config op;
  op.device = engine::offload_device::nvme;
  op.nvme_path = path;
  if (buffer_count) op.buffer_count = *buffer_count;
  if (buffer_size) op.buffer_size = *buffer_size;
  op.max_in_cpu = 0;  // every working copy on nvme: that is what is measured
  config.zero.offload_param = op;
  if (block_text) config.aio.block_size = parse_bytes(*block_text, "--block-size");
  if (queue_depth) config.aio.queue_depth = *queue_depth;
  config.zoe.io_engine = engine;
  config.zoe.checksums = !no_checksums;
  check_engine_options(config.aio.block_size, config.aio.queue_depth, "--block-size / --queue-depth");
}

nlohmann::json run_params(const params_settings& s) {
  const kernels::dtype type = kernels::parse_dtype(s.dtype, "--dtype");
  device_selection selected = select_device();
  device& dev = *selected.dev;
  std::cerr << "zoe-bench params: device " << dev.name() << " (" << selected.reason << ")\n";

  engine::engine_resources resources(make_model(s, type), s.config, dev);
  const engine::footprint_plan& plan = resources.plan();
  std::uint64_t step_bytes = 0;
  for (const auto& p : resources.layout().parameters()) {
    step_bytes += resources.tiers().location(p.id, engine::working_state(p)).bytes;
  }
  std::cerr << "zoe-bench params: " << s.params << " parameters in " << s.layers << " layers, "
            << format_bytes(step_bytes) << " of " << s.dtype
            << " shards on nvme; plan: " << format_bytes(plan.pinned_bytes) << " pinned (" << plan.param_buffer_count
            << " swap buffers of " << format_bytes(plan.param_buffer_bytes) << "), " << format_bytes(plan.arena_bytes)
            << " arena\n";
  std::cerr << "zoe-bench params: writing " << format_bytes(step_bytes) << " of states once\n";
  fill_homes(resources);

  // The raw limit: the same bytes read through the I/O engine at the same aio settings, into
  // pinned huge-page buffers of the same kind as the swap buffers.
  const io::engine_options options{.block_size = static_cast<std::size_t>(s.config.aio.block_size),
                                   .queue_depth = static_cast<std::size_t>(s.config.aio.queue_depth)};
  const pass_layout layout{step_bytes, options.block_size, options.queue_depth, 1};
  const host_buffer memory(layout.buffer_bytes());
  const auto raw = make_raw_target(s.path, step_bytes, false, s.engine, options, 1);
  const std::span<std::byte> regions[] = {memory.span()};
  raw->register_buffers(regions);
  // Written in this run even when an earlier run left the file: the states were just written too,
  // and a drive (or a virtual disk's host cache) reads freshly written data faster than old data,
  // so reusing an old file would slow the raw side and flatter the ratio.
  std::cerr << "zoe-bench params: writing " << format_bytes(step_bytes) << " to " << raw->where()
            << " for the raw reads\n";
  const stamped_data fill(std::random_device{}());
  run_pass(*raw, layout, memory, io::io_op::write, &fill, {});
  const double first_raw = run_pass(*raw, layout, memory, io::io_op::read, nullptr, {});
  const double raw_layer_ms = first_raw * 1000 / static_cast<double>(s.layers);
  const double compute_ms = s.compute_ms.value_or(1.5 * raw_layer_ms);
  const auto compute = std::chrono::nanoseconds(static_cast<std::int64_t>(compute_ms * 1e6));
  std::cerr << "zoe-bench params: raw read of one layer " << std::fixed << std::setprecision(2) << raw_layer_ms
            << " ms; compute " << compute_ms << " ms per layer" << (s.compute_ms ? "" : " (1.5x the raw read)") << "\n";

  // The first step records the trace; the timed ones follow it, alternating with raw reads.
  (void)run_step(resources.coord(), s.layers, compute);
  std::vector<double> raw_rates;
  std::vector<double> swap_rates;
  std::vector<double> ratios;
  std::vector<double> wait_fractions;
  std::vector<double> step_seconds;
  for (int i = 1; i <= s.steps; ++i) {
    const double raw_seconds = run_pass(*raw, layout, memory, io::io_op::read, nullptr, {});
    const step_result step = run_step(resources.coord(), s.layers, compute);
    raw_rates.push_back(gib_per_s(step_bytes, raw_seconds));
    swap_rates.push_back(gib_per_s(step_bytes, step.seconds));
    ratios.push_back(swap_rates.back() / raw_rates.back());
    wait_fractions.push_back(step.waited / step.seconds);
    step_seconds.push_back(step.seconds);
    std::cerr << "zoe-bench params: step " << i << "/" << s.steps << ": raw " << std::setprecision(2)
              << raw_rates.back() << " GiB/s, swap-in " << swap_rates.back() << " GiB/s (" << step.seconds
              << " s), waited " << std::setprecision(3) << wait_fractions.back() << " of the step\n";
  }

  const engine::coordinator_stats cs = resources.coord().stats();
  const engine::parameter_swapper_stats ss = resources.swapper().stats();
  const device_usage du = dev.usage();
  return {{"bench", "params"},
          {"device", dev.name()},
          {"engine", resources.swapper().backend_name()},
          {"params", s.params},
          {"layers", s.layers},
          {"per_layer", s.per_layer},
          {"dtype", s.dtype},
          {"bytes_per_step", step_bytes},
          {"block_size", s.config.aio.block_size},
          {"queue_depth", s.config.aio.queue_depth},
          {"buffer_count", plan.param_buffer_count},
          {"buffer_bytes", plan.param_buffer_bytes},
          {"steps", s.steps},
          {"checksums", s.config.zoe.checksums},
          {"compute_ms", compute_ms},
          {"raw_layer_ms", raw_layer_ms},
          {"swap_in_gib_per_s", median(swap_rates)},
          {"io_gib_per_s", median(raw_rates)},
          {"swap_in_over_io", median(ratios)},
          {"wait_fraction", median(wait_fractions)},
          {"step_seconds", median(step_seconds)},
          {"peak_pinned_bytes", resources.pinned().peak_bytes_in_use()},
          {"planned_pinned_bytes", plan.pinned_bytes},
          {"peak_device_bytes", du.peak_bytes},
          {"planned_device_bytes", plan.device_bytes},
          {"device_budget_bytes", du.budget_bytes},
          {"arena_bytes", cs.arena.capacity},
          {"arena_peak_used_bytes", cs.arena.peak_used},
          {"arena_compactions", cs.arena.compactions},
          {"arena_bytes_moved", cs.arena.bytes_moved},
          {"arena_seconds_compacting", cs.arena.seconds_compacting},
          {"prefetches", cs.prefetches},
          {"demand_gathers", cs.gathers},
          {"prefetch_backoffs", cs.prefetch_backoffs},
          {"swap_buffer_waits", ss.buffer_waits},
          {"io_busy_seconds", ss.io_busy_seconds}};
}

void print_params(const params_settings& s, const nlohmann::json& r) {
  if (s.json) {
    std::cout << r.dump() << "\n";
    return;
  }
  std::cout << std::fixed << std::setprecision(2) << "params: " << r["params"].get<std::uint64_t>() << " parameters, "
            << r["layers"].get<std::size_t>() << " layers, " << format_bytes(r["bytes_per_step"].get<std::uint64_t>())
            << " per step, compute " << r["compute_ms"].get<double>() << " ms per layer\n"
            << "swap-in " << r["swap_in_gib_per_s"].get<double>() << " GiB/s, raw reads "
            << r["io_gib_per_s"].get<double>() << " GiB/s (ratio " << r["swap_in_over_io"].get<double>()
            << "), compute waited " << std::setprecision(3) << r["wait_fraction"].get<double>() << " of the time\n"
            << "pinned " << format_bytes(r["peak_pinned_bytes"].get<std::uint64_t>()) << " peak of "
            << format_bytes(r["planned_pinned_bytes"].get<std::uint64_t>()) << " planned; device "
            << format_bytes(r["peak_device_bytes"].get<std::uint64_t>()) << " peak of "
            << format_bytes(r["device_budget_bytes"].get<std::uint64_t>()) << " budget\n";
}

}  // namespace zoe::bench
