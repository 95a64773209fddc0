#pragma once
// A world of communicators in one process, one thread per rank, on the host device: enough of the
// communicator seam (all_gather, all_to_all, an fp32 reduce_scatter, barrier, the node-local and
// cross-node groups, an hpZ group of one rank, byte counting by bytes_to) to run code written over the seam on 2, 3 or
// 4 ranks without mpirun, under the sanitizers. Each collective synchronizes the caller's stream, meets the group's
// other ranks, and copies from their buffers; a rank that does not arrive within a minute makes the others throw
// timeout_error naming the group instead of hanging.
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "zoe/core/device.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace zoe::testing {

/// `ranks` world communicators, `ranks_per_node` consecutive ranks to a node, all on `dev` (the
/// host device: buffers are host memory). Communicator r belongs to the thread that plays rank r.
/// usage_error when ranks_per_node does not divide ranks. `dev` must outlive them.
[[nodiscard]] std::vector<std::unique_ptr<engine::communicator>> make_thread_world(device& dev, std::size_t ranks,
                                                                                   std::size_t ranks_per_node);

/// Runs `body` on one thread per rank of `world` and joins them; a throw on any thread is recorded
/// as a test failure naming the rank.
void run_ranks(const std::vector<std::unique_ptr<engine::communicator>>& world,
               const std::function<void(engine::communicator&)>& body);

}  // namespace zoe::testing
