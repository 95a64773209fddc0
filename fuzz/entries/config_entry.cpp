// run_config: parse and validate, render and parse again, plan the footprint.

#include <limits>
#include <string>

#include "config_entry.hpp"
#include "fuzz_input.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/config/parse.hpp"
#include "zoe/engine/model/layout.hpp"
#include "zoe/engine/tiers/footprint_plan.hpp"
#include "zoe/engine/tiers/placement.hpp"

namespace zoe::fuzz {
namespace {

using namespace zoe::engine;

/// Two modules of mixed dtypes and sizes (one parameter larger than a granule, one a scalar), so
/// the plan meets padding, several sub-groups and every working type.
std::vector<module_spec> small_model() {
  return {{"embed", {{"table", {300, 40}, kernels::dtype::fp16}, {"scale", {}, kernels::dtype::fp32}}},
          {"head", {{"weight", {17, 3}, kernels::dtype::bf16}, {"bias", {17}, kernels::dtype::fp16}}}};
}

/// A machine with room for the plans a small model makes, so the check itself runs (and its
/// shortfall lines, for configurations that ask for more). Every swap path is on one filesystem.
machine_limits fixed_machine(const footprint_plan& plan) {
  machine_limits m{.device_budget = std::uint64_t{1} << 30,
                   .memlock_limit = std::numeric_limits<std::uint64_t>::max(),
                   .host_available = std::uint64_t{8} << 30,
                   .disk_free = {}};
  for (const auto& path : plan.swap_paths) {
    m.disk_free.push_back({.path = path, .free = std::uint64_t{1} << 40, .filesystem = 1});
  }
  return m;
}

void plan_on(const engine_config& config, std::size_t world_size) {
  const model_layout layout(small_model(), {.world_size = world_size});
  const placement where(layout, config);
  const footprint_plan plan = make_footprint_plan(layout, config, where);
  std::uint64_t listed[memory_kind_count] = {};
  for (const plan_item& item : plan.items) {
    const auto m = static_cast<std::size_t>(item.memory);
    if (listed[m] + item.bytes < listed[m]) throw invariant_failure(str("plan item '", item.what, "' overflows"));
    listed[m] += item.bytes;
  }
  if (listed[0] != plan.device_bytes || listed[1] != plan.pinned_bytes || listed[2] != plan.pageable_bytes) {
    throw invariant_failure(str("the plan's items do not sum to its totals on ", world_size, " ranks"));
  }
  (void)plan_shortfalls(plan, fixed_machine(plan));
}

}  // namespace

outcome run_config(std::span<const std::uint8_t> bytes) {
  loaded_config loaded;
  try {
    loaded = parse_config(as_text(bytes));
  } catch (const error&) {
    return outcome::refused;
  }
  // What zoe renders from a configuration it accepted is a configuration it accepts, and means
  // the same: reading it back gives the same rendering.
  const std::string rendered = render_config_json(loaded, -1);
  loaded_config again;
  try {
    again = parse_config(rendered, "<rendered>");
  } catch (const error& e) {
    throw invariant_failure(str("the rendering of an accepted configuration is refused: ", e.what(), "\n", rendered));
  }
  if (render_config_json(again, -1) != rendered) {
    throw invariant_failure(
        str("reading the rendering back changes it:\n", rendered, "\n", render_config_json(again, -1)));
  }
  (void)render_config_lines(loaded);
  try {
    for (const std::size_t world_size : {std::size_t{1}, std::size_t{2}, std::size_t{4}})
      plan_on(loaded.config, world_size);
  } catch (const error&) {
    return outcome::refused;
  }
  return outcome::accepted;
}

}  // namespace zoe::fuzz
