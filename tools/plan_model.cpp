#include "plan_model.hpp"

#include <cmath>
#include <vector>

#include "zoe/core/check.hpp"
#include "zoe/core/str.hpp"

namespace zoe::plan {

kernels::dtype working_dtype(const engine::engine_config& config) noexcept {
  if (config.bf16.enabled) return kernels::dtype::bf16;
  if (config.fp16.enabled) return kernels::dtype::fp16;
  return kernels::dtype::fp32;
}

engine::model_layout layered_model(std::uint64_t params, std::uint64_t layers, const engine::layout_options& options,
                                   kernels::dtype dtype) {
  const std::uint64_t world_size = options.world_size * options.replicas;
  ZOE_EXPECTS(layers > 0, "--layers must be at least 1");
  ZOE_EXPECTS(world_size > 0, "--world-size must be at least 1");
  ZOE_EXPECTS(params / 2 >= layers, "--params ", params, " is too few for --layers ", layers,
              ": each layer needs a weight and a bias (2 elements at least)");
  const std::uint64_t per_layer = params / layers;
  // The bias is the side of a square weight of per_layer elements, as in a layer of width h:
  // an h x h weight and h biases.
  const auto bias = std::max<std::uint64_t>(1, static_cast<std::uint64_t>(std::sqrt(static_cast<double>(per_layer))));
  std::vector<engine::module_spec> modules;
  modules.reserve(layers);
  for (std::uint64_t i = 0; i < layers; ++i) {
    const std::uint64_t n = per_layer + (i + 1 == layers ? params % layers : 0);
    modules.push_back({.name = str("layer", i),
                       .parameters = {{.name = str("layer", i, ".weight"), .shape = {n - bias}, .dtype = dtype},
                                      {.name = str("layer", i, ".bias"), .shape = {bias}, .dtype = dtype}}});
  }
  try {
    return engine::model_layout(std::move(modules), options);
  } catch (const usage_error& e) {
    // The layout names its parameter; the user wrote flags (the padded shards of a huge
    // --world-size, or of a huge --params, overflow 64 bits).
    throw usage_error(str("--params ", params, " --layers ", layers, " --world-size ", world_size,
                          " cannot be laid out: ", e.what()));
  }
}

std::string describe_model(std::uint64_t params, std::uint64_t layers, const engine::layout_options& options,
                           kernels::dtype dtype) {
  return str(params, " parameters in ", layers, " layers of ", kernels::dtype_name(dtype),
             " (a weight and a bias each), world size ", options.world_size * options.replicas,
             options.replicas > 1 ? ", every rank holding every state whole (stage 0: a full replica each)" : "");
}

}  // namespace zoe::plan
