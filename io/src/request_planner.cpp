#include "request_planner.hpp"

#include <algorithm>

#include "zoe/core/units.hpp"

namespace zoe::io::detail {

std::vector<piece_plan> plan_request(std::uintptr_t address, std::uint64_t file_offset, std::size_t length,
                                     const alignment_rule& rule) {
  std::vector<piece_plan> pieces;
  const std::uint64_t end = file_offset + length;
  const auto add = [&](bool direct, std::uint64_t begin, std::uint64_t stop) {
    pieces.push_back(
        {direct, static_cast<std::size_t>(begin - file_offset), begin, static_cast<std::size_t>(stop - begin)});
  };

  const std::uint64_t mid_begin = std::min(end, align_up(file_offset, rule.offset));
  const std::uint64_t mid_end = std::max(mid_begin, align_down(end, rule.offset));
  if (file_offset < mid_begin) add(false, file_offset, mid_begin);

  const std::uintptr_t mid_address = address + (mid_begin - file_offset);
  const bool mid_direct = mid_address % rule.memory == 0;
  for (std::uint64_t at = mid_begin; at < mid_end; at += rule.chunk) {
    add(mid_direct, at, std::min<std::uint64_t>(mid_end, at + rule.chunk));
  }

  if (mid_end < end) add(false, mid_end, end);
  return pieces;
}

}  // namespace zoe::io::detail
