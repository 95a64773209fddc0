#include "tiers_test_support.hpp"

#include "zoe/core/str.hpp"

namespace zoe::testing {

engine::model_layout layout_of(const std::vector<std::vector<std::uint64_t>>& modules, kernels::dtype dtype,
                               std::size_t world_size) {
  return layout_of(modules, dtype, engine::layout_options{.world_size = world_size});
}

engine::model_layout layout_of(const std::vector<std::vector<std::uint64_t>>& modules, kernels::dtype dtype,
                               const engine::layout_options& options) {
  std::vector<engine::module_spec> specs;
  for (std::size_t m = 0; m < modules.size(); ++m) {
    engine::module_spec spec{.name = str("m", m), .parameters = {}};
    for (std::size_t p = 0; p < modules[m].size(); ++p) {
      spec.parameters.push_back({.name = str("m", m, ".p", p), .shape = {modules[m][p]}, .dtype = dtype});
    }
    specs.push_back(std::move(spec));
  }
  return engine::model_layout(std::move(specs), options);
}

engine::engine_config offload_config(engine::offload_device param, engine::offload_device optimizer,
                                     const std::filesystem::path& nvme_path, bool pinned) {
  engine::engine_config config;
  config.zero.stage = 3;
  engine::offload_param_config p;
  p.device = param;
  p.pin_memory = pinned;
  if (param == engine::offload_device::nvme) p.nvme_path = nvme_path;
  config.zero.offload_param = p;
  engine::offload_optimizer_config o;
  o.device = optimizer;
  o.pin_memory = pinned;
  if (optimizer == engine::offload_device::nvme) o.nvme_path = nvme_path;
  config.zero.offload_optimizer = o;
  return config;
}

void place_all(engine::engine_config& config, const std::string& t) {
  const engine::tier_fractions f{
      .device = t == "device" ? 1.0 : 0.0, .host = t == "host" ? 1.0 : 0.0, .nvme = t == "nvme" ? 1.0 : 0.0};
  for (auto& state : config.zoe.placement) state = f;
}

}  // namespace zoe::testing
