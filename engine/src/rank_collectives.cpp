// The engine's collectives between steps (rank_collectives.hpp).
#include "rank_collectives.hpp"

#include <array>
#include <cstring>

#include "zoe/engine/comm/pairwise_tree.hpp"

namespace zoe::engine::detail {
namespace {

// all_gather of host bytes through device memory (the communicator's buffers are device memory).
std::vector<std::byte> gather_on_device(communicator& world, device& dev, std::span<const std::byte> part) {
  const std::size_t n = world.size();
  std::vector<std::byte> out(part.size() * n);
  if (part.empty()) return out;
  const device_stream stream = dev.create_stream();
  // Freed after the stream's work: the copy back is synchronized before it goes out of scope.
  const device_allocation scratch(dev, out.size());
  std::byte* own = scratch.data() + world.rank() * part.size();
  dev.copy_async(own, part.data(), part.size(), copy_kind::host_to_device, stream.view());
  world.all_gather(own, scratch.data(), part.size(), stream.view());
  dev.copy_async(out.data(), scratch.data(), out.size(), copy_kind::device_to_host, stream.view());
  dev.synchronize(stream.view());
  return out;
}

}  // namespace

gradient_summary global_summary(communicator& world, device& dev, const gradient_summary& local) {
  if (world.size() == 1) return local;
  // One record per rank: its sum of squares and its flag, as two doubles (the bits travel as bytes).
  std::array<double, 2> mine{local.sum_of_squares, local.overflow ? 1.0 : 0.0};
  const std::vector<std::byte> all = gather_on_device(world, dev, std::as_bytes(std::span(mine)));
  const auto record = [&](std::size_t r) {
    std::array<double, 2> rec{};
    std::memcpy(rec.data(), all.data() + r * sizeof(rec), sizeof(rec));
    return gradient_summary{rec[0], rec[1] != 0.0};
  };
  return pairwise_tree_sum<gradient_summary>(world.size(), record,
                                             [](gradient_summary& left, gradient_summary&& right) {
                                               left.sum_of_squares += right.sum_of_squares;
                                               left.overflow = left.overflow || right.overflow;
                                             });
}

}  // namespace zoe::engine::detail

namespace zoe::engine {

std::vector<std::byte> gather_shards(communicator& world, device& dev, std::span<const std::byte> shard) {
  if (world.size() == 1) return {shard.begin(), shard.end()};
  return detail::gather_on_device(world, dev, shard);
}

}  // namespace zoe::engine
