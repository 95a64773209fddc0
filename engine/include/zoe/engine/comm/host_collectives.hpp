#pragma once
// Collectives the host program supplies (the C API's zoe_host_comm, which a Python program fills
// with torch.distributed's): the transport of the "host" communicator backend, chosen by
// make_communicator when comm_options::host is set. The engine knows nothing of the program
// behind it; the backend (engine/src/comm/host_communicator.cpp) does the checks, the counting,
// the ordering and the naming of failures, and hands this interface plain calls.
//
// Groups: for each world, the backend asks for the world group and then for every group of each
// sub-group kind it needs, on every rank, members or not, in the same order (a host whose group
// creation is collective over the whole world, as torch.distributed.new_group is, needs that).
// Calls: one at a time per group, in the order the backend issued them (the same on every rank).
// On the host device (native_stream null) a call runs on the worker thread of the stream the
// collective was queued on and finishes the collective before it returns; on a CUDA device it runs
// on the issuing thread, with native_stream the cudaStream_t the collective must be ordered on.
// Buffers, sizes and in-place forms are those of the communicator seam (communicator.hpp); `root`,
// `from` and `to` are ranks in the group. Every call throws a zoe::error with the host's message
// when the host fails it; the backend adds the collective, the group and the rank.

#include <cstddef>
#include <span>

#include "zoe/engine/comm/communicator.hpp"
#include "zoe/kernels/dtype.hpp"

namespace zoe::engine {

class host_collectives {
 public:
  /// The host's handle of one group (null is a valid handle).
  using group_handle = void*;

  host_collectives() = default;
  virtual ~host_collectives() = default;
  host_collectives(const host_collectives&) = delete;
  host_collectives& operator=(const host_collectives&) = delete;

  /// This process's world rank, the world's size and the ranks per node (0: one node). Never throw.
  [[nodiscard]] virtual std::size_t rank() const noexcept = 0;
  [[nodiscard]] virtual std::size_t world_size() const noexcept = 0;
  [[nodiscard]] virtual std::size_t ranks_per_node() const noexcept = 0;

  /// The group of `world_ranks` (ascending); on a rank outside it, any handle (passed back to
  /// destroy_group alone).
  [[nodiscard]] virtual group_handle create_group(std::span<const std::size_t> world_ranks) = 0;
  /// Ends a group create_group made (each once).
  virtual void destroy_group(group_handle group) = 0;

  virtual void all_gather(group_handle group, const void* send, void* recv, std::size_t bytes, void* native_stream) = 0;
  virtual void reduce_scatter(group_handle group, const void* send, void* recv, std::size_t count, kernels::dtype type,
                              reduce_op op, void* native_stream) = 0;
  virtual void all_reduce(group_handle group, const void* send, void* recv, std::size_t count, kernels::dtype type,
                          reduce_op op, void* native_stream) = 0;
  virtual void all_to_all(group_handle group, const void* send, void* recv, std::size_t bytes, void* native_stream) = 0;
  virtual void broadcast(group_handle group, void* buffer, std::size_t bytes, std::size_t root,
                         void* native_stream) = 0;
  /// Called on ranks `from` and `to` alone (from != to).
  virtual void point_to_point(group_handle group, void* buffer, std::size_t bytes, std::size_t from, std::size_t to,
                              void* native_stream) = 0;
  virtual void barrier(group_handle group) = 0;
};

}  // namespace zoe::engine
