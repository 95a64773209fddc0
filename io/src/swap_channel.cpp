#include "zoe/io/swap_channel.hpp"

#include <xxhash.h>
// Routes XXH3 to libxxhash's run-time dispatched AVX2/AVX-512 code (same hashes): the baseline
// SSE2 build hashes at ~13 GiB/s, slow enough that verifying on the driving thread cost the
// store 15-20% of a 2.3 GiB/s drive; dispatched it hashes at ~39 GiB/s. The dispatcher exists
// only on x86; elsewhere the portable XXH3 gives the same hashes.
#if defined(__x86_64__) || defined(__i386__)
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <limits>
#include <optional>

#include "extent_record.hpp"
#include "notifier.hpp"
#include "stats_recorder.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/engine_factory.hpp"
#include "zoe/io/file.hpp"

namespace zoe::io {
namespace {

constexpr std::size_t scratch_alignment = 4096;  // what O_DIRECT asks of memory

/// Where chunk k of the extent ends (the last chunk may be short).
std::uint64_t chunk_end(const detail::extent_record& rec, std::uint64_t k, std::uint64_t chunk) {
  return std::min((k + 1) * chunk, rec.bytes);
}

}  // namespace

struct swap_channel::pending {
  swap_request request;
  std::shared_ptr<detail::extent_record> record;  ///< pinned (in_flight raised) until retire
  std::uint64_t first_chunk = 0;
  std::uint64_t end_chunk = 0;
  std::vector<std::uint64_t> hashes;          ///< writes: checksums of the chunks being written
  std::vector<detail::chunk_state> previous;  ///< writes: the chunk states the claim replaced
  std::span<std::byte> scratch;               ///< partial reads: [0, chunk) the first chunk, [chunk, 2 chunk) the last
  bool head_in_scratch = false;               ///< chunk first_chunk was read whole into scratch
  bool tail_in_scratch = false;               ///< chunk end_chunk - 1 was read whole into scratch + chunk
  bool claimed = false;                       ///< a write holding chunks [first_chunk, end_chunk)
  bool in_run = false;                        ///< run()'s own: its completion goes to run_done_
  bool abandoned = false;                     ///< its submit threw: drained, never reported
  bool unlisted = false;                      ///< in landed_: back from the kernel, not yet listed
  std::chrono::steady_clock::time_point started{};
  std::size_t pieces_issued = 0;
  std::size_t pieces_left = 0;
  io_completion result;

