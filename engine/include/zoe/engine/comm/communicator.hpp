#pragma once
// The communicator seam: collectives on device buffers over a group of ranks, in stream order on
// the device the communicator was made for, plus the node-local and cross-node sub-groups that
// hpZ and qgZ use. Backends: single (world size 1, here), mpi and nccl (later). Every backend counts
// the bytes it sends per group, so communication volume is measured, not estimated.
//
// Buffers are device memory of the communicator's device (host memory on the host device). A
// collective is queued on `stream`: it reads its input and writes its output in order with the work
// queued there before and after it, and returns at once. Errors of the call itself (mismatched
// sizes, a bad root) throw usage_error at once; a failure of the transfer is a comm_error naming the
// collective, the group and the rank, reported by the stream's next synchronize.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "zoe/core/device.hpp"
#include "zoe/kernels/dtype.hpp"

namespace zoe::engine {

enum class reduce_op : std::uint8_t { sum = 0, mean = 1 };

/// The collectives whose traffic a communicator counts.
enum class collective : std::uint8_t {
  all_gather = 0,
  reduce_scatter = 1,
  all_to_all = 2,
  all_reduce = 3,
  broadcast = 4
};
/// "all_gather", "reduce_scatter", "all_to_all", "all_reduce", "broadcast". Never throws.
[[nodiscard]] std::string_view collective_name(collective c) noexcept;

/// The bytes rank `rank` of a group of `group_size` counts as sent for one collective: what a
/// bandwidth-optimal algorithm sends from that rank to the others, whatever the backend really
/// runs (MPI and NCCL choose their algorithms out of sight), so every backend counts alike and the
/// volume matches ZeRO's analysis. `payload` is the collective's byte argument:
///   all_gather      bytes each rank contributes          -> (size - 1) * payload
///   reduce_scatter  bytes of one rank's result block     -> (size - 1) * payload
///   all_to_all      bytes of one block                   -> (size - 1) * payload
///   all_reduce      bytes of the buffer                  -> 2 * (size - 1) * payload / size (a ring's
///                                                           reduce-scatter then all-gather, rounded down)
///   broadcast       bytes of the buffer                  -> payload at every rank of a ring rooted at
///                                                           `root` except the last, (root + size - 1) % size
/// A copy a rank makes to itself is not sent: at world size 1 every count is 0. Never throws; the
/// caller keeps (size - 1) * payload within 64 bits (the collective's own buffers do).
[[nodiscard]] std::uint64_t bytes_sent(collective c, std::size_t group_size, std::size_t rank, std::uint64_t payload,
                                       std::size_t root = 0) noexcept;

/// Bytes this rank sent through one group, per collective, by bytes_sent()'s rule.
struct comm_stats {
  std::uint64_t all_gather_bytes = 0;
  std::uint64_t reduce_scatter_bytes = 0;
  std::uint64_t all_to_all_bytes = 0;
  std::uint64_t all_reduce_bytes = 0;
  std::uint64_t broadcast_bytes = 0;
  std::uint64_t calls = 0;  ///< collectives issued on this group (barriers not counted), world size 1 included
  [[nodiscard]] std::uint64_t total_bytes() const noexcept {
    return all_gather_bytes + reduce_scatter_bytes + all_to_all_bytes + all_reduce_bytes + broadcast_bytes;
  }
};

/// One group of ranks. Thread-safety: collectives of one group are issued from one thread at a
/// time, in the same order on every rank (as with MPI and NCCL); stats() may be read from any thread.
class communicator {
 public:
  communicator() = default;
  virtual ~communicator() = default;
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  [[nodiscard]] virtual std::size_t rank() const noexcept = 0;
  [[nodiscard]] virtual std::size_t size() const noexcept = 0;
  /// "single", "mpi", "nccl", with the group ("world", "node-local", "cross-node").
  [[nodiscard]] virtual std::string name() const = 0;

  /// Every rank contributes `bytes` from `send`; `recv` (size() * bytes) receives them in rank
  /// order. `send` may be recv + rank() * bytes (in place).
  virtual void all_gather(const void* send, void* recv, std::size_t bytes, stream_view stream) = 0;
  /// `send` holds size() * count elements; rank r receives in `recv` the reduction of every rank's
  /// r-th block of `count` elements. `recv` may be send + rank() * count elements (in place).
  virtual void reduce_scatter(const void* send, void* recv, std::size_t count, kernels::dtype type, reduce_op op,
                              stream_view stream) = 0;
  /// `send` holds size() blocks of `bytes`; block d goes to rank d, and `recv` gets block r of
  /// every rank in rank order. Not in place (NCCL has no in-place all-to-all), except that at
  /// world size 1 send == recv is the identity.
  virtual void all_to_all(const void* send, void* recv, std::size_t bytes, stream_view stream) = 0;
  /// Every rank receives in `recv` the reduction of every rank's `count` elements; `send` may be
  /// `recv` (in place).
  virtual void all_reduce(const void* send, void* recv, std::size_t count, kernels::dtype type, reduce_op op,
                          stream_view stream) = 0;
  /// `bytes` of `buffer` at `root` overwrite `buffer` at every other rank. usage_error if root >= size().
  virtual void broadcast(void* buffer, std::size_t bytes, std::size_t root, stream_view stream) = 0;
  /// Blocks until every rank of the group arrived (host-side; not stream-ordered).
  virtual void barrier() = 0;

  /// The ranks on this node (hpZ's secondary shard group) and the ranks with the same local rank
  /// on every node. At world size 1 both are this group itself.
  [[nodiscard]] virtual communicator& node_local() = 0;
  [[nodiscard]] virtual communicator& cross_node() = 0;

  [[nodiscard]] virtual comm_stats stats() const = 0;
};

/// World size 1 on `dev`: every collective is at most one device-to-device copy on the stream from
/// send to recv (sum and mean of one rank are its input), and none where send is recv (in place);
/// a broadcast copies nothing. Its node-local and cross-node groups are itself; bytes sent are 0,
/// calls are counted. Throws nothing; its collectives throw usage_error naming the collective for a
/// null buffer with a nonzero size, a partial overlap of send and recv, a root other than 0, an
/// unknown dtype or reduce_op, or a size that overflows. The device must outlive it.
[[nodiscard]] std::unique_ptr<communicator> make_single_communicator(device& dev);

}  // namespace zoe::engine
