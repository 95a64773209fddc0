#pragma once
// The host backend: the communicator seam over the host program's collectives (host_collectives.hpp).

#include <memory>

#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine::detail {

/// A world over options.host (which must be set), with its node-local, cross-node and hpZ
/// sub-groups made through host_collectives::create_group on this (the calling) thread: the world
/// group, then each kind's groups, node by node, skipping kinds whose groups are the whole world,
/// single ranks, or those of a kind already made (the same on every rank). A world of one rank is
/// the single backend (the host is never called). Collective, as the host's create_group is.
/// Ranks per node: options.ranks_per_node (zoe.ranks_per_node) when nonzero, else the host's (0:
/// one node). usage_error for a host rank not below its world size; config_error naming
/// zoe.ranks_per_node (or the host's ranks_per_node) or zero_optimization.zero_hpz_partition_size
/// for a size that does not divide the world; what create_group throws, as a comm_error naming the
/// group (the groups made so far are destroyed).
///
/// Its collectives are checked and counted as the nccl backend's (bytes_to()'s rule), then handed
/// to the host one at a time per group in issue order: on the host device as host tasks on the
/// collective's stream, each waiting for the group's previous collective to finish (issue order,
/// not stream order, is the contract with the peers); on a CUDA device at once, on the issuing
/// thread, with the stream's cudaStream_t. A group of one rank copies locally. A host failure is a
/// zoe::error of the host's category naming the collective, the group and the world rank; the
/// group refuses its later collectives. options.timeout does not apply (the host times out its own
/// collectives). abort() refuses this rank's later collectives; the peers learn of it through the
/// host's timeout. The world waits for its queued collectives when destroyed, then destroys every
/// group it made.
[[nodiscard]] std::unique_ptr<communicator> make_host_communicator(device& dev, const comm_options& options);

}  // namespace zoe::engine::detail
