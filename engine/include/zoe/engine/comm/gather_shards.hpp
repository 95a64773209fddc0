#pragma once
// Host bytes gathered from every rank through device memory (a communicator moves device buffers
// only): the engine's read of a parameter's full state and the C API's host-side sums share it.

#include <cstddef>
#include <span>
#include <vector>

#include "zoe/core/device.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine {

/// Every rank's `shard` (the same size on each) concatenated in rank order. Collective on `world`:
/// every rank calls it, in the same order. Runs on a stream of its own and waits for it. Borrows
/// size() * shard bytes of device memory while it runs (memory_error when the device refuses); at
/// world size 1 a copy of `shard` that touches no device memory. Throws what the communicator
/// throws (a comm_error naming a rank that failed or vanished).
[[nodiscard]] std::vector<std::byte> gather_shards(communicator& world, device& dev, std::span<const std::byte> shard);

}  // namespace zoe::engine
