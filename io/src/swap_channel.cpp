#include "zoe/io/swap_channel.hpp"

#include <xxhash.h>
// Routes XXH3 to libxxhash's run-time dispatched AVX2/AVX-512 code (same hashes): the baseline
// SSE2 build hashes at ~13 GiB/s, slow enough that verifying on the driving thread cost the
// store 15-20% of a 2.3 GiB/s drive; dispatched it hashes at ~39 GiB/s.
#include <xxh_x86dispatch.h>

#include <cstdlib>
#include <cstring>
#include <limits>

#include "extent_record.hpp"
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
  detail::extent_record* record = nullptr;
  std::uint64_t first_chunk = 0;
  std::uint64_t end_chunk = 0;
  std::vector<std::uint64_t> hashes;  ///< writes: checksums of the chunks being written
  scratch_memory scratch;             ///< partial reads: [0, chunk) the first chunk, [chunk, 2 chunk) the last
  bool head_in_scratch = false;       ///< chunk first_chunk was read whole into scratch
  bool tail_in_scratch = false;       ///< chunk end_chunk - 1 was read whole into scratch + chunk
  std::size_t pieces_left = 0;
  io_completion result;

  /// Ready for the next request; keeps the capacity of hashes. The scratch went back in finish.
  void reset() noexcept {
    request = {};
    record = nullptr;
    first_chunk = end_chunk = 0;
    hashes.clear();
    head_in_scratch = tail_in_scratch = false;
    pieces_left = 0;
    result = {};
  }
};

swap_channel::swap_channel(swap_store& store) : store_(store) {
  for (std::size_t i = 0; i < store_.files_.size(); ++i) {
    engines_.push_back(make_engine(store_.backend_, store_.options().io));
  }
}

swap_channel::~swap_channel() {
  std::vector<io_completion> discard;
  try {
    collect_all(discard);
  } catch (const std::exception& e) {
    log::error("swap channel shutting down with requests in flight: ", e.what());
  }
}

void swap_channel::submit(const swap_request& request) {
  detail::extent_record& rec = store_.record(request.extent);
  const std::uint64_t chunk = store_.stripe_unit();
  const std::uint64_t length = request.buffer.size();
  const std::uint64_t end = request.offset + length;
  ZOE_EXPECTS(request.offset <= rec.bytes && length <= rec.bytes - request.offset, op_name(request.op), " of ",
              length, " bytes at offset ", request.offset, " reaches past the end of swap extent ", rec.id, " (",
              rec.bytes, " bytes)");
  const bool whole_chunks = request.offset % chunk == 0 && (length % chunk == 0 || end == rec.bytes);
  ZOE_EXPECTS(request.op == io_op::read || whole_chunks, "a write into swap extent ", rec.id,
              " must start on a ", chunk, "-byte chunk boundary and cover whole chunks (or end at the extent's end); got ",
              length, " bytes at offset ", request.offset);

  std::uint32_t slot_id = 0;
  if (free_slots_.empty()) {
    slots_.push_back(std::make_unique<pending>());
    slot_id = static_cast<std::uint32_t>(slots_.size() - 1);
  } else {
    slot_id = free_slots_.back();
    free_slots_.pop_back();
    slots_[slot_id]->reset();
  }
  pending& p = *slots_[slot_id];
  p.request = request;
  p.record = &rec;
  p.result.user_data = request.user_data;
  p.first_chunk = request.offset / chunk;
  p.end_chunk = (end + chunk - 1) / chunk;
  const std::uint64_t last = p.end_chunk - 1;  // meaningless for an empty request, which ends here
  ++outstanding_;
  const bool checksums = store_.options().checksums;

  if (length == 0) {
    finish(slot_id, ready_);
    return;
  }
  if (request.op == io_op::write) {
    for (std::uint64_t k = p.first_chunk; k < p.end_chunk; ++k) {
      const std::uint64_t at = k * chunk - request.offset;
      if (checksums) p.hashes.push_back(XXH3_64bits(request.buffer.data() + at, std::min(chunk, length - at)));
      // Until this write is known good the chunk's contents are unknown.
      rec.states[k].store(detail::chunk_state::writing);
    }
  } else {
    for (std::uint64_t k = p.first_chunk; k < p.end_chunk; ++k) {
      const auto state = rec.states[k].load();
      if (state != detail::chunk_state::valid) {
        p.result.failed = true;
        p.result.message = str("read of ", length, " bytes at offset ", request.offset, " of swap extent ", rec.id,
                               " touches chunk ", k, state == detail::chunk_state::unwritten
                                                          ? ", which was never written"
                                                          : ", whose last write failed or is still in flight");
        finish(slot_id, ready_);
        return;
      }
    }
    if (checksums && !whole_chunks) {
      // A partial read still verifies: a first or last chunk it covers only in part is read whole
      // into scratch memory. Only those two can be partial; the chunks between are whole.
      p.head_in_scratch = request.offset > p.first_chunk * chunk || end < chunk_end(rec, p.first_chunk, chunk);
      p.tail_in_scratch = last != p.first_chunk && end < chunk_end(rec, last, chunk);
      if (!take_scratch(p)) {
        p.result.failed = true;
        p.result.message = str("cannot allocate ", format_bytes(2 * chunk), " to verify a partial read of swap extent ",
                               rec.id);
        finish(slot_id, ready_);
        return;
      }
    }
  }

  ++rec.in_flight;
  // Whatever is not read into scratch goes straight between the caller's buffer and the files.
  std::uint64_t direct_begin = request.offset;
  std::uint64_t direct_end = end;
  if (p.head_in_scratch) {
    submit_range(slot_id, p.first_chunk * chunk,
                 {p.scratch.get(), static_cast<std::size_t>(chunk_end(rec, p.first_chunk, chunk) - p.first_chunk * chunk)});
    direct_begin = std::min(end, (p.first_chunk + 1) * chunk);
  }
  if (p.tail_in_scratch) {
    submit_range(slot_id, last * chunk,
                 {p.scratch.get() + chunk, static_cast<std::size_t>(chunk_end(rec, last, chunk) - last * chunk)});
    direct_end = last * chunk;
  }
  if (direct_begin < direct_end) {
    submit_range(slot_id, direct_begin,
                 request.buffer.subspan(direct_begin - request.offset, direct_end - direct_begin));
  }
}

