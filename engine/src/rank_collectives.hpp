#pragma once
// The engine's collectives between steps, on the gradient world: the step's global gradient
// summary (so every rank takes the same clip and skip decision) and a parameter's full state
// gathered from every rank's shard (read_state). Each is collective: every rank calls it, in the
// same order, on the same world. At world size 1 each is the identity and touches no device memory.

#include <cstddef>
#include <span>
#include <vector>

#include "zoe/core/device.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/engine/comm/gather_shards.hpp"
#include "zoe/engine/optim/gradient_path.hpp"

namespace zoe::engine::detail {

/// The summary of the whole gradient from each rank's summary of its shards: the ranks' sums of
/// squares added in the pairwise tree over the ranks (zoe/engine/comm/pairwise_tree.hpp) and their
/// overflow flags or-ed, so every rank gets the same bits. Throws what the communicator throws (a
/// comm_error naming a rank that failed or vanished).
[[nodiscard]] gradient_summary global_summary(communicator& world, device& dev, const gradient_summary& local);

/// Every rank's `shard` concatenated in rank order (zoe/engine/comm/gather_shards.hpp).
using engine::gather_shards;

}  // namespace zoe::engine::detail
