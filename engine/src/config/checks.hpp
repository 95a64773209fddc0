#pragma once
// The checks that span blocks, run once every block is read.

#include "config/block_reader.hpp"
#include "zoe/engine/config/config.hpp"

namespace zoe::engine::detail {

/// Refuses "auto" that only Hugging Face resolves and keys that contradict each other (throws
/// config_error naming them); warns about, and drops, what DeepSpeed ignores (offload_param below
/// stage 3); logs the one line naming the "auto" keys resolved to defaults.
void check_config(read_context& ctx, engine_config& config);

}  // namespace zoe::engine::detail
