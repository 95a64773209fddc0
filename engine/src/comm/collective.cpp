// Argument checks and traffic counting shared by the communicator backends.
#include "collective.hpp"

#include <cstdint>
#include <limits>
#include <string>

#include "zoe/core/check.hpp"

namespace zoe::engine {

std::string_view collective_name(collective c) noexcept {
  switch (c) {
    case collective::all_gather: return "all_gather";
    case collective::reduce_scatter: return "reduce_scatter";
    case collective::all_to_all: return "all_to_all";
    case collective::all_reduce: return "all_reduce";
    case collective::broadcast: return "broadcast";
    case collective::point_to_point: return "point_to_point";
  }
  return "unknown collective";
}

std::uint64_t bytes_to(collective c, std::size_t size, std::size_t rank, std::size_t dest, std::uint64_t payload,
                       std::size_t root, std::size_t element) noexcept {
  if (size <= 1 || dest == rank || dest >= size) return 0;
  switch (c) {
    case collective::all_gather:
    case collective::reduce_scatter:
    case collective::all_to_all: return payload;
    case collective::all_reduce: {
      const std::uint64_t count = element == 0 ? 0 : payload / element;
      const auto chunk = [&](std::uint64_t i) {
        return (detail::chunk_first(count, size, i + 1) - detail::chunk_first(count, size, i)) * element;
      };
      return chunk(dest) + chunk(rank);
    }
    case collective::broadcast: return rank == root ? payload : 0;
    case collective::point_to_point: return dest == root ? payload : 0;
  }
  return 0;
}

comm_stats total_stats(communicator& world) {
  comm_stats out = world.stats();
  communicator* seen[] = {&world, nullptr, nullptr, nullptr};
  std::size_t n = 1;
  for (communicator* g : {&world.node_local(), &world.cross_node(), &world.hpz()}) {
    bool counted = false;
    for (std::size_t i = 0; i < n; ++i) counted = counted || seen[i] == g;
    if (counted) continue;
    seen[n++] = g;
    out += g->stats();
  }
  return out;
}

namespace detail {

std::string describe(collective_call call) { return str(collective_name(call.what), " on ", call.group); }

std::uint64_t element_bytes(collective_call call, std::size_t count, kernels::dtype type, reduce_op op) {
  ZOE_EXPECTS(type == kernels::dtype::fp32 || type == kernels::dtype::fp16 || type == kernels::dtype::bf16,
              describe(call), ": unknown dtype ", static_cast<int>(type), " (fp32, fp16 or bf16)");
  ZOE_EXPECTS(op == reduce_op::sum || op == reduce_op::mean, describe(call), ": unknown reduce_op ",
              static_cast<int>(op), " (sum or mean)");
  return blocks_bytes(call, kernels::dtype_size(type), count);
}

std::uint64_t blocks_bytes(collective_call call, std::uint64_t bytes, std::size_t blocks) {
  ZOE_EXPECTS(blocks == 0 || bytes <= std::numeric_limits<std::uint64_t>::max() / blocks, describe(call), ": ", blocks,
              " blocks of ", bytes, " bytes overflow 64 bits");
  return bytes * blocks;
}

void check_buffer(collective_call call, std::string_view which, const void* buffer, std::uint64_t bytes) {
  ZOE_EXPECTS(buffer != nullptr || bytes == 0, describe(call), ": the ", which, " buffer is null with ", bytes,
              " bytes");
}

void check_overlap(collective_call call, const void* send, std::uint64_t send_bytes, const void* recv,
                   std::uint64_t recv_bytes, const void* in_place) {
  if ((in_place != nullptr && send == in_place) || send_bytes == 0 || recv_bytes == 0) return;
  const auto s = reinterpret_cast<std::uintptr_t>(send);
  const auto r = reinterpret_cast<std::uintptr_t>(recv);
  ZOE_EXPECTS(s + send_bytes <= r || r + recv_bytes <= s, describe(call), ": send [", send, ", +", send_bytes,
              " bytes) overlaps recv [", recv, ", +", recv_bytes, " bytes) other than in place");
}

std::uint64_t check_all_gather(collective_call call, const gather_part& part, std::size_t size, std::size_t rank) {
  const std::uint64_t total = blocks_bytes(call, part.bytes, size);
  check_buffer(call, "send", part.send, part.bytes);
  check_buffer(call, "recv", part.recv, total);
  // In place: send is recv's own block (an address computed as an integer, only compared).
  const auto own = reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(part.recv) + part.bytes * rank);
  check_overlap(call, part.send, part.bytes, part.recv, total, own);
  return total;
}

std::uint64_t check_reduce_scatter(collective_call call, const reduce_part& part, reduce_op op, std::size_t size,
                                   std::size_t rank) {
  const std::uint64_t block = element_bytes(call, part.count, part.type, op);
  const std::uint64_t total = blocks_bytes(call, block, size);
  check_buffer(call, "send", part.send, total);
  check_buffer(call, "recv", part.recv, block);
  // In place: recv is send's own block (compared as addresses: recv - rank * block may lie before
  // any object when it is not).
  const bool in_place = part.send != nullptr && reinterpret_cast<std::uintptr_t>(part.recv) ==
                                                    reinterpret_cast<std::uintptr_t>(part.send) + block * rank;
  check_overlap(call, part.send, total, part.recv, block, in_place ? part.send : nullptr);
  return block;
}

std::uint64_t check_all_to_all(collective_call call, const void* send, const void* recv, std::uint64_t bytes,
                               std::size_t size) {
  const std::uint64_t total = blocks_bytes(call, bytes, size);
  check_buffer(call, "send", send, total);
  check_buffer(call, "recv", recv, total);
  check_overlap(call, send, total, recv, total, size == 1 ? recv : nullptr);
  return total;
}

std::uint64_t check_all_reduce(collective_call call, const void* send, const void* recv, std::size_t count,
                               kernels::dtype type, reduce_op op) {
  const std::uint64_t bytes = element_bytes(call, count, type, op);
  check_buffer(call, "send", send, bytes);
  check_buffer(call, "recv", recv, bytes);
  check_overlap(call, send, bytes, recv, bytes, recv);
  return bytes;
}

void traffic_counter::count(collective what, traffic sent) noexcept {
  count_call();
  add(what, sent);
}

void traffic_counter::count_call() noexcept {
  const std::lock_guard lock(mutex_);
  ++stats_.calls;
}

void traffic_counter::add(collective what, traffic sent) noexcept {
  const std::lock_guard lock(mutex_);
  traffic& t = stats_.of(what);
  t.intra_node += sent.intra_node;
  t.inter_node += sent.inter_node;
}

comm_stats traffic_counter::snapshot() const {
  const std::lock_guard lock(mutex_);
  return stats_;
}

}  // namespace detail
}  // namespace zoe::engine
