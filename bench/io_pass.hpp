#pragma once
// One timed pass of `zoe-bench io`: every thread moves its contiguous share of the blocks with
// queue_depth requests in flight, from and into locked buffers allocated before timing.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>

#include "io_targets.hpp"
#include "support/host_buffer.hpp"
#include "support/stamped_data.hpp"

namespace zoe::bench {

struct pass_layout {
  std::uint64_t size = 0;
  std::size_t block = 0;
  std::size_t queue_depth = 0;
  std::size_t threads = 0;

  [[nodiscard]] std::size_t buffer_bytes() const noexcept { return threads * queue_depth * block; }
  /// Thread `t`'s buffer slot `i` within the pass buffers.
  [[nodiscard]] std::span<std::byte> slot(const host_buffer& memory, std::size_t t, std::size_t i) const {
    return memory.span().subspan((t * queue_depth + i) * block, block);
  }
};

/// Called with each block read, in completion order; may throw to stop the pass.
using block_visitor = std::function<void(std::span<const std::byte>, std::uint64_t)>;

/// Runs one pass and returns the seconds from the first submit to the last completion. Writes lay
/// `data`'s random bodies in every buffer slot before timing, then stamp each block for its offset
/// on the submitting thread while the requests before it are in flight (stamped_data.hpp). Throws
/// the first failure of any thread.
double run_pass(io_target& target, const pass_layout& layout, const host_buffer& memory, io::io_op op,
                const stamped_data* data, const block_visitor& visit);

/// The seed stamped in the target's first sector, if it holds a complete earlier run.
[[nodiscard]] std::optional<std::uint64_t> earlier_seed(io_target& target, const pass_layout& layout,
                                                        const host_buffer& memory);

}  // namespace zoe::bench
