#pragma once
// What zoe-plan reports: the resolved configuration, the model, the footprint plan item by item,
// what this machine offers, the shortfalls naming the keys to change, and the warnings; as text
// for a reader or as one JSON object.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zoe/engine/config/parse.hpp"
#include "zoe/engine/tiers/footprint_plan.hpp"

namespace zoe::plan {

struct plan_report {
  engine::loaded_config loaded;
  std::string model;  ///< describe_model()
  engine::footprint_plan plan;
  engine::machine_limits machine;
  std::vector<std::string> shortfalls;  ///< plan_shortfalls(); empty when the plan fits
  std::vector<std::string> warnings;    ///< zoe-plan's own (missing swap paths), after the config's
};

/// One warning per swap path the plan uses that does not exist here (free space unknown).
/// Never throws beyond allocation.
[[nodiscard]] std::vector<std::string> missing_path_warnings(const engine::footprint_plan& plan,
                                                             const engine::machine_limits& machine);

/// The report for a reader: "key = value (source)" lines, the model, the plan by memory with
/// each item's bytes and keys, the machine, and the verdict. Never throws beyond allocation.
[[nodiscard]] std::string render_text(const plan_report& report);

/// {"config": DeepSpeed's nesting with every key, "plan": {...totals, items, machine, fits,
/// shortfalls}, "warnings": [the config's, then zoe-plan's]}. Never throws beyond allocation.
[[nodiscard]] nlohmann::json render_json(const plan_report& report);

}  // namespace zoe::plan
