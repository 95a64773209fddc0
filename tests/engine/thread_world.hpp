#pragma once
// A world of ranks that are threads of one process, for the tests of code written over the
// communicator seam (ZeRO++'s quantized collectives, checkpoints on many ranks) on 2, 3 or 4 ranks
// without mpirun, so they also run under the sanitizers. The subset of the seam modelled, on host
// memory (the host device's device memory): all_gather, all_to_all, an fp32 reduce_scatter (added
// in the mpi backend's pairwise tree over the ranks) and its coalesced form (one meeting for all
// parts), broadcast, point_to_point and barrier, over the world, its node-local and cross-node
// groups and an hpZ group of one rank, each counting the bytes it sends by bytes_to() (comm_stats).
// The rest throws usage_error.
//
// Each collective first synchronizes the caller's stream on the world's device when it has one (so
// the collective runs after the work queued before it; a world without a device needs callers that
// queue nothing before a collective, like the checkpoint's rank_link, which synchronizes itself),
// then meets the group's other ranks, copies from their buffers, and meets them again before anyone
// reuses a buffer. A rank that does not arrive within the timeout makes the others fail with
// comm_error naming it (world rank and node), so a test whose ranks disagree fails instead of hanging.

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "zoe/core/device.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace zoe::testing {

struct thread_world_options {
  /// Consecutive ranks to a node; 0: every rank on one node. Must divide the world size.
  std::size_t ranks_per_node = 0;
  /// How long a rank waits at a collective for the others before it fails naming the first absent one.
  std::chrono::milliseconds timeout{std::chrono::minutes(1)};
  /// The device whose streams the ranks pass to the collectives (synchronized before each one);
  /// nullptr: none is synchronized. Must outlive the world.
  device* dev = nullptr;
};

class thread_world {
 public:
  /// `size` ranks. usage_error when size is 0 or ranks_per_node does not divide it.
  explicit thread_world(std::size_t size, thread_world_options options = {});
  ~thread_world();
  thread_world(const thread_world&) = delete;
  thread_world& operator=(const thread_world&) = delete;

  /// Rank `rank`'s world communicator (owned by the world; one thread at a time drives it).
  [[nodiscard]] engine::communicator& rank(std::size_t rank);
  [[nodiscard]] std::size_t size() const noexcept;

  /// Runs body(r) on one thread per rank and waits for all; then rethrows the failure of the
  /// lowest rank that threw.
  void run(const std::function<void(std::size_t)>& body);

 private:
  std::vector<std::unique_ptr<engine::communicator>> ranks_;
};

}  // namespace zoe::testing
