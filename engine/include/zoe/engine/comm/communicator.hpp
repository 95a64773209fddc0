#pragma once
// The communicator seam: collectives on device buffers over a group of ranks, in stream order on
// the device the communicator was made for, plus the node-local, cross-node and hpZ sub-groups that
// hpZ and qgZ use. Backends: single (world size 1), mpi (Open MPI, real processes), nccl (GPUs,
// loaded at run time, bootstrapped through MPI) and host (the host program's collectives,
// host_collectives.hpp: torch.distributed under torchrun). Every backend counts the bytes it hands the
// transport per group, per collective and per destination (intra-node or inter-node). The mpi
// backend measures them where it posts each send (every MPI_Isend's byte count, attributed to the
// destination's node), so its volume is measured, not estimated. The nccl backend cannot see its
// transport (NCCL picks rings, trees and protocols out of sight): it counts by bytes_to(), the
// bytes the direct algorithm would send, so its figures are the same rule, not a measurement; so
// does the host backend.
// single sends nothing.
//
// Ranks and nodes: world rank r lives on node r / ranks_per_node with local rank r % ranks_per_node
// (ranks are placed on nodes in consecutive blocks, as mpirun's default by-slot mapping does; a
// launch that interleaves them is refused with the ranks named). The node-local group of r is the
// ranks of its node; the cross-node group the ranks with its local rank on every node; the hpZ
// group the hpz_partition_size consecutive ranks containing r.
//
// Failure: a collective that has waited comm_options::timeout for a rank's part fails with a
// comm_error naming that rank (its world rank and node); a rank that fails (its communicator
// destroyed while an exception unwinds, or one of its collectives failed) tells the others, which
// fail at once naming it. Nothing hangs for ever. The mpi backend's message reads
//   "all_gather on mpi (world): rank 1 (world rank 1, node 0) sent nothing for 2 s"
//   "all_gather on mpi (world): rank 3 (world rank 3, node 1) failed: <that rank's own message>"
// A collective's failure is thrown by the stream's next synchronize, which (like every failed host
// task, core/device.hpp) throws it as a device_error carrying that message. After a failure the
// group refuses its later collectives, and a process that saw one exits without MPI_Finalize (which
// would hang on a dead peer): mpirun then reports an abnormal exit.
//
// Order: collectives of one group run in the order issued; the ranks must issue them alike. Two
// worlds (two make_communicator calls) may be issued in different orders on different ranks only
// when their collectives go to different streams: on one stream each waits for the one before it.
//
// Buffers are device memory of the communicator's device (host memory on the host device). A
// collective is queued on `stream`: it reads its input and writes its output in order with the work
// queued there before and after it, and returns at once. Errors of the call itself (mismatched
// sizes, a bad root) throw usage_error at once; a failure of the transfer is a comm_error naming the
// collective, the group and the rank, reported by the stream's next synchronize.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
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
  broadcast = 4,
  point_to_point = 5
};
inline constexpr std::size_t collective_count = 6;
/// "all_gather", "reduce_scatter", "all_to_all", "all_reduce", "broadcast", "point_to_point".
/// Never throws.
[[nodiscard]] std::string_view collective_name(collective c) noexcept;

/// The bytes rank `rank` of a group of `size` hands the transport for rank `dest` in one
/// collective, by the direct algorithms the mpi backend runs (each rank sends every other rank
/// exactly the part that rank needs, and reduces what it receives in the pairwise tree over the
/// ranks of pairwise_tree.hpp, so the result does not depend on timing): what the mpi backend
/// measures. The nccl backend, whose algorithms run out of sight, counts by this rule instead of
/// measuring. `payload` is the collective's byte argument:
///   all_gather      bytes each rank contributes  -> payload to every other rank
///   reduce_scatter  bytes of one result block    -> payload to every other rank
///   all_to_all      bytes of one block           -> payload to every other rank
///   all_reduce      bytes of the buffer: a reduce-scatter of `size` chunks then an all-gather of
///                   them, chunk i holding elements [count * i / size, count * (i + 1) / size) of
///                   `element` bytes each -> chunk(dest) + chunk(rank) to every other rank
///   broadcast       bytes of the buffer          -> payload from `root` to every other rank
///   point_to_point  bytes this rank sends (the message's size on its sender, 0 on every other
///                   rank)                        -> payload to `root` (the receiver)
/// A copy a rank makes to itself is not sent: 0 when dest == rank, and every count is 0 at world
/// size 1. Never throws; the caller keeps the sizes within 64 bits (the collective's buffers do).
[[nodiscard]] std::uint64_t bytes_to(collective c, std::size_t size, std::size_t rank, std::size_t dest,
                                     std::uint64_t payload, std::size_t root = 0, std::size_t element = 1) noexcept;

