#pragma once
// The knobs of the I/O engine, named and meaning as in DeepSpeed's `aio` config block, and where
// its own O_DIRECT memory comes from.

#include <cstddef>
#include <memory>
#include <string>

#include "zoe/io/bounce_memory.hpp"

namespace zoe::io {

struct engine_options {
  std::size_t block_size = std::size_t{1}
                           << 20;        ///< largest single request sent to the kernel (a power of two, 4 KiB to 1 GiB)
  std::size_t queue_depth = 32;          ///< requests in flight per ring / context / worker
  std::size_t intra_op_parallelism = 1;  ///< worker threads (rings, contexts)
  bool single_submit = false;            ///< submit requests one at a time instead of batched
  bool overlap_events = true;            ///< reap completions while submitting
  /// Where bounce buffers (one block_size buffer per unaligned piece in flight, so at most
  /// queue_depth x intra_op_parallelism at once) and the swap channel's partial-read scratch (two
  /// chunks per partial read in flight) come from. Null: the heap, kept for reuse while the
  /// engine or channel lives. Shared by every engine and channel made with these options.
  std::shared_ptr<bounce_memory> bounce;

  /// Throws usage_error naming the knob when a value is out of range.
  void validate() const;
};

}  // namespace zoe::io