  /// Ready for the next request; keeps the capacity of the vectors. retire gave the rest back.
  void reset() noexcept {
    request = {};
    first_chunk = end_chunk = 0;
    hashes.clear();
    previous.clear();
    head_in_scratch = tail_in_scratch = claimed = in_run = abandoned = unlisted = false;
    pieces_issued = pieces_left = 0;
    result = {};
  }
};

swap_channel::swap_channel(swap_store& store)
    : store_(store),
      notifier_(std::make_unique<detail::notifier>()),
      stats_(std::make_unique<detail::stats_recorder>()),
      // One spare on the heap: only reads in flight together beyond the first need their own.
      scratch_memory_(store.options().io.bounce != nullptr ? store.options().io.bounce : heap_bounce_memory(1)) {
  for (std::size_t i = 0; i < store_.files_.size(); ++i) engines_.push_back(store_.make_engine());
}

swap_channel::~swap_channel() {
  std::vector<io_completion> discard;
  try {
    collect(discard, std::numeric_limits<std::size_t>::max(), true);
    // Pieces of abandoned requests may still be out: wait for them so their extents are unpinned.
    while (std::ranges::any_of(engines_, [](const auto& e) { return e->outstanding() > 0; })) progress(true);
  } catch (const std::exception& e) {
    log::error("swap channel shutting down with requests in flight: ", e.what());
  }
}

void swap_channel::submit(const swap_request& request) {
  start(request, false);
  if (notifier_->enabled()) arm_notification();
}

int swap_channel::notify_fd() const {
  // The engines' fds join the set before the channel's bookkeeping is on, so a waiter woken by
  // the first signal finds every engine reporting.
  std::call_once(notify_once_, [&] {
    for (const auto& engine : engines_) notifier_->watch(engine->notify_fd());
  });
  notifier_->enable();
  return notifier_->fd();
}

void swap_channel::arm_notification() const noexcept {
  // The engines signal for their own results; the channel for what it finished or has yet to
  // verify, which the next poll hands out.
  if (!ready_.empty() || !completed_.empty()) notifier_->signal();
}

void swap_channel::run(std::span<const swap_request> requests) {
  run_done_.clear();
  try {
    for (const auto& r : requests) start(r, true);
  } catch (...) {
    // The requests before the one that threw may be in flight in the caller's buffers, which the
    // caller frees as the exception unwinds: wait for them first.
    try {
      run_until_done();
    } catch (const std::exception& e) {
      log::error("swap channel: waiting for a failed run's requests failed too: ", e.what());
      abandon_run();
    }
    run_done_.clear();
    throw;
  }
  try {
    run_until_done();
  } catch (...) {
    // An engine failed under the wait: this run's requests must not be counted or reported by
    // a later run().
    abandon_run();
    throw;
  }
  std::vector<io_completion> done;
  done.swap(run_done_);
  for (const auto& c : done) c.throw_if_failed();
}

std::uint32_t swap_channel::take_slot() {
  if (free_slots_.empty()) {
    // retire() must not allocate: room for every slot to be free at once.
    free_slots_.reserve(slots_.size() + 1);
    slots_.push_back(std::make_unique<pending>());
    return static_cast<std::uint32_t>(slots_.size() - 1);
  }
  const std::uint32_t slot_id = free_slots_.back();
  free_slots_.pop_back();
  slots_[slot_id]->reset();
  return slot_id;
}

void swap_channel::start(const swap_request& request, bool in_run) {
  const std::uint32_t slot_id = take_slot();
  pending& p = *slots_[slot_id];
  p.in_run = in_run;
  bool needs_io = false;
  try {
    needs_io = prepare(p, request);
  } catch (...) {
    retire(slot_id);
    throw;
  }
  ++(in_run ? run_left_ : outstanding_);
  p.started = std::chrono::steady_clock::now();
  stats_->started(p.request.op, p.started);
  if (!needs_io) {
    finish(slot_id);
    return;
  }
  try {
    issue(slot_id);
    // Hand the pieces to the kernel now rather than at the next wait: the drive starts on this
    // request while the caller prepares the next, and a write is hashed while it is in flight
    // (its buffer stays untouched until its completion is returned).
    progress(false);
  } catch (...) {
    // Some pieces may have reached the engines: the caller's buffer stays in use until they are
    // back, and the request must neither be reported nor leave its counts raised.
    --(in_run ? run_left_ : outstanding_);
    drain_abandoned(slot_id);
    throw;
  }
  if (p.request.op == io_op::write && store_.options().checksums) {
    const std::uint64_t chunk = store_.stripe_unit();
    const std::uint64_t length = p.request.buffer.size();
    for (std::uint64_t k = p.first_chunk; k < p.end_chunk; ++k) {
      const std::uint64_t at = k * chunk - p.request.offset;
      p.hashes.push_back(XXH3_64bits(p.request.buffer.data() + at, std::min(chunk, length - at)));
    }
  }
}

bool swap_channel::prepare(pending& p, const swap_request& request) {
  p.record = store_.pin(request.extent);
  detail::extent_record& rec = *p.record;
  const std::uint64_t chunk = store_.stripe_unit();
  const std::uint64_t length = request.buffer.size();
  const std::uint64_t end = request.offset + length;
  ZOE_EXPECTS(request.offset <= rec.bytes && length <= rec.bytes - request.offset, op_name(request.op), " of ", length,
              " bytes at offset ", request.offset, " reaches past the end of swap extent ", rec.id, " (", rec.bytes,
              " bytes)");
  const bool whole_chunks = request.offset % chunk == 0 && (length % chunk == 0 || end == rec.bytes);
  ZOE_EXPECTS(request.op == io_op::read || whole_chunks, "a write into swap extent ", rec.id, " must start on a ",
              chunk, "-byte chunk boundary and cover whole chunks (or end at the extent's end); got ", length,
              " bytes at offset ", request.offset);
  p.request = request;
  p.result.user_data = request.user_data;
  p.first_chunk = request.offset / chunk;
  p.end_chunk = (end + chunk - 1) / chunk;
  if (length == 0) return false;
  const bool checksums = store_.options().checksums;
  if (request.op == io_op::write) {
    // The message (and so *busy) is built only when the claim failed.
    const std::optional<std::uint64_t> busy = rec.claim_for_write(p.first_chunk, p.end_chunk, p.previous);
    ZOE_EXPECTS(!busy, "write of ", length, " bytes at offset ", request.offset, " of swap extent ", rec.id,
                " overlaps another write still in flight there (chunk ", *busy, "): two writers of one chunk");
    p.claimed = true;
    // Hashed once the write is on its way (see start); room now, so that cannot throw.
    if (checksums) p.hashes.reserve(p.end_chunk - p.first_chunk);
    return true;
  }
  for (std::uint64_t k = p.first_chunk; k < p.end_chunk; ++k) {
    const auto state = rec.states[k].load(std::memory_order_acquire);
    if (state == detail::chunk_state::valid) continue;
    p.result.failed = true;
    p.result.message =
        str("read of ", length, " bytes at offset ", request.offset, " of swap extent ", rec.id, " touches chunk ", k,
            state == detail::chunk_state::unwritten ? ", which was never written"
            : state == detail::chunk_state::writing ? ", whose write is still in flight"
                                                    : ", whose last write failed (contents unknown)");
    return false;
  }
  if (checksums && !whole_chunks) {
    // A partial read still verifies: a first or last chunk it covers only in part is read whole
    // into scratch memory. Only those two can be partial; the chunks between are whole.
    const std::uint64_t last = p.end_chunk - 1;
    p.head_in_scratch = request.offset > p.first_chunk * chunk || end < chunk_end(rec, p.first_chunk, chunk);
    p.tail_in_scratch = last != p.first_chunk && end < chunk_end(rec, last, chunk);
    if (!take_scratch(p)) {
      p.result.failed = true;
      p.result.message = str("cannot get ", format_bytes(2 * chunk), " of scratch memory (",
                             store_.options().io.bounce ? "the caller's" : "heap",
                             " bounce memory has none) to verify a partial read of swap extent ", rec.id);
      return false;
    }
  }
  return true;
}

void swap_channel::issue(std::uint32_t slot_id) {
  pending& p = *slots_[slot_id];
  const detail::extent_record& rec = *p.record;
  const std::uint64_t chunk = store_.stripe_unit();
  const std::uint64_t end = p.request.offset + p.request.buffer.size();
  const std::uint64_t last = p.end_chunk - 1;
  // Whatever is not read into scratch goes straight between the caller's buffer and the files.
  std::uint64_t direct_begin = p.request.offset;
  std::uint64_t direct_end = end;
  if (p.head_in_scratch) {
    submit_range(
        slot_id, p.first_chunk * chunk,
        {p.scratch.data(), static_cast<std::size_t>(chunk_end(rec, p.first_chunk, chunk) - p.first_chunk * chunk)});
    direct_begin = std::min(end, (p.first_chunk + 1) * chunk);
  }
  if (p.tail_in_scratch) {
    submit_range(slot_id, last * chunk,
                 {p.scratch.data() + chunk, static_cast<std::size_t>(chunk_end(rec, last, chunk) - last * chunk)});
    direct_end = last * chunk;
  }
  if (direct_begin < direct_end) {
    submit_range(slot_id, direct_begin,
                 p.request.buffer.subspan(direct_begin - p.request.offset, direct_end - direct_begin));
  }
}

void swap_channel::submit_range(std::uint32_t slot_id, std::uint64_t extent_offset, std::span<std::byte> buffer) {
  pending& p = *slots_[slot_id];
  const detail::stripe_map map{store_.stripe_unit(), engines_.size()};
  map.for_each(p.record->offset + extent_offset, buffer.size(), [&](const detail::stripe_map::piece& piece) {
    engines_[piece.file_index]->submit({p.request.op, store_.files_[piece.file_index].get(),
                                        buffer.subspan(piece.skip, piece.length), piece.file_offset, slot_id});
    // Counted once the engine took it: a piece whose submit threw never comes back.
    ++p.pieces_issued;
    ++p.pieces_left;
  });
}

bool swap_channel::take_scratch(pending& p) {
  const std::uint64_t bytes = 2 * store_.stripe_unit();
  p.scratch = scratch_memory_->lend(bytes, scratch_alignment);
  if (p.scratch.size() >= bytes) return true;
  if (!p.scratch.empty()) scratch_memory_->take_back(p.scratch);
  p.scratch = {};
  return false;
}

void swap_channel::on_piece(const io_completion& c) {
  const auto slot_id = static_cast<std::uint32_t>(c.user_data);
  pending& p = *slots_[slot_id];
  if (c.failed && !p.result.failed) {
    p.result.failed = true;
    p.result.os_errno = c.os_errno;
    p.result.message = c.message;
  }
  if (--p.pieces_left > 0) return;
  if (p.abandoned) {
    retire(slot_id);
  } else {
    // Verified later, one by one as completions are handed out, so that a caller who resubmits
    // on each completion keeps the drive busy instead of waiting for a whole batch's hashing.
    completed_.push_back(slot_id);
    // run()'s own requests are never handed out, so never listed either.
    if (!p.in_run) {
      landed_.push_back(slot_id);
      p.unlisted = true;
    }
  }
}

void swap_channel::finish_completed(std::size_t n) {
  for (; n > 0 && !completed_.empty(); --n) {
    const std::uint32_t slot_id = completed_.front();
    completed_.pop_front();
    finish(slot_id);
  }
}

void swap_channel::finish(std::uint32_t slot_id) {
  pending& p = *slots_[slot_id];
  const detail::extent_record& rec = *p.record;
  const std::uint64_t chunk = store_.stripe_unit();
  const bool checksums = store_.options().checksums;
  const std::uint64_t last = p.end_chunk - 1;
  if (p.claimed) {
    p.record->release_write(p.first_chunk, p.end_chunk, !p.result.failed, checksums ? p.hashes.data() : nullptr);
    p.claimed = false;
  }
  if (p.request.op == io_op::read && !p.result.failed && checksums) {
    for (std::uint64_t k = p.first_chunk; k < p.end_chunk; ++k) {
      const std::byte* bytes = k == p.first_chunk && p.head_in_scratch ? p.scratch.data()
                               : k == last && p.tail_in_scratch
                                   ? p.scratch.data() + chunk
                                   : p.request.buffer.data() + (k * chunk - p.request.offset);
      if (XXH3_64bits(bytes, chunk_end(rec, k, chunk) - k * chunk) ==
          rec.checksums[k].load(std::memory_order_relaxed)) {
        continue;
      }
      std::uint64_t file_index = 0;
      std::uint64_t file_offset = 0;
      detail::stripe_map{chunk, engines_.size()}.for_each(rec.offset + k * chunk, 1, [&](const auto& piece) {
        file_index = piece.file_index;
        file_offset = piece.file_offset;
      });
      p.result.failed = p.result.corrupt = true;
      p.result.message =
          str("checksum mismatch in '", store_.files_[file_index]->path().string(), "' at offset ", file_offset,
              " (chunk ", k, " of swap extent ", rec.id, "): the data read back is not what was written");
      break;
    }
  }
  if (p.request.op == io_op::read && !p.result.failed) {
    // Verified: hand the caller its part of the partial chunks.
    const std::uint64_t end = p.request.offset + p.request.buffer.size();
    if (p.head_in_scratch) {
      const std::uint64_t head_end = std::min(end, (p.first_chunk + 1) * chunk);
      std::memcpy(p.request.buffer.data(), p.scratch.data() + (p.request.offset - p.first_chunk * chunk),
                  head_end - p.request.offset);
    }
    if (p.tail_in_scratch) {
      std::memcpy(p.request.buffer.data() + (last * chunk - p.request.offset), p.scratch.data() + chunk,
                  end - last * chunk);
    }
  }
  p.result.bytes = p.result.failed ? 0 : p.request.buffer.size();
  stats_->finished(p.request.op, p.started, std::chrono::steady_clock::now(), p.result.bytes, p.result.failed);
  if (p.in_run) {
    run_done_.push_back(std::move(p.result));
    --run_left_;
  } else {
    ready_.push_back(std::move(p.result));
  }
  retire(slot_id);
}

void swap_channel::retire(std::uint32_t slot_id) noexcept {
  pending& p = *slots_[slot_id];
  if (p.claimed) {
    // Abandoned, or refused before it started: what reached the drive is unknown; if nothing
    // did, the chunks still hold what they held.
    if (p.pieces_issued == 0) {
      p.record->restore(p.first_chunk, p.first_chunk + p.previous.size(), p.previous);
    } else {
      p.record->release_write(p.first_chunk, p.end_chunk, false, nullptr);
    }
    p.claimed = false;
  }
  if (p.unlisted) {
    std::erase(landed_, slot_id);
    p.unlisted = false;
  }
  if (p.record) {
    p.record->in_flight.fetch_sub(1, std::memory_order_release);
    p.record.reset();
  }
  if (!p.scratch.empty()) scratch_memory_->take_back(p.scratch);
  p.scratch = {};
  free_slots_.push_back(slot_id);  // capacity reserved in take_slot
}

bool swap_channel::progress(bool block) {
  bool progressed = false;
  // With the notifier on, idle engines are polled too: that is what makes their fds unreadable
  // again after a late signal (the first notify_fd(), a thread pool's write after the last
  // reap), which would otherwise keep the channel's fd readable and its event loop spinning.
  const bool poll_idle = notifier_->enabled();
  for (auto& engine : engines_) {
    if (engine->outstanding() == 0 && !poll_idle) continue;
    piece_completions_.clear();
    engine->poll(piece_completions_);
    for (const auto& c : piece_completions_) on_piece(c);
    progressed = progressed || !piece_completions_.empty();
  }
  if (progressed || !block) return progressed;
  // Nothing ready anywhere: sleep on one busy queue; the others keep going in the kernel.
  for (auto& engine : engines_) {
    if (engine->outstanding() == 0) continue;
    piece_completions_.clear();
    engine->wait(piece_completions_, 1);
    for (const auto& c : piece_completions_) on_piece(c);
    return true;
  }
  throw internal_error("swap channel waits for requests, but none of its engines has anything in flight");
}

void swap_channel::run_until_done() {
  while (run_left_ > 0) {
    if (completed_.empty()) {
      progress(true);
    } else {
      finish_completed(completed_.size());
    }
  }
}

bool swap_channel::abandon(std::uint32_t slot_id) noexcept {
  pending& p = *slots_[slot_id];
  stats_->withdrawn(p.request.op, std::chrono::steady_clock::now());
  p.abandoned = true;
  p.in_run = false;
  if (p.pieces_left > 0) return false;  // on_piece retires it when its last piece is back
  // It may have come back whole before the step that threw, and be queued to finish.
  std::erase(completed_, slot_id);
  retire(slot_id);
  return true;
}

void swap_channel::abandon_run() noexcept {
  for (std::uint32_t slot_id = 0; slot_id < slots_.size(); ++slot_id) {
    if (slots_[slot_id]->in_run && std::ranges::find(free_slots_, slot_id) == free_slots_.end()) abandon(slot_id);
  }
  run_left_ = 0;
  run_done_.clear();
}

void swap_channel::drain_abandoned(std::uint32_t slot_id) noexcept {
  pending& p = *slots_[slot_id];
  if (abandon(slot_id)) return;
  try {
    while (p.pieces_left > 0) progress(true);
  } catch (const std::exception& e) {
    log::error("swap channel: waiting for the started part of a request whose submit failed: ", e.what());
  }
}

std::size_t swap_channel::collect(std::vector<io_completion>& out, std::size_t min_count, bool block) {
  // These callers do not ask which requests came back: nothing is left to list.
  for (const std::uint32_t slot_id : landed_) slots_[slot_id]->unlisted = false;
  landed_.clear();
  if (!notifier_->enabled()) return collect_loop(out, min_count, block);
  notifier_->clear();
  const std::size_t moved = collect_loop(out, min_count, block);
  // With nothing outstanding the loop polled no engine: one round quiets their fds (progress).
  if (outstanding_ == 0) progress(false);
  arm_notification();
  return moved;
}

std::size_t swap_channel::collect_loop(std::vector<io_completion>& out, std::size_t min_count, bool block) {
  std::size_t moved = 0;
  for (;;) {
    moved += hand_out(out);
    if (outstanding_ == 0 || (block && moved >= min_count)) return moved;
    if (!completed_.empty()) {
      finish_completed(block ? min_count - moved : completed_.size());
      continue;
    }
    if (!progress(block) && completed_.empty()) return moved;
  }
}

std::size_t swap_channel::hand_out(std::vector<io_completion>& out) {
  const std::size_t n = ready_.size();
  outstanding_ -= n;
  std::move(ready_.begin(), ready_.end(), std::back_inserter(out));
  ready_.clear();
  return n;
}

std::size_t swap_channel::poll(std::vector<io_completion>& out, std::vector<std::uint64_t>& landed) {
  const bool notify = notifier_->enabled();
  if (notify) notifier_->clear();
  // Polls every engine even with nothing outstanding: with the notifier on, that quiets their fds.
  progress(false);
  // Hashes only what earlier calls listed (their callers had their chance to start the next
  // requests): all of it when nothing new came back; one when something did, so that the refill
  // for what just came back waits for little hashing, and the hashing for no stream of refills.
  // Listed slots are a prefix of completed_: both go in the order the requests came back.
  for (std::size_t n = landed_.empty() ? completed_.size() : 1;
       n > 0 && !completed_.empty() && !slots_[completed_.front()]->unlisted; --n) {
    finish_completed(1);
  }
  for (const std::uint32_t slot_id : landed_) {
    slots_[slot_id]->unlisted = false;
    landed.push_back(slots_[slot_id]->request.user_data);
  }
  landed_.clear();
  const std::size_t moved = hand_out(out);
  if (notify) arm_notification();
  return moved;
}

bool swap_channel::register_buffers(std::span<const std::span<std::byte>> regions) {
  bool used = true;
  for (auto& engine : engines_) used = engine->register_buffers(regions) && used;
  return used;
}

io_stats swap_channel::stats() const noexcept { return stats_->snapshot(); }

std::string_view swap_channel::backend_name() const noexcept { return engines_.front()->backend_name(); }

std::size_t swap_channel::poll(std::vector<io_completion>& out) { return collect(out, 0, false); }

std::size_t swap_channel::wait(std::vector<io_completion>& out, std::size_t min_count) {
  return collect(out, min_count, true);
}

std::size_t swap_channel::wait(std::vector<io_completion>& out, std::size_t min_count,
                               std::chrono::nanoseconds timeout) {
  const auto deadline = detail::deadline_after(timeout);
  static_cast<void>(notify_fd());
  return detail::poll_until(
      notifier_->fd(), deadline, min_count, [&] { return collect(out, 0, false); }, [&] { return outstanding_; });
}

}  // namespace zoe::io
