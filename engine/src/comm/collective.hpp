#pragma once
// What every communicator backend shares: the checks of a collective's arguments, with messages
// naming the collective and the group, and the count of the bytes it sends (the rule is
// bytes_to() in communicator.hpp), so every backend checks and counts alike.

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>

#include "zoe/engine/comm/communicator.hpp"
#include "zoe/kernels/dtype.hpp"

namespace zoe::engine::detail {

/// Names a call in messages: "all_gather on single (world)".
struct collective_call {
  collective what;
  std::string_view group;
};

/// "all_gather on single (world)". Throws only std::bad_alloc.
[[nodiscard]] std::string describe(collective_call call);
/// `count` elements of `type` in bytes. Throws usage_error naming the call for a dtype or
/// reduce_op out of range, or a byte count that overflows.
[[nodiscard]] std::uint64_t element_bytes(collective_call call, std::size_t count, kernels::dtype type, reduce_op op);
/// `blocks` blocks of `bytes`, in bytes. Throws usage_error naming the call on overflow.
[[nodiscard]] std::uint64_t blocks_bytes(collective_call call, std::uint64_t bytes, std::size_t blocks);
/// Throws usage_error naming the call and `which` ("send", "recv") for a null buffer of nonzero size.
void check_buffer(collective_call call, std::string_view which, const void* buffer, std::uint64_t bytes);
/// Throws usage_error naming the call when [send, +send_bytes) and [recv, +recv_bytes) overlap,
/// unless send is `in_place` (the collective's in-place form; nullptr where it has none).
void check_overlap(collective_call call, const void* send, std::uint64_t send_bytes, const void* recv,
                   std::uint64_t recv_bytes, const void* in_place);

// One collective's checks, the same in every backend, for a group of `size` ranks of which this is
// `rank`. Each throws usage_error naming the call (as the checks above).

/// An all-gather (one part of a coalesced one): send of part.bytes, recv of size blocks of it, in
/// place when send is recv's own block. Returns recv's bytes.
std::uint64_t check_all_gather(collective_call call, const gather_part& part, std::size_t size, std::size_t rank);
/// A reduce-scatter (one part of a coalesced one): send of size blocks of part.count elements, recv
/// of one, in place when recv is send's own block. Returns the block's bytes.
std::uint64_t check_reduce_scatter(collective_call call, const reduce_part& part, reduce_op op, std::size_t size,
                                   std::size_t rank);
/// An all-to-all: send and recv of size blocks of `bytes` each, in place only in a group of one.
/// Returns their bytes.
std::uint64_t check_all_to_all(collective_call call, const void* send, const void* recv, std::uint64_t bytes,
                               std::size_t size);
/// An all-reduce: send and recv of `count` elements of `type`, in place when send == recv. Returns
/// their bytes.
std::uint64_t check_all_reduce(collective_call call, const void* send, const void* recv, std::size_t count,
                               kernels::dtype type, reduce_op op);

/// Where chunk `i` of `count` elements split over `size` ranks begins: count * i / size, computed
/// without forming count * i, which may not fit. Chunk i is [chunk_first(i), chunk_first(i + 1)):
/// the split of an all-reduce (bytes_to) and of the mpi backend's reduce-scatter phase alike.
[[nodiscard]] constexpr std::uint64_t chunk_first(std::uint64_t count, std::uint64_t size, std::uint64_t i) noexcept {
  return (count / size) * i + (count % size) * i / size;
}

/// The bytes one group's collectives sent. Thread-safe.
class traffic_counter {
 public:
  /// Counts one collective in which this rank sent `sent` (a backend that counts by bytes_to()).
  void count(collective what, traffic sent) noexcept;
  /// Counts one collective issued, its bytes to come through add() (a backend that measures them).
  void count_call() noexcept;
  /// Adds bytes a collective of kind `what` handed the transport.
  void add(collective what, traffic sent) noexcept;
  [[nodiscard]] comm_stats snapshot() const;

 private:
  mutable std::mutex mutex_;
  comm_stats stats_;
};

}  // namespace zoe::engine::detail
