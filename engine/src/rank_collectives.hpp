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
#include "zoe/engine/optim/gradient_path.hpp"

namespace zoe::engine::detail {

/// The summary of the whole gradient from each rank's summary of its shards: the ranks' sums of
/// squares added in rank order from 0.0 and their overflow flags or-ed, so every rank gets the same
/// bits. Throws what the communicator throws (a comm_error naming a rank that failed or vanished).
[[nodiscard]] gradient_summary global_summary(communicator& world, device& dev, const gradient_summary& local);

/// Every rank's `shard` (the same size on each) concatenated in rank order. Borrows size() * shard
/// bytes of device memory while it runs (memory_error when the device refuses).
[[nodiscard]] std::vector<std::byte> gather_shards(communicator& world, device& dev, std::span<const std::byte> shard);

}  // namespace zoe::engine::detail
