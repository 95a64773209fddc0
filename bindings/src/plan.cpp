// zoe_footprint_plan: the engine's footprint plan (engine/tiers/footprint_plan.hpp) for a
// configuration and a model before any engine exists, so that a program can size its device budget
// by what zoe will ask for instead of by a copy of the plan's arithmetic.
#include <cstdint>

#include "engine_inputs.hpp"
#include "objects.hpp"
#include "status.hpp"
#include "zoe/core/error.hpp"
#include "zoe/engine/config/batch_sizes.hpp"
#include "zoe/engine/model/layout.hpp"
#include "zoe/engine/tiers/footprint_plan.hpp"
#include "zoe/engine/tiers/placement.hpp"

using zoe::bindings::guarded;
using zoe::bindings::live;

extern "C" {

zoe_status zoe_footprint_plan(const zoe_engine_desc* desc, uint32_t world_size, zoe_footprint* footprint) {
  return guarded("zoe_footprint_plan", [&] {
    const zoe_engine_desc& d =
        zoe::bindings::expect_struct(desc, ZOE_FIELDS_END(zoe_engine_desc, device), "zoe_engine_desc");
    zoe::bindings::expect_struct(footprint, ZOE_FIELDS_END(zoe_footprint, activation_prefetch_bytes), "zoe_footprint");
    const zoe_model& model = live(d.model, "zoe_engine_desc.model");
    if (world_size == 0) throw zoe::usage_error("world_size is 0: give the number of ranks (1 without a launcher)");
    zoe::engine::engine_config config = zoe::bindings::load_config(d).config;
    zoe::engine::resolve_batch_sizes(config, world_size);
    // Laid out, placed and planned as the engine does it (engine_resources), with the world size the
    // engine would learn from its communicator.
    const zoe::engine::model_layout layout(zoe::bindings::module_specs(model),
                                           zoe::engine::stage_layout(config, world_size));
    const zoe::engine::placement where(layout, config);
    const zoe::engine::footprint_plan plan = zoe::engine::make_footprint_plan(layout, config, where);
    footprint->device_bytes = plan.device_bytes;
    footprint->pinned_bytes = plan.pinned_bytes;
    footprint->host_bytes = plan.pageable_bytes;
    footprint->disk_bytes = plan.nvme_bytes;
    footprint->activation_host_bytes = plan.activation_host_bytes;
    footprint->activation_nvme_bytes = plan.activation_nvme_bytes;
    footprint->activation_prefetch_bytes = plan.activation_prefetch_bytes;
  });
}

}  // extern "C"
