#pragma once
// What the tiers suites share: small layouts from element counts, and configs that offload.

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "zoe/engine/config/config.hpp"
#include "zoe/engine/model/layout.hpp"

namespace zoe::testing {

/// One module per entry, each holding parameters of the given element counts ("m<i>.p<j>"), all
/// of type `dtype`, laid out for `world_size` ranks.
[[nodiscard]] engine::model_layout layout_of(const std::vector<std::vector<std::uint64_t>>& modules,
                                             kernels::dtype dtype = kernels::dtype::fp16, std::size_t world_size = 1);
/// The same, laid out as `options` says (stage 0's replicas: engine::stage_layout).
[[nodiscard]] engine::model_layout layout_of(const std::vector<std::vector<std::uint64_t>>& modules,
                                             kernels::dtype dtype, const engine::layout_options& options);

/// Stage 3 with offload_param on `param` and offload_optimizer on `optimizer` (nvme paths set to
/// `nvme_path` where nvme is asked for), pin_memory `pinned` in both blocks.
[[nodiscard]] engine::engine_config offload_config(engine::offload_device param, engine::offload_device optimizer,
                                                   const std::filesystem::path& nvme_path = "/nonexistent/zoe",
                                                   bool pinned = true);

/// Every state of the config placed by zoe.placement entirely on `t` ("device", "host", "nvme").
void place_all(engine::engine_config& config, const std::string& t);

}  // namespace zoe::testing
