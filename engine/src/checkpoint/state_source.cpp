#include "state_source.hpp"

#include <algorithm>

#include "checkpoint_format.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"

namespace zoe::engine::detail {

namespace {
// Pieces handed out ahead of the caller: one being written, one ready behind it.
constexpr std::size_t queue_limit = 2;

std::uint64_t largest_staged_state(const tier_manager& tiers, const std::vector<state_kind>& states, std::size_t rank) {
  std::uint64_t largest = 0;
  for (const parameter_layout& p : tiers.layout().parameters()) {
    for (const state_kind s : states) {
      if (tiers.location(p.id, s).where != tier::host) largest = std::max(largest, shard_real_bytes(p, s, rank));
    }
  }
  return largest;
}
}  // namespace

state_source::state_source(tier_manager& tiers, state_io& io, std::vector<state_kind> states, std::size_t piece,
                           std::size_t rank)
    : tiers_(tiers), io_(io), states_(std::move(states)), piece_bytes_(piece), rank_(rank) {
  ZOE_EXPECTS(piece > 0, "state_source: pieces of 0 bytes");
  const std::uint64_t largest = std::min<std::uint64_t>(largest_staged_state(tiers, states_, rank_), piece);
  if (largest > 0) {
    for (int b = 0; b < 2; ++b) {
      buffers_[b] = aligned_buffer(static_cast<std::size_t>(largest));
      free_buffers_.push_back(b);
    }
  }
  thread_ = std::jthread([this] { produce(); });
}

state_source::~state_source() {
  {
    const std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
  if (current_) release(*current_);
  for (const held& h : ready_) release(h);
}

std::optional<state_piece> state_source::next() {
  if (current_) {
    release(*current_);
    current_.reset();
  }
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return !ready_.empty() || done_; });
  if (ready_.empty()) {
    if (error_) std::rethrow_exception(error_);
    return std::nullopt;
  }
  current_ = ready_.front();
  ready_.pop_front();
  lock.unlock();
  changed_.notify_all();
  return current_->piece;
}

void state_source::produce() noexcept {
  try {
    read_all();
  } catch (...) {
    const std::lock_guard lock(mutex_);
    error_ = std::current_exception();
  }
  {
    const std::lock_guard lock(mutex_);
    done_ = true;
  }
  changed_.notify_all();
}

void state_source::read_all() {
  for (const state_kind s : states_) {
    for (const parameter_layout& p : tiers_.layout().parameters()) {
      const std::uint64_t real = shard_real_bytes(p, s, rank_);
      if (real == 0) continue;
      const state_location& home = tiers_.location(p.id, s);
      const bool in_place = home.where == tier::host;
      // In place: one piece, the whole state. Otherwise pieces of one staging buffer.
      for (std::uint64_t offset = 0; offset < real;) {
        const std::uint64_t n = in_place ? real : std::min<std::uint64_t>(piece_bytes_, real - offset);
        held h{{s, p.id, {}}, -1};
        {
          std::unique_lock lock(mutex_);
          changed_.wait(lock,
                        [&] { return stop_ || (ready_.size() < queue_limit && (in_place || !free_buffers_.empty())); });
          if (stop_) return;
          if (!in_place) {
            h.buffer = free_buffers_.back();
            free_buffers_.pop_back();
          }
        }
        if (in_place) {
          // The read move keeps every mover from writing the home while the caller reads it.
          ZOE_EXPECTS(tiers_.begin_move(p.id, s, move_kind::read), "cannot save the ", state_kind_name(s),
                      " state of parameter '", p.name, "': another move has it in flight");
          h.piece.bytes = home.host.first(static_cast<std::size_t>(real));
        } else {
          const std::span<std::byte> staging = buffers_[h.buffer].span().first(static_cast<std::size_t>(n));
          try {
            io_.read(p.id, s, offset, staging);
          } catch (...) {
            release(h);
            throw;
          }
          h.piece.bytes = staging;
        }
        offset += n;
        {
          const std::lock_guard lock(mutex_);
          ready_.push_back(h);
        }
        changed_.notify_all();
      }
    }
  }
}

void state_source::release(const held& h) noexcept {
  if (h.buffer >= 0) {
    {
      const std::lock_guard lock(mutex_);
      free_buffers_.push_back(h.buffer);
    }
    changed_.notify_all();
    return;
  }
  try {
    tiers_.finish_move(h.piece.param, h.piece.state);
  } catch (const std::exception& e) {
    log::error("checkpoint save: cannot end the read of the ", state_kind_name(h.piece.state), " state of parameter ",
               h.piece.param, ": ", e.what());
  }
}

}  // namespace zoe::engine::detail
