#include "zoe/engine/coordinator/parameter_path.hpp"

namespace zoe::engine {

parameter_path::parameter_path(std::vector<module_spec> modules, const engine_config& config, device& dev,
                               parameter_path_options options)
    : layout_(std::make_unique<model_layout>(std::move(modules), layout_options{})),
      placement_(std::make_unique<placement>(*layout_, config)),
      plan_(make_footprint_plan(*layout_, config, *placement_)),
      pinned_(std::make_unique<allocators::pinned_host_resource>(dev)) {
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
  coordinator_ = std::make_unique<coordinator>(
      *tiers_, *swapper_, *comm_, dev,
      coordinator_options{.arena_bytes = plan_.arena_bytes, .limits = prefetch_limits::from(config.zero)});
}

// Members go in reverse order: the coordinator's reads and write-backs finish before the swapper
// stops, and the swapper's before the homes and the store go.
parameter_path::~parameter_path() = default;

}  // namespace zoe::engine