void swap_channel::submit_range(std::uint32_t slot_id, std::uint64_t extent_offset, std::span<std::byte> buffer) {
  pending& p = *slots_[slot_id];
  const detail::stripe_map map{store_.stripe_unit(), engines_.size()};
  map.for_each(p.record->offset + extent_offset, buffer.size(), [&](const detail::stripe_map::piece& piece) {
    ++p.pieces_left;
    engines_[piece.file_index]->submit({p.request.op, store_.files_[piece.file_index].get(),
                                        buffer.subspan(piece.skip, piece.length), piece.file_offset, slot_id});
  });
}

bool swap_channel::take_scratch(pending& p) {
  if (spare_scratch_) {
    p.scratch = std::move(spare_scratch_);
    return true;
  }
  // One spare is kept; only reads in flight together beyond the first need memory of their own.
  const std::uint64_t bytes = align_up(2 * store_.stripe_unit(), scratch_alignment);
  p.scratch.reset(static_cast<std::byte*>(std::aligned_alloc(scratch_alignment, bytes)));
  return p.scratch != nullptr;
}

void swap_channel::on_piece(const io_completion& c, std::vector<io_completion>& out) {
  const auto slot_id = static_cast<std::uint32_t>(c.user_data);
  pending& p = *slots_[slot_id];
  if (c.failed && !p.result.failed) {
    p.result.failed = true;
    p.result.os_errno = c.os_errno;
    p.result.message = c.message;
  }
  if (--p.pieces_left == 0) {
    --p.record->in_flight;
    finish(slot_id, out);
  }
}

