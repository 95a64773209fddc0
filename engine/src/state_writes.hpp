#pragma once
// Writing several states of one parameter so that they all take their new values or none does
// (offload_engine::write_state: a master and the working copy that follows it).

#include <cstddef>
#include <span>
#include <vector>

#include "zoe/engine/swap/state_io.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"

namespace zoe::engine::detail {

/// One state's new contents: state_bytes(p, state) bytes of this rank's shard.
struct state_write {
  state_kind state = state_kind::master;
  std::vector<std::byte> bytes;
};

/// Writes each of `writes` to its state of `p`, all or none: resident NVMe states go to their
/// shadow extents first (a failure there changes nothing), then the other homes are written, each
/// one's old contents kept until all are (a failure puts them back), then the shadows are
/// committed. A released state (no valid contents) is written in place. Throws what state_io
/// throws, with every state as it was (a failure to put an old value back is logged, and that
/// state is released and dirty).
void write_states_together(tier_manager& tiers, state_io& io, parameter_id p, std::span<const state_write> writes);

}  // namespace zoe::engine::detail