/// Bytes sent to ranks on this rank's node and to ranks on other nodes.
struct traffic {
  std::uint64_t intra_node = 0;
  std::uint64_t inter_node = 0;
  [[nodiscard]] std::uint64_t total() const noexcept { return intra_node + inter_node; }
};

/// Bytes this rank sent through one group, per collective: measured at the transport (mpi), or by
/// bytes_to()'s rule (nccl).
struct comm_stats {
  std::array<traffic, collective_count> sent{};  ///< indexed by collective
  std::uint64_t calls = 0;  ///< collectives issued on this group (barriers not counted), world size 1 included
  [[nodiscard]] const traffic& of(collective c) const noexcept { return sent[static_cast<std::size_t>(c)]; }
  [[nodiscard]] traffic& of(collective c) noexcept { return sent[static_cast<std::size_t>(c)]; }
  /// Every collective's bytes together.
  [[nodiscard]] traffic total() const noexcept {
    traffic t;
    for (const traffic& s : sent) {
      t.intra_node += s.intra_node;
      t.inter_node += s.inter_node;
    }
    return t;
  }
  [[nodiscard]] std::uint64_t total_bytes() const noexcept { return total().total(); }
  comm_stats& operator+=(const comm_stats& o) noexcept {
    for (std::size_t i = 0; i < collective_count; ++i) {
      sent[i].intra_node += o.sent[i].intra_node;
      sent[i].inter_node += o.sent[i].inter_node;
    }
    calls += o.calls;
    return *this;
  }
};

/// One all-gather of several: as all_gather(send, recv, bytes).
struct gather_part {
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t bytes = 0;
};

/// One reduce-scatter of several: as reduce_scatter(send, recv, count, type, op).
struct reduce_part {
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;  ///< elements of one result block (send holds size() * count)
  kernels::dtype type = kernels::dtype::fp32;
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
  /// "single", "mpi", "nccl", with the group ("world", "node-local", "cross-node", "hpz").
  [[nodiscard]] virtual std::string name() const = 0;

  /// Every rank contributes `bytes` from `send`; `recv` (size() * bytes) receives them in rank
  /// order. `send` may be recv + rank() * bytes (in place).
  virtual void all_gather(const void* send, void* recv, std::size_t bytes, stream_view stream) = 0;
  /// Several all-gathers carried as one (DeepSpeed's allgather_coalesced): one message per pair of
  /// ranks holding every part, each part landing as all_gather(part.send, part.recv, part.bytes)
  /// would leave it; counted as one all_gather of the parts' summed bytes. The parts' sizes must
  /// agree on every rank.
  virtual void all_gather_coalesced(std::span<const gather_part> parts, stream_view stream) = 0;
  /// `send` holds size() * count elements; rank r receives in `recv` the reduction of every rank's
  /// r-th block of `count` elements. `recv` may be send + rank() * count elements (in place).
  /// Reduction order (here and in all_reduce): the mpi backend, and the single backend trivially,
  /// add the ranks' blocks in the pairwise tree of pairwise_tree.hpp (((r0 + r1) + (r2 + r3)) for 4;
  /// fp16 and bf16 in fp32, rounded once; mean divides that sum by size()), so a sum split over a
  /// power-of-two number of ranks adds up as on one rank. The nccl backend cannot choose: NCCL's
  /// ring and tree algorithms add in an order of their own, which may change with the message size
  /// and the topology, so its results are deterministic for one setup but not bit-identical to
  /// another world size's.
  virtual void reduce_scatter(const void* send, void* recv, std::size_t count, kernels::dtype type, reduce_op op,
                              stream_view stream) = 0;
  /// Several reduce-scatters carried as one (the parameters of one gradient bucket of
  /// reduce_bucket_size): one message per pair of ranks holding every part's block for that rank,
  /// each part landing in part.recv as reduce_scatter(part.send, part.recv, part.count, part.type,
  /// op) would leave it, bit for bit (the same reduction, in the same order); counted as one
  /// reduce_scatter of the parts' summed block bytes. Parts may mix dtypes and sizes (0 included);
  /// each may be in place (recv = send + rank() * count elements). The parts must agree on every
  /// rank (count and type, in the same order). usage_error naming the collective as reduce_scatter
  /// would give it for any part, before anything is queued.
  virtual void reduce_scatter_coalesced(std::span<const reduce_part> parts, reduce_op op, stream_view stream) = 0;
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
  /// `bytes` of `buffer` at rank `from` overwrite `buffer` at rank `to`; nothing else moves (a
  /// checkpoint's rank 0 receiving each rank's pieces in turn: a broadcast would send every piece to
  /// every rank). Collective on the group's order: every rank issues it, with the same bytes, from
  /// and to; the others' `buffer` is not touched and may be null. Nothing moves when from == to.
  /// usage_error if from or to >= size(). Counted as point_to_point on the sender.
  virtual void point_to_point(void* buffer, std::size_t bytes, std::size_t from, std::size_t to,
                              stream_view stream) = 0;
  /// Blocks until every rank of the group arrived (host-side; not stream-ordered).
  virtual void barrier() = 0;

