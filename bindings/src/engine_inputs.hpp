#pragma once
// What an engine is made from, read from a zoe_engine_desc: shared by zoe_engine_create, which
// builds the engine, and zoe_footprint_plan, which plans the same engine without building it, so
// both read the configuration and the model alike.

#include <vector>

#include "objects.hpp"
#include "zoe/engine/config/parse.hpp"
#include "zoe/zoe.h"

namespace zoe::bindings {

/// The configuration of `d`: config_json or the file at config_path (exactly one: usage_error
/// otherwise), with config_overrides merged over it where the caller's struct has that field.
/// Throws config_error naming the key or the file; config warnings go to zoe's log.
[[nodiscard]] engine::loaded_config load_config(const zoe_engine_desc& d);

/// The engine's modules in order, each with its parameters in the order they were added. Never
/// throws beyond allocation.
[[nodiscard]] std::vector<engine::module_spec> module_specs(const zoe_model& model);

}  // namespace zoe::bindings
