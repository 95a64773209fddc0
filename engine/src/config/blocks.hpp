#pragma once
// The tables of keys: one block_spec per JSON object of the configuration, bound to the part of
// engine_config it fills. DeepSpeed's blocks are in deepspeed_blocks.cpp, zoe's in zoe_block.cpp.

#include "config/block_reader.hpp"
#include "zoe/engine/config/config.hpp"

namespace zoe::engine::detail {

/// The whole document: DeepSpeed's top-level keys and "zoe".
[[nodiscard]] block_spec top_level_block(engine_config& config);

/// The "zoe" block.
[[nodiscard]] block_spec zoe_block(zoe_settings& zoe);

/// A nested field for an object that always exists in the config (aio, fp16, "zoe", ...): an
/// absent key lists the target's defaults.
template <typename T>
[[nodiscard]] field block_field(std::string_view name, T& target, block_spec (*spec)(T&)) {
  return field{name, {}, {}, [&target, spec](read_context& ctx, const json* node, const std::string& key) {
                 read_block(ctx, node != nullptr ? *node : json::object(), key, spec(target));
               }};
}

}  // namespace zoe::engine::detail