  /// The sub-groups of a world communicator (see the top of this file): the ranks on this node,
  /// the ranks with the same local rank on every node, and the hpZ group. Where a sub-group is the
  /// whole group (world size 1, one node, ...) it may be this group itself. On a sub-group these
  /// return the sub-group itself where it already lies within the asked-for group, and throw
  /// usage_error otherwise.
  [[nodiscard]] virtual communicator& node_local() = 0;
  [[nodiscard]] virtual communicator& cross_node() = 0;
  [[nodiscard]] virtual communicator& hpz() = 0;

  /// This group's traffic only (its sub-groups count their own; see total_stats()).
  [[nodiscard]] virtual comm_stats stats() const = 0;

  /// Poisons the group (called on a world: the world and its sub-groups) after this rank dropped
  /// a collective its peers will issue (a gather bucket whose read failed, a fetch cut short by a
  /// throw): a dropped collective shifts the issue order, so this rank's next collective could
  /// silently match the peers' dropped one. The peers' pending and next collectives fail with
  /// comm_error naming this rank and `reason`; this rank's later collectives throw comm_error.
  /// The first reason is kept. Never throws.
  virtual void abort(std::string_view reason) noexcept = 0;
};

/// The world's traffic with that of its distinct sub-groups (node_local, cross_node, hpz), each
/// group counted once. Throws only std::bad_alloc.
[[nodiscard]] comm_stats total_stats(communicator& world);

class host_collectives;

/// How make_communicator builds a world.
struct comm_options {
  /// "auto" | "single" | "mpi" | "nccl" | "host" (zoe.comm.backend). auto: host when `host` is
  /// set, else mpi when the process was launched by mpirun (its environment says so) with more than
  /// one rank, nccl instead on a CUDA device where NCCL loads, single otherwise.
  std::string backend = "auto";
  /// The host program's collectives (host_collectives.hpp), for the "host" backend; null: none.
  /// Set, the backend must be auto or host.
  std::shared_ptr<host_collectives> host;
  /// Ranks per node (zoe.ranks_per_node); 0: from MPI's shared-memory split. Must divide the world.
  std::size_t ranks_per_node = 0;
  /// Ranks of an hpZ group (zero_optimization.zero_hpz_partition_size); must divide the world size.
  /// 1: no hpZ. A group within a node (dividing ranks_per_node) keeps backward gathers off the
  /// network; a larger one is allowed and its gathers cross nodes.
  std::size_t hpz_partition_size = 1;
  /// How long a collective waits for another rank's part before it fails naming it (zoe.comm.timeout_s).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

/// A new world communicator on `dev` (collective: every rank calls it, in the same order). Each
/// call makes an independent world with its own sub-groups (for MPI a duplicated communicator; for
/// the host backend groups of its own, host_collectives::create_group), so
/// two users of the engine (the coordinator's gathers and the gradient path's reductions) each
/// keep their own order of collectives. config_error naming zoe.comm.backend for an unknown
/// backend or one this build or machine lacks (the error says what is missing), for host without
/// options.host, or for options.host with a backend other than auto or host; naming
/// zoe.ranks_per_node / zero_optimization.zero_hpz_partition_size for a size that does not fit
/// the world; comm_error when the transport fails to start. Like a collective, it waits at most
/// options.timeout for the other ranks (mpi: comm_error naming the ranks that did not call it, and
/// the others are told; MPI_Init itself, on the process's first mpi world, cannot be timed). The
/// device must outlive it.
[[nodiscard]] std::unique_ptr<communicator> make_communicator(device& dev, const comm_options& options);

/// World size 1 on `dev`: every collective is at most one device-to-device copy on the stream from
/// send to recv (sum and mean of one rank are its input), and none where send is recv (in place);
/// a broadcast copies nothing. Its node-local, cross-node and hpZ groups are itself; bytes sent are 0,
/// calls are counted. Throws nothing; its collectives throw usage_error naming the collective for a
/// null buffer with a nonzero size, a partial overlap of send and recv, a root other than 0, an
/// unknown dtype or reduce_op, or a size that overflows. The device must outlive it.
[[nodiscard]] std::unique_ptr<communicator> make_single_communicator(device& dev);

}  // namespace zoe::engine
