#pragma once
// What an io_engine or swap_channel did, per direction: enough for a bandwidth per direction
// (bytes / busy time) and a mean latency (summed latency / requests). Counted on the driving
// thread with one clock read per request at each end, and readable from any thread.

#include <cstdint>

#include "zoe/io/io_request.hpp"

namespace zoe::io {

struct io_direction_stats {
  std::uint64_t requests = 0;    ///< requests completed, failed ones included
  std::uint64_t bytes = 0;       ///< bytes moved by the requests that succeeded
  std::uint64_t errors = 0;      ///< requests that failed (checksum mismatches included)
  std::uint64_t busy_ns = 0;     ///< time during which at least one request of this direction was outstanding
  std::uint64_t latency_ns = 0;  ///< time from submit to completion, summed over the completed requests

  /// bytes / busy time in GiB/s; 0 before any time was busy.
  [[nodiscard]] double gib_per_s() const noexcept;
  /// Adds another engine's or channel's figures (busy time adds up, as if one after the other).
  io_direction_stats& operator+=(const io_direction_stats& other) noexcept;
};

struct io_stats {
  io_direction_stats read;
  io_direction_stats write;

  [[nodiscard]] const io_direction_stats& of(io_op op) const noexcept { return op == io_op::read ? read : write; }
  io_stats& operator+=(const io_stats& other) noexcept {
    read += other.read;
    write += other.write;
    return *this;
  }
};

}  // namespace zoe::io
