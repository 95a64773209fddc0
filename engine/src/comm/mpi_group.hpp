#pragma once
// One group of ranks over MPI: the world of a make_communicator call or one of its sub-groups. Its
// collectives are direct point-to-point exchanges (each rank sends every other rank exactly the
// part that rank needs, mpi_transfer.hpp) run as host tasks in stream order; on a device other than
// the host device they pass through host staging buffers (copy to the host, exchange, copy back).

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "collective.hpp"
#include "mpi_transfer.hpp"
#include "rank_group.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace zoe::engine::detail {

/// An MPI communicator handle, freed on destruction (MPI_Comm_free is local in Open MPI).
class mpi_comm_owner {
 public:
  mpi_comm_owner() noexcept = default;
  explicit mpi_comm_owner(MPI_Comm c) noexcept : comm_(c) {}
  ~mpi_comm_owner();
  mpi_comm_owner(mpi_comm_owner&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
  mpi_comm_owner& operator=(mpi_comm_owner&& o) noexcept;
  mpi_comm_owner(const mpi_comm_owner&) = delete;
  mpi_comm_owner& operator=(const mpi_comm_owner&) = delete;
  [[nodiscard]] MPI_Comm get() const noexcept { return comm_; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

class mpi_group final : public communicator {
 public:
  /// `shape` is where the group sits in its world (make_rank_group), its nodes included; `world` is
  /// the world this group belongs to (nullptr for the world itself).
  mpi_group(device& dev, mpi_comm_owner comm, rank_group shape, std::chrono::milliseconds timeout, mpi_group* world);
  /// Waits for this group's collectives still queued on streams, frees its staging buffers and,
  /// when an exception unwinds past it, tells every other rank this one failed.
  ~mpi_group() override;
  mpi_group(const mpi_group&) = delete;
  mpi_group& operator=(const mpi_group&) = delete;

  /// The world's sub-groups (each may be the world itself). Only on the world.
  void adopt(std::unique_ptr<mpi_group> node_local, std::unique_ptr<mpi_group> cross_node,
             std::unique_ptr<mpi_group> hpz);

  [[nodiscard]] std::size_t rank() const noexcept override { return shape_.rank; }
  [[nodiscard]] std::size_t size() const noexcept override { return shape_.world_ranks.size(); }
  [[nodiscard]] std::string name() const override { return name_; }

  void all_gather(const void* send, void* recv, std::size_t bytes, stream_view stream) override;
  void all_gather_coalesced(std::span<const gather_part> parts, stream_view stream) override;
  void reduce_scatter(const void* send, void* recv, std::size_t count, kernels::dtype type, reduce_op op,
                      stream_view stream) override;
  void reduce_scatter_coalesced(std::span<const reduce_part> parts, reduce_op op, stream_view stream) override;
  void all_to_all(const void* send, void* recv, std::size_t bytes, stream_view stream) override;
  void all_reduce(const void* send, void* recv, std::size_t count, kernels::dtype type, reduce_op op,
                  stream_view stream) override;
  void broadcast(void* buffer, std::size_t bytes, std::size_t root, stream_view stream) override;
  void point_to_point(void* buffer, std::size_t bytes, std::size_t from, std::size_t to, stream_view stream) override;
  void barrier() override;

  [[nodiscard]] communicator& node_local() override;
  [[nodiscard]] communicator& cross_node() override;
  [[nodiscard]] communicator& hpz() override;

  [[nodiscard]] comm_stats stats() const override { return traffic_.snapshot(); }
  void abort(std::string_view reason) noexcept override;

 private:
  // The exchange of one collective on host pointers: `in` holds its input, `out` receives its output.
  using exchange_fn = std::function<void(mpi_exchange&, const std::byte* in, std::byte* out)>;
  // Host memory a collective stages through (page-aligned, at least one byte); registered with the
  // device when that is not the host device.
  struct staging {
    staging(device& dev, std::uint64_t bytes);
    ~staging();
    staging(const staging&) = delete;
    staging& operator=(const staging&) = delete;
    device* dev;
    std::uint64_t rounded = 0;
    bool registered = false;
    std::byte* data = nullptr;
  };

  [[nodiscard]] collective_call call(collective what) const noexcept { return {what, name_}; }
  // The tag of the next collective or barrier of `kind` (a collective's value, or one of the kinds
  // below): the issue order is the contract between ranks.
  [[nodiscard]] int next_tag(std::uint64_t kind) noexcept;
  static constexpr std::uint64_t barrier_tag_kind = collective_count;
  static constexpr std::uint64_t coalesced_tag_kind = collective_count + 1;
  static constexpr std::uint64_t coalesced_reduce_tag_kind = collective_count + 2;
  static constexpr std::uint64_t tag_kinds = collective_count + 3;
  // all_gather (block_per_peer false: every peer gets the whole of `send`) and all_to_all (true:
  // peer p gets block p of `send`): `bytes` to and from every peer, block p of `recv` from rank p.
  void exchange_blocks(collective what, const void* send, void* recv, std::size_t bytes, bool block_per_peer,
                       stream_view stream);
  // Queues `fn` on `stream` reading `in_bytes` at `in` and writing `out_bytes` at `out`.
  void launch(collective what, stream_view stream, const void* in, std::uint64_t in_bytes, void* out,
              std::uint64_t out_bytes, exchange_fn fn);
  // Queues a collective on `stream` through a host staging buffer of `bytes` (a coalesced one even
  // on the host device, where its parts are not one buffer): copy_in(data) queues the copies of the
  // input into it, `exchange` runs on the stream's worker under the next tag of `tag_kind`,
  // copy_out(data) queues the copies of the output; then the buffer is retired.
  void launch_staged(collective_call c, std::uint64_t tag_kind, stream_view stream, std::uint64_t bytes,
                     const std::function<void(std::byte*)>& copy_in,
                     std::function<void(mpi_exchange&, std::byte*)> exchange,
                     const std::function<void(std::byte*)>& copy_out);
  // The copy kinds between the device's memory and host staging.
  [[nodiscard]] copy_kind to_staging() const noexcept;
  [[nodiscard]] copy_kind from_staging() const noexcept;
  // Runs one exchange on a stream's worker: refuses after an earlier failure, records a new one,
  // and adds the bytes the exchange handed MPI to c.what's counters (a failed exchange's too).
  void run(collective_call c, int tag, const std::function<void(mpi_exchange&)>& body);
  [[nodiscard]] std::shared_ptr<staging> stage(std::uint64_t bytes);
  void retire(std::shared_ptr<staging> s) noexcept;
  void release_retired() noexcept;
  void task_done() noexcept;
  [[nodiscard]] communicator& within(mpi_group* target, std::string_view which);

  device* dev_;
  mpi_comm_owner comm_;
  rank_group shape_;
  std::string name_;
  mpi_group_view view_;
  mpi_group* world_;
  std::unique_ptr<mpi_group> node_local_;
  std::unique_ptr<mpi_group> cross_node_;
  std::unique_ptr<mpi_group> hpz_;
  std::uint64_t sequence_ = 0;
  traffic_counter traffic_;

  mutable std::mutex mutex_;
  std::condition_variable idle_;
  std::size_t in_flight_ = 0;                      // collectives queued and not finished
  std::string failure_;                            // the first failed exchange's message
  std::vector<std::shared_ptr<staging>> retired_;  // staging done with, to unregister and free
};

}  // namespace zoe::engine::detail
