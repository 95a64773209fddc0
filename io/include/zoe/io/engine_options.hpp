#pragma once
// The knobs of the I/O engine, named and meaning as in DeepSpeed's `aio` config block.

#include <cstddef>
#include <string>

namespace zoe::io {

struct engine_options {
  std::size_t block_size = std::size_t{1}
                           << 20;        ///< largest single request sent to the kernel (a power of two, 4 KiB to 1 GiB)
  std::size_t queue_depth = 32;          ///< requests in flight per ring / context / worker
  std::size_t intra_op_parallelism = 1;  ///< worker threads (rings, contexts)
  bool single_submit = false;            ///< submit requests one at a time instead of batched
  bool overlap_events = true;            ///< reap completions while submitting

  /// Throws usage_error naming the knob when a value is out of range.
  void validate() const;
};

}  // namespace zoe::io