void swap_channel::finish(std::uint32_t slot_id, std::vector<io_completion>& out) {
  pending& p = *slots_[slot_id];
  detail::extent_record& rec = *p.record;
  const std::uint64_t chunk = store_.stripe_unit();
  const bool checksums = store_.options().checksums;
  const std::uint64_t last = p.end_chunk - 1;
  if (p.request.op == io_op::write && !p.result.failed) {
    for (std::uint64_t k = p.first_chunk; k < p.end_chunk; ++k) {
      if (checksums) rec.checksums[k].store(p.hashes[k - p.first_chunk]);
      rec.states[k].store(detail::chunk_state::valid);
    }
  }
  if (p.request.op == io_op::read && !p.result.failed && checksums) {
    for (std::uint64_t k = p.first_chunk; k < p.end_chunk; ++k) {
      const std::byte* bytes = k == p.first_chunk && p.head_in_scratch ? p.scratch.get()
                               : k == last && p.tail_in_scratch        ? p.scratch.get() + chunk
                                                                       : p.request.buffer.data() + (k * chunk - p.request.offset);
      if (XXH3_64bits(bytes, chunk_end(rec, k, chunk) - k * chunk) == rec.checksums[k].load()) continue;
      std::uint64_t file_index = 0;
      std::uint64_t file_offset = 0;
      detail::stripe_map{chunk, engines_.size()}.for_each(rec.offset + k * chunk, 1, [&](const auto& piece) {
        file_index = piece.file_index;
        file_offset = piece.file_offset;
      });
      p.result.failed = p.result.corrupt = true;
      p.result.message = str("checksum mismatch in '", store_.files_[file_index]->path().string(), "' at offset ",
                             file_offset, " (chunk ", k, " of swap extent ", rec.id,
                             "): the data read back is not what was written");
      break;
    }
  }
  if (p.request.op == io_op::read && !p.result.failed) {
    // Verified: hand the caller its part of the partial chunks.
    const std::uint64_t end = p.request.offset + p.request.buffer.size();
    if (p.head_in_scratch) {
      const std::uint64_t head_end = std::min(end, (p.first_chunk + 1) * chunk);
      std::memcpy(p.request.buffer.data(), p.scratch.get() + (p.request.offset - p.first_chunk * chunk),
                  head_end - p.request.offset);
    }
    if (p.tail_in_scratch) {
      std::memcpy(p.request.buffer.data() + (last * chunk - p.request.offset), p.scratch.get() + chunk,
                  end - last * chunk);
    }
  }
  p.result.bytes = p.result.failed ? 0 : p.request.buffer.size();
  out.push_back(std::move(p.result));
  if (p.scratch && !spare_scratch_) spare_scratch_ = std::move(p.scratch);
  p.scratch.reset();
  free_slots_.push_back(slot_id);
  --outstanding_;
}

std::size_t swap_channel::collect(std::vector<io_completion>& out, std::size_t min_count, bool block) {
  std::size_t moved = 0;
  for (;;) {
    moved += ready_.size();
    std::move(ready_.begin(), ready_.end(), std::back_inserter(out));
    ready_.clear();
    if (outstanding_ == 0 || (block && moved >= min_count)) return moved;
    bool progressed = false;
    for (auto& engine : engines_) {
      if (engine->outstanding() == 0) continue;
      scratch_completions_.clear();
      engine->poll(scratch_completions_);
      for (const auto& c : scratch_completions_) on_piece(c, ready_);
      progressed = progressed || !scratch_completions_.empty();
    }
    if (progressed) continue;
    if (!block) return moved;
    // Nothing ready anywhere: sleep on one busy queue; the others keep going in the kernel.
    for (auto& engine : engines_) {
      if (engine->outstanding() == 0) continue;
      scratch_completions_.clear();
      engine->wait(scratch_completions_, 1);
      for (const auto& c : scratch_completions_) on_piece(c, ready_);
      break;
    }
  }
}

bool swap_channel::register_buffers(std::span<const std::span<std::byte>> regions) {
  bool used = true;
  for (auto& engine : engines_) used = engine->register_buffers(regions) && used;
  return used;
}

std::string_view swap_channel::backend_name() const noexcept { return engines_.front()->backend_name(); }

std::size_t swap_channel::poll(std::vector<io_completion>& out) { return collect(out, 0, false); }

std::size_t swap_channel::wait(std::vector<io_completion>& out, std::size_t min_count) {
  return collect(out, min_count, true);
}

void swap_channel::run(std::span<const swap_request> requests) {
  for (const auto& r : requests) submit(r);
  // Not until some count: a request that failed or was empty completes inside submit(), and
  // counting it would let run() return before the others finish.
  std::vector<io_completion> done;
  collect_all(done);
  for (const auto& c : done) c.throw_if_failed();
}

}  // namespace zoe::io
