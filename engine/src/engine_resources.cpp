#include "zoe/engine/engine_resources.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>

#include "zoe/core/check.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/comm/launcher.hpp"
#include "zoe/engine/config/batch_sizes.hpp"

namespace zoe::engine {
namespace {

// The config key a swap path came from (swap_paths() takes them in this order, each once).
std::string key_of(const engine_config& config, const std::filesystem::path& path) {
  if (config.zero.offload_param && config.zero.offload_param->nvme_path == path) {
    return "zero_optimization.offload_param.nvme_path";
  }
  if (config.zero.offload_optimizer && config.zero.offload_optimizer->nvme_path == path) {
    return "zero_optimization.offload_optimizer.nvme_path";
  }
  return "zoe.swap.extra_paths";
}

// The plan, refused before anything is allocated when this machine (with `dev`'s budget) cannot
// hold it or a swap path it needs is missing. zoe-plan only warns about a missing path (it may be
// mounted later); an engine that starts needs it now.
footprint_plan checked_plan(const model_layout& layout, const engine_config& config, const placement& where,
                            const device& dev) {
  footprint_plan plan = make_footprint_plan(layout, config, where);
  for (const std::filesystem::path& path : plan.swap_paths) {
    std::error_code ec;
    ZOE_CHECK(std::filesystem::is_directory(path, ec), config_error, key_of(config, path), " '", path.string(),
              "' is not an existing folder; create it or point the key at one");
  }
  check_plan_fits(plan, measure_machine(config, dev));
  return plan;
}

allocators::pinned_options bounded_by(const footprint_plan& plan) {
  allocators::pinned_options out;
  out.limit_bytes = plan.pinned_bytes;
  return out;
}

// Stages 0-2 replicate the 16-bit parameters (DeepSpeed's stage_1_and_2.py keeps the whole model
// on every rank and all-gathers the owners' updated partitions after the step). zoe reuses stage
// 3's machinery for that: the shards stay partitioned like the optimizer states, and every
// parameter is persistent, so the coordinator gathers it once after each step (drop_gathered) and
// keeps it on the device until the next; the plan (persistent_parameters) sizes the arena for all
// of it. Stage 1's gradients differ from stage 2's only in the gradient path (local_accumulation.hpp).
// Stage 0 lays out one shard that every rank holds whole (stage_layout), so its "gather" is this
// rank's own copy: the coordinator runs on a world of this rank alone (gather_world). The batch
// sizes are DeepSpeed's arithmetic over the world size (batch_sizes.hpp).
engine_config as_run(const engine_config& config, std::size_t world_size) {
  engine_config out = config;
  resolve_batch_sizes(out, world_size);
  if (out.zero.stage < 3) {
    out.zero.param_persistence_threshold = std::numeric_limits<std::uint64_t>::max();
    out.zero.model_persistence_threshold = std::numeric_limits<std::uint64_t>::max();
  }
  return out;
}

// The world size the worlds will have, where it is known before they exist: the given world's, or
// the launcher's unless the backend is single. A stage that cannot run on it is refused here, as
// every rank decides alike: a throw once the worlds exist unwinds past them, which tells the
// peers this rank failed.
void check_stage_before_worlds(const engine_config& config, const engine_resources_options& o) {
  std::optional<std::size_t> world;
  if (o.comm != nullptr) {
    world = o.comm->size();
  } else if (config.zoe.comm.backend != "single") {
    const std::optional<launcher_ranks> launch = launcher_environment();
    if (!launch) {
      world = 1;
    } else if (launch->size) {
      world = *launch->size;
    }  // else a size told through MPI only: make_footprint_plan checks it
  }
  if (world) check_stage_fits_world(config, *world);
}

engine_resources::worlds make_worlds(const engine_config& config, device& dev, const engine_resources_options& o) {
  check_stage_before_worlds(config, o);
  engine_resources::worlds w;
  ZOE_EXPECTS((o.comm == nullptr) == (o.gradient_comm == nullptr),
              "engine_resources_options: give both communicators (comm and gradient_comm) or neither");
  if (o.comm != nullptr) {
    ZOE_EXPECTS(o.comm != o.gradient_comm && o.comm->size() == o.gradient_comm->size() &&
                    o.comm->rank() == o.gradient_comm->rank(),
                "engine_resources_options: comm and gradient_comm must be two distinct worlds of the same ranks");
    w.comm = o.comm;
    w.gradient_comm = o.gradient_comm;
    return w;
  }
  // Two worlds, in this order on every rank (make_communicator is collective): the coordinator's
  // gathers and the gradient path's reductions run on different threads with timing of their own,
  // so they must not share one order of collectives.
  const comm_options options = comm_options_of(config);
  w.owned_comm = make_communicator(dev, options);
  w.owned_gradient_comm = make_communicator(dev, options);
  w.comm = w.owned_comm.get();
  w.gradient_comm = w.owned_gradient_comm.get();
  return w;
}

}  // namespace

comm_options comm_options_of(const engine_config& config) {
  comm_options o;
  o.backend = config.zoe.comm.backend;
  o.ranks_per_node = static_cast<std::size_t>(config.zoe.ranks_per_node);
  o.hpz_partition_size = static_cast<std::size_t>(config.zero.zero_hpz_partition_size);
  // The config bounds timeout_s to a week, so the milliseconds fit; at least 1 ms.
  o.timeout = std::chrono::milliseconds(std::max<std::int64_t>(1, std::llround(config.zoe.comm.timeout_s * 1000.0)));
  return o;
}

engine_resources::engine_resources(std::vector<module_spec> modules, const engine_config& config, device& dev,
                                   engine_resources_options options)
    : worlds_(make_worlds(config, dev, options)),
      comm_(worlds_.comm),
      gradient_comm_(worlds_.gradient_comm),
      config_(as_run(config, comm_->size())),
      layout_(std::make_unique<model_layout>(std::move(modules), stage_layout(config_, comm_->size()))),
      // Every rank holds whole states: nothing to gather from the others.
      replica_world_(layout_->options().replicas > 1 ? make_single_communicator(dev) : nullptr),
      placement_(std::make_unique<placement>(*layout_, config_)),
      plan_(checked_plan(*layout_, config_, *placement_, dev)),
      // The plan's pinned bytes are a hard limit, not only a figure to compare the peak with.
      pinned_(std::make_unique<allocators::pinned_host_resource>(dev, bounded_by(plan_))) {
  if (options.arena_bytes) plan_.arena_bytes = *options.arena_bytes;
  if (!plan_.swap_paths.empty()) {
    io::swap_store_options so;
    so.paths = plan_.swap_paths;
    so.capacity = plan_.nvme_bytes;
    so.engine = config_.zoe.io_engine;
    so.io.block_size = plan_.swap_block_size;
    so.io.queue_depth = config_.aio.queue_depth;
    so.io.intra_op_parallelism = config_.aio.intra_op_parallelism;
    so.io.single_submit = config_.aio.single_submit;
    so.io.overlap_events = config_.aio.overlap_events;
    so.checksums = config_.zoe.checksums;
    so.wrap_backend = std::move(options.wrap_backend);
    // Every rank shares the path; its own folder says whose it is.
    so.folder_label = str("rank-", comm_->rank());
    store_ = std::make_unique<io::swap_store>(std::move(so));
  }
  tiers_ = std::make_unique<tier_manager>(*layout_, *placement_, plan_, tier_resources{dev, *pinned_, store_.get()});
  // The rank's one mover: every NVMe byte of the engine goes through its thread, channel and pools,
  // which are the plan's items that name a pool (zoe-plan lists them), and nothing else.
  mover_options mo;
  for (const plan_item& item : plan_.items) {
    if (!item.pool || !store_) continue;
    mo.pools.push_back({.key = item.pool->key,
                        .slot_bytes = static_cast<std::size_t>(item.pool->slot_bytes),
                        .slot_count = static_cast<std::size_t>(item.pool->slot_count)});
  }
  mover_ = std::make_unique<mover>(store_.get(), pinned_.get(), &dev, std::move(mo));
  swapper_ = std::make_unique<parameter_swapper>(*tiers_, dev, mover_.get());
  communicator& gather_world = replica_world_ ? *replica_world_ : *comm_;
  coordinator_ =
      std::make_unique<coordinator>(*tiers_, *swapper_, gather_world, dev, coordinator_options_of(config_, plan_));
}

// Members go in reverse order: the coordinator's reads and gathers finish before the swapper
// stops, and the swapper's before the homes and the store go.
engine_resources::~engine_resources() = default;

}  // namespace zoe::engine
