// zoe-plan: reads a DeepSpeed configuration, lays out a model of --params elements, and prints the
// resolved configuration and the footprint plan with the verdict for this machine.
// Exit 0: the plan fits; 1: it does not (the shortfalls name the keys to change); 2: a config or
// usage error, or any other failure to make the plan.
#include <CLI/CLI.hpp>

#include <cmath>
#include <iostream>
#include <string>

#include "plan_model.hpp"
#include "plan_report.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/config/batch_sizes.hpp"
#include "zoe/engine/tiers/footprint_plan.hpp"
#include "zoe/engine/tiers/placement.hpp"

namespace {

constexpr const char* model_help =
    "The model: --layers equal layers (default 1), each one module of a weight and a bias; a layer of n = "
    "params/layers elements has a bias of floor(sqrt(n)) elements and a weight of the rest (the last layer also "
    "takes params % layers). They are bf16 when the config enables bf16, fp16 when it enables fp16, fp32 "
    "otherwise, and cut into --world-size shards (at zero_optimization.stage 0 not cut: every rank holds "
    "every state whole); the plan is one rank's.";

// A count such as 1000000 or 1e9 (DeepSpeed's files write sizes both ways); it must be integral.
// Decimal only: std::stod would also read hex ("0x10" as 16) and "inf".
std::uint64_t parse_count(const std::string& text, const std::string& flag) {
  std::size_t used = 0;
  double value = 0;
  try {
    const bool decimal = !text.empty() && text.find_first_not_of("0123456789.eE+-") == std::string::npos;
    value = decimal ? std::stod(text, &used) : 0;
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !std::isfinite(value) || value < 0 || value != std::floor(value) || value > 9.0e18) {
    throw zoe::usage_error(zoe::str(flag, " must be a whole number of elements, got '", text, "'"));
  }
  return static_cast<std::uint64_t>(value);
}

int run(const std::string& config_path, const std::string& params_text, const std::string& layers_text,
        const std::string& world_text, bool json) {
  using namespace zoe;
  const std::uint64_t params = parse_count(params_text, "--params");
  const std::uint64_t layers = parse_count(layers_text, "--layers");
  const std::uint64_t world = parse_count(world_text, "--world-size");
  plan::plan_report report{.loaded = engine::load_config_file(config_path),
                           .model = {},
                           .plan = {},
                           .machine = {},
                           .shortfalls = {},
                           .warnings = {}};
  const engine::engine_config& config = report.loaded.config;
  const kernels::dtype dtype = plan::working_dtype(config);
  const engine::layout_options options = engine::stage_layout(config, static_cast<std::size_t>(world));
  const engine::model_layout layout = plan::layered_model(params, layers, options, dtype);
  report.model = plan::describe_model(params, layers, options, dtype);
  // As the engine does, once the world size has passed the layout's checks.
  engine::resolve_batch_sizes(report.loaded.config, static_cast<std::size_t>(world));
  const engine::placement where(layout, config);
  report.plan = engine::make_footprint_plan(layout, config, where);
  report.machine = engine::measure_machine(config);
  report.shortfalls = engine::plan_shortfalls(report.plan, report.machine);
  report.warnings = plan::missing_path_warnings(report.plan, report.machine);
  for (const auto& w : report.warnings) std::cerr << "zoe-plan: warning: " << w << "\n";
  if (json) {
    std::cout << plan::render_json(report).dump() << "\n";
  } else {
    std::cout << plan::render_text(report);
  }
  return report.shortfalls.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "zoe-plan: the memory a DeepSpeed ZeRO-3 configuration needs for a model of a given size "
      "(device, pinned and pageable host, NVMe), checked against this machine before anything is "
      "allocated.\nExit 0 when the plan fits, 1 when it does not (naming the keys to change), 2 for a "
      "config or usage error.\n" +
      std::string(model_help)};
  std::string config_path;
  std::string params = "0";
  std::string layers = "1";
  std::string world = "1";
  bool json = false;
  app.add_option("--config", config_path, "DeepSpeed JSON configuration file")->required();
  app.add_option("--params", params, "parameters (elements) of the whole model, e.g. 7e9")->required();
  app.add_option("--layers", layers, "equal layers the parameters are cut into")->capture_default_str();
  app.add_option("--world-size", world, "ranks the parameters are sharded over")->capture_default_str();
  app.add_flag("--json", json, R"(one JSON object {"config": ..., "plan": ..., "warnings": [...]} on stdout)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  try {
    return run(config_path, params, layers, world, json);
  } catch (const zoe::error& e) {
    std::cerr << "zoe-plan: " << zoe::category_name(e.category()) << " error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "zoe-plan: " << e.what() << "\n";
    return 2;
  }
}
