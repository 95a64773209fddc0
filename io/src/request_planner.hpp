#pragma once
// Cuts one request into pieces the backend can take: pieces whose buffer address, file offset
// and length are all aligned go to the backend as they are ("direct"); the rest go through an
// aligned bounce buffer. Pure arithmetic, so it is tested on its own.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zoe::io::detail {

struct piece_plan {
  bool direct = false;
  std::size_t buffer_offset = 0;  ///< where the piece starts in the request's buffer
  std::uint64_t file_offset = 0;
  std::size_t length = 0;
};

struct alignment_rule {
  std::size_t offset = 1;  ///< file offsets and lengths (1: buffered, anything goes)
  std::size_t memory = 1;  ///< buffer addresses
  std::size_t chunk = 1;   ///< the largest piece (block_size, a multiple of `offset`)
};

/// Plans a request of `length` bytes at `file_offset` from a buffer at `address`. At most one
/// unaligned head and one unaligned tail piece (each within one alignment block); the middle is
/// cut into chunks, direct when the buffer is aligned in step with the file offset.
[[nodiscard]] std::vector<piece_plan> plan_request(std::uintptr_t address, std::uint64_t file_offset,
                                                   std::size_t length, const alignment_rule& rule);

}  // namespace zoe::io::detail
