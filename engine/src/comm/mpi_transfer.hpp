#pragma once
// The point-to-point engine under every mpi collective: a set of sends to and receives from peers
// of one group under one tag, posted at once (MPI_Isend / MPI_Irecv) and polled to completion with
// back-off, never a hot spin. It fails with a comm_error naming the peers whose part did not arrive
// by the group's timeout, or at once when another rank announced its failure. It measures the bytes
// it hands MPI (each MPI_Isend's count, split by the destination's node): the mpi backend's byte
// counters are these measurements, not a formula.

#include <mpi.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine::detail {

/// What the engine needs to know of the group it runs in.
struct mpi_group_view {
  MPI_Comm comm = MPI_COMM_NULL;
  std::size_t rank = 0;                         ///< this rank in the group
  const std::vector<std::size_t>* world_ranks;  ///< world rank of each group rank
  std::size_t ranks_per_node = 1;               ///< world rank w lives on node w / ranks_per_node
  std::chrono::milliseconds timeout{0};

  /// "rank 2 (world rank 6, node 3)". Throws only std::bad_alloc.
  [[nodiscard]] std::string describe_rank(std::size_t group_rank) const;
  /// "world rank 6 (node 3)", or the group rank's description when `world_rank` is in the group.
  [[nodiscard]] std::string describe_world_rank(std::size_t world_rank) const;
};

class mpi_exchange {
 public:
  /// `what` names the call in errors ("all_gather on mpi (world)").
  mpi_exchange(const mpi_group_view& group, int tag, std::string what) noexcept;

  /// Queues `bytes` from `data` for group rank `peer` (any size; zero bytes is a message too).
  void send(std::size_t peer, const void* data, std::uint64_t bytes);
  /// Queues the receipt of `bytes` from group rank `peer` into `data`.
  void receive(std::size_t peer, void* data, std::uint64_t bytes);
  /// Posts every queued message and waits until all are done. Throws comm_error naming the peers
  /// that sent (or took) nothing by the deadline, the rank whose failure notice arrived, or the
  /// MPI call that failed; the pending requests are cancelled or freed first. Afterwards the
  /// exchange is empty and may be reused.
  void run();
  /// The bytes this exchange handed MPI so far (every posted MPI_Isend's count, over every run(),
  /// a failed one included), split by whether the destination is on this rank's node. Never throws.
  [[nodiscard]] const traffic& handed() const noexcept { return handed_; }

 private:
  struct message {
    std::size_t peer;
    bool is_send;
    std::byte* data;
    std::uint64_t bytes;
    std::size_t pending = 0;  // pieces not yet complete
  };

  void post(std::vector<MPI_Request>& requests, std::vector<std::size_t>& owner);
  // Checks one finished request: its error, and for a receive that the peer sent the size expected.
  void check_completed(std::vector<MPI_Request>& requests, const std::vector<std::size_t>& owner, std::size_t request,
                       const MPI_Status& status, bool status_has_error);
  // Cancels or frees what is pending, tells the other ranks that group rank `culprit` failed (a
  // failure seen here; nullopt for one another rank announced) and throws comm_error "<what>: <why>".
  [[noreturn]] void fail_waiting(std::vector<MPI_Request>& requests, const std::vector<std::size_t>& owner,
                                 const std::string& why, std::optional<std::size_t> culprit);
  // The peers whose part is missing, and the culprit to announce: the one silent peer, else this rank.
  [[nodiscard]] std::pair<std::string, std::size_t> missing_peers() const;

  const mpi_group_view* group_;
  int tag_;
  std::string what_;
  std::vector<message> messages_;
  std::vector<std::uint64_t> piece_bytes_;  // bytes of each posted request
  traffic handed_;                          // bytes posted in sends, by the destination's node
};

}  // namespace zoe::engine::detail
