#pragma once
// The drive's time for a step's NVMe bytes: that many bytes read and written through zoe's raw
// path (the I/O engine on O_DIRECT files: no swap store, no checksums, no mover, no copies) at the
// configured queue depth, timed two ways, both directions in flight together (as a step's reads
// and writes share the drive) and the reads alone then the writes alone, and the faster kept: a
// drive may move mixed I/O much slower than either direction alone (a virtual disk did: 3.6 GiB/s
// reads, 7.4 GiB/s writes, about 2 GiB/s mixed), and a step that keeps its directions apart is
// not bound by the mixed time. offload_engine::measure_stages reports it as io_s, the I/O floor of
// a step whatever its schedule (replaying the stages one after the other would overstate it for a
// step that overlaps them).

#include <cstdint>
#include <string_view>

#include "zoe/core/units.hpp"
#include "zoe/io/io_stats.hpp"
#include "zoe/io/swap_store.hpp"

namespace zoe::engine {

struct raw_replay_options {
  /// Bytes of scratch space per direction and swap path at most: a longer replay goes round it
  /// again. Large enough that the drive's own cache cannot hold it (O_DIRECT keeps the kernel's
  /// out), small enough that a folder with room for the swap files has room for it too.
  std::uint64_t scratch_bytes = 2 * GiB;
};

/// The way of a replay that took less time.
enum class raw_replay_way {
  together,  ///< both directions in flight at once
  apart,     ///< the reads alone, then the writes alone
};

struct raw_replay_result {
  double seconds = 0;           ///< the faster way's: min(together_seconds, apart_seconds)
  double together_seconds = 0;  ///< both directions at once, first submit to last completion, every path
  double apart_seconds = 0;     ///< the reads' such span plus the writes' such span
  raw_replay_way fastest = raw_replay_way::together;  ///< the way `seconds` is (together on a tie)
  io::io_stats io;  ///< what the faster way's io engines moved, per direction, summed over the paths
};

/// Reads `read_bytes` and writes `write_bytes` in a scratch file in each of `store`'s folders (one
/// per swap path; each path takes its share as the store stripes, in whole aio.block_size
/// requests), each path through an io engine of its own on a thread of its own: `backend`
/// ("uring", "aio", "posix"; the mover's) at the store's engine options (aio.block_size,
/// aio.queue_depth), wrapped by the store's wrap_backend where it has one; twice, timed: first
/// both directions at once (the next request goes to the direction that is furthest behind its
/// share, so the two run side by side and end together), then the reads alone and, after them,
/// the writes alone, every path starting each of the three phases together. Returns the faster
/// way's time as `seconds` and says which way that was. The scratch files are unlinked from the
/// start (nothing is left behind, even by a killed process), are written once before the clock
/// starts, as the swap files are, so no timed write lands in unwritten extents and no timed read
/// in a hole, and are synced before each phase, so none competes with the flush of the writes
/// before it. Nothing in the store is touched. Zero bytes: no file, 0 seconds.
/// Throws io_error naming the scratch file (ENOSPC when a folder cannot hold it) or the request
/// that failed, after every request in flight has ended; usage_error for a backend not in this
/// build. Thread-safe with the store's own channels (the files are the replay's own).
raw_replay_result replay_raw(const io::swap_store& store, std::string_view backend, std::uint64_t read_bytes,
                             std::uint64_t write_bytes, const raw_replay_options& options = {});

}  // namespace zoe::engine
