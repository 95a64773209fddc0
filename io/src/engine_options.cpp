#include "zoe/io/engine_options.hpp"

#include "zoe/core/check.hpp"
#include "zoe/core/units.hpp"

namespace zoe::io {

void engine_options::validate() const {
  // A power of two: the swap store stripes and aligns extents in block_size units with masks, and
  // a stripe of several of them must divide every file's share into whole 4 KiB blocks.
  ZOE_EXPECTS(is_pow2(block_size) && block_size >= 4096 && block_size <= (std::size_t{1} << 30),
              "block_size must be a power of two between 4 KiB and 1 GiB, got ", block_size);
  ZOE_EXPECTS(queue_depth >= 1 && queue_depth <= 4096, "queue_depth must be between 1 and 4096, got ", queue_depth);
  ZOE_EXPECTS(intra_op_parallelism >= 1 && intra_op_parallelism <= 256,
              "intra_op_parallelism must be between 1 and 256, got ", intra_op_parallelism);
}

}  // namespace zoe::io
