#include "zoe/engine/coordinator/parameter_path.hpp"

#include <filesystem>
#include <string>

#include "zoe/core/check.hpp"
#include "zoe/core/str.hpp"

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

}  // namespace

parameter_path::parameter_path(std::vector<module_spec> modules, const engine_config& config, device& dev,
                               parameter_path_options options)
    : layout_(std::make_unique<model_layout>(std::move(modules), layout_options{})),
      placement_(std::make_unique<placement>(*layout_, config)),
      plan_(checked_plan(*layout_, config, *placement_, dev)),
      // The plan's pinned bytes are a hard limit, not only a figure to compare the peak with.
      pinned_(std::make_unique<allocators::pinned_host_resource>(dev, bounded_by(plan_))) {
  if (options.arena_bytes) plan_.arena_bytes = *options.arena_bytes;
  if (!plan_.swap_paths.empty()) {
    io::swap_store_options so;
    so.paths = plan_.swap_paths;
    so.capacity = plan_.nvme_bytes;
    so.engine = config.zoe.io_engine;
    so.io.block_size = plan_.swap_block_size;
    so.io.queue_depth = config.aio.queue_depth;
    so.io.intra_op_parallelism = config.aio.intra_op_parallelism;
    so.io.single_submit = config.aio.single_submit;
    so.io.overlap_events = config.aio.overlap_events;
    so.checksums = config.zoe.checksums;
    so.wrap_backend = std::move(options.wrap_backend);
    store_ = std::make_unique<io::swap_store>(std::move(so));
  }
  tiers_ = std::make_unique<tier_manager>(*layout_, *placement_, plan_, tier_resources{dev, *pinned_, store_.get()});
  swapper_ = std::make_unique<parameter_swapper>(
      *tiers_, dev, *pinned_, store_.get(),
      parameter_swapper_options{.buffer_count = plan_.param_buffer_count, .buffer_bytes = plan_.param_buffer_bytes});
  comm_ = make_single_communicator(dev);
  coordinator_ = std::make_unique<coordinator>(*tiers_, *swapper_, *comm_, dev, coordinator_options_of(config, plan_));
}

// Members go in reverse order: the coordinator's reads and write-backs finish before the swapper
// stops, and the swapper's before the homes and the store go.
parameter_path::~parameter_path() = default;

}  // namespace zoe::engine
