#pragma once
// The read side of a save: a thread that takes the real bytes of every saved state of this rank's
// shard of every parameter, in file order, while the caller writes (or sends) the piece before. A state whose home is
// host memory is handed out whole and in place (held by a read move of the tier manager until the caller is done with
// it); any other is read through state_io in pieces of at most piece_bytes into one of two staging buffers, so a save
// holds two pieces of staging memory whatever the size of a state: the one the caller writes and the one being read.

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "aligned_buffer.hpp"
#include "zoe/engine/swap/state_io.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"

namespace zoe::engine::detail {

/// Consecutive real (unpadded) bytes of one state of one parameter.
struct state_piece {
  state_kind state = state_kind::master;
  parameter_id param = 0;
  std::span<const std::byte> bytes;
};

/// Driven by one thread (the caller's); `io` belongs to the source's own thread from construction
/// to destruction.
class state_source {
 public:
  /// Starts reading the states `states` (in that order) of every parameter whose shard of rank
  /// `rank` has real bytes in it (shard_real_bytes), in pieces of at most `piece_bytes` (> 0), each
  /// starting at a multiple of piece_bytes in the state, where they are not in host memory (there
  /// one piece holds the state's real bytes). Throws memory_error when the staging buffers cannot
  /// be had.
  state_source(tier_manager& tiers, state_io& io, std::vector<state_kind> states, std::size_t piece_bytes,
               std::size_t rank);
  /// Stops the reading thread and lets go of every piece. Never throws.
  ~state_source();
  state_source(const state_source&) = delete;
  state_source& operator=(const state_source&) = delete;

  /// Lets go of the piece returned last, then returns the next one in order, or nullopt after the
  /// last. Rethrows what reading a state threw (usage_error for a state in flight, io_error or
  /// corruption_error from state_io), once the pieces before it have been taken.
  [[nodiscard]] std::optional<state_piece> next();

 private:
  struct held {
    state_piece piece;
    int buffer = -1;  ///< the staging buffer it is in; -1: in place in its host home
  };
  void produce() noexcept;
  void read_all();
  /// Frees the piece's buffer or ends its read move. Never throws (a refused transition is logged).
  void release(const held& h) noexcept;

  tier_manager& tiers_;
  state_io& io_;
  std::vector<state_kind> states_;
  std::size_t piece_bytes_;
  std::size_t rank_;
  aligned_buffer buffers_[2];

  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<held> ready_;
  std::vector<int> free_buffers_;
  bool stop_ = false;
  bool done_ = false;
  std::exception_ptr error_;

  std::optional<held> current_;  // the caller's
  std::jthread thread_;          // last: starts once everything above exists
};

}  // namespace zoe::engine::detail
