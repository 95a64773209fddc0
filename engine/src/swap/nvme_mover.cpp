#include "nvme_mover.hpp"

#include <algorithm>
#include <utility>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"

namespace zoe::engine::detail {

namespace {
// How long the I/O thread sleeps on the drive before it looks at finished copies again.
constexpr std::chrono::microseconds idle_poll{200};
}  // namespace

nvme_mover::nvme_mover(tier_manager& tiers, device& dev, io::swap_store& store, allocators::buffer_pool& pool,
                       std::size_t piece_bytes)
    : tiers_(tiers),
      dev_(dev),
      store_(store),
      pool_(pool),
      piece_bytes_(piece_bytes),
      in_stream_(dev.create_stream()),
      out_stream_(dev.create_stream()),
      thread_([this] { run(); }) {}

nvme_mover::~nvme_mover() {
  {
    const std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void nvme_mover::enqueue(std::unique_ptr<nvme_move> move) {
  {
    const std::lock_guard lock(mutex_);
    queued_.push_back(std::move(move));
  }
  wake_.notify_one();
}

void nvme_mover::add_stats(parameter_swapper_stats& out) const {
  const std::lock_guard lock(mutex_);
  out.bytes_read += stats_.bytes_read;
  out.bytes_written += stats_.bytes_written;
  out.bytes_staged += stats_.bytes_staged;
  out.moves_in += stats_.moves_in;
  out.moves_out += stats_.moves_out;
  out.failed_moves += stats_.failed_moves;
  out.buffer_waits += stats_.buffer_waits;
  // The pool records the fewest free buffers it has seen: the peak in use, without a lock per piece here.
  out.peak_buffers_in_use = std::max(out.peak_buffers_in_use, pool_.buffer_count() - pool_.stats().min_available);
  out.io_busy_seconds += stats_.io_busy_seconds;
  out.threads += 1;
}

std::string nvme_mover::backend_name() const {
  const std::lock_guard lock(mutex_);
  return backend_;
}

void nvme_mover::run() noexcept {
  try {
    // The channel lives and dies on this thread: its io_uring ring has one issuer.
    io::swap_channel channel(store_);
    {
      const std::lock_guard lock(mutex_);
      backend_ = channel.backend_name();
    }
    // The slots are one allocation: registered as one region (io_uring takes at most 1024).
    const auto slots = pool_.buffers();
    const std::span<std::byte> region[] = {
        {slots.front().data(),
         static_cast<std::size_t>(slots.back().data() + slots.back().size() - slots.front().data())}};
    channel.register_buffers(region);
    loop(channel);
    return;
  } catch (...) {
    // The channel is gone (its destructor waited for its requests), so no read or write uses a
    // buffer any more; the device copies may, until the streams are done with them.
    const carried_error broken = carried_error::of(std::current_exception());
    try {
      dev_.synchronize(in_stream_.view());
      dev_.synchronize(out_stream_.view());
    } catch (const std::exception& e) {
      log::error("parameter swapper: the device failed while its I/O thread stopped: ", e.what());
    }
    pieces_.clear();
    copies_out_ = 0;
    // Every move from now on fails with the error that stopped the thread.
    for (;;) {
      take_queued();
      for (auto& m : moves_) {
        if (!m->failure) m->failure = broken;
        m->pieces_out = 0;
        finish(*m);
      }
      moves_.clear();
      std::unique_lock lock(mutex_);
      if (stopping_ && queued_.empty()) return;
      wake_.wait(lock, [&] { return !queued_.empty() || stopping_; });
    }
  }
}

void nvme_mover::loop(io::swap_channel& channel) {
  while (take_queued()) {
    bool progressed = reap_copies(channel);
    progressed |= start_pieces(channel);
    if (channel.outstanding() > 0) {
      done_.clear();
      if (channel.poll(done_) > 0) {
        on_io(done_);
        progressed = true;
      }
    }
    progressed |= finish_moves();
    note_busy(channel);
    if (progressed) continue;
    // Nothing moved on: sleep on whatever can change next.
    if (channel.outstanding() > 0) {
      // Copies finishing meanwhile free slots the next pieces need: while any runs, wake now and
      // then to see, instead of only at the next completion.
      done_.clear();
      if (copies_out_ > 0) {
        channel.wait(done_, 1, idle_poll);
      } else {
        channel.wait(done_, 1);
      }
      on_io(done_);
    } else if (copies_out_ > 0) {
      const auto oldest = std::find_if(pieces_.begin(), pieces_.end(), [](const piece& p) {
        return p.lease && (p.at == stage::copying_in || p.at == stage::copying_out);
      });
      dev_.synchronize(oldest->copied);
    } else {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return !queued_.empty() || stopping_; });
    }
  }
}

bool nvme_mover::take_queued() {
  const std::lock_guard lock(mutex_);
  for (auto& m : queued_) moves_.push_back(std::move(m));
  queued_.clear();
  return !(stopping_ && moves_.empty() && copies_out_ == 0);
}

bool nvme_mover::start_pieces(io::swap_channel& channel) {
  bool started = false;
  for (auto& owned : moves_) {
    nvme_move& m = *owned;
    while (!m.failure && m.issued < m.bytes) {
      std::optional<allocators::buffer_lease> lease = pool_.try_acquire();
      if (!lease) {
        // Back-pressure: later moves wait too, so buffers go out in the order moves were asked for.
        if (!stalled_) {
          stalled_ = true;
          const std::lock_guard lock(mutex_);
          ++stats_.buffer_waits;
        }
        return started;
      }
      stalled_ = false;
      std::size_t slot = 0;
      if (free_pieces_.empty()) {
        slot = pieces_.size();
        pieces_.emplace_back();
      } else {
        slot = free_pieces_.back();
        free_pieces_.pop_back();
      }
      piece& p = pieces_[slot];
      p.move = &m;
      p.offset = m.issued;
      p.bytes = static_cast<std::size_t>(std::min<std::uint64_t>(piece_bytes_, m.bytes - m.issued));
      p.lease = std::move(*lease);
      m.issued += p.bytes;
      ++m.pieces_out;
      started = true;
      if (m.op == io::io_op::read) {
        p.at = stage::reading;
        submit(channel, slot, io::io_op::read);
      } else {
        start_copy(p, copy_kind::device_to_host, out_stream_.view(), stage::copying_out);
      }
    }
  }
  return started;
}

void nvme_mover::submit(io::swap_channel& channel, std::size_t slot, io::io_op op) {
  piece& p = pieces_[slot];
  nvme_move& m = *p.move;
  try {
    channel.submit({op, m.extent, p.offset, p.lease.span().first(p.bytes), slot});
  } catch (...) {
    // Refused with nothing in flight: the piece ends here and the move fails.
    fail(m, p.offset, nullptr, std::current_exception());
    piece_done(slot);
  }
}

void nvme_mover::start_copy(piece& p, copy_kind kind, stream_view stream, stage next) {
  std::byte* at_device = p.move->device + p.offset;
  if (kind == copy_kind::host_to_device) {
    dev_.copy_async(at_device, p.lease.data(), p.bytes, kind, stream);
  } else {
    dev_.copy_async(p.lease.data(), at_device, p.bytes, kind, stream);
  }
  if (!p.copied.valid()) p.copied = dev_.create_event();
  dev_.record(p.copied, stream);
  p.at = next;
  ++copies_out_;
  const std::lock_guard lock(mutex_);
  stats_.bytes_staged += p.bytes;
}

bool nvme_mover::reap_copies(io::swap_channel& channel) {
  if (copies_out_ == 0) return false;
  bool reaped = false;
  for (std::size_t slot = 0; slot < pieces_.size(); ++slot) {
    piece& p = pieces_[slot];
    const bool copying = p.lease && (p.at == stage::copying_in || p.at == stage::copying_out);
    if (!copying || !dev_.query(p.copied)) continue;
    --copies_out_;
    reaped = true;
    if (p.at == stage::copying_in) {
      // The device has the piece: the buffer may take the next one.
      p.lease.release();
      free_pieces_.push_back(slot);
    } else if (p.move->failure) {
      piece_done(slot);  // another piece of the move failed: writing this one would not save it
    } else {
      p.at = stage::writing;
      submit(channel, slot, io::io_op::write);
    }
  }
  return reaped;
}

void nvme_mover::on_io(const std::vector<io::io_completion>& done) {
  for (const io::io_completion& c : done) {
    const auto slot = static_cast<std::size_t>(c.user_data);
    piece& p = pieces_[slot];
    nvme_move& m = *p.move;
    if (!c.ok()) {
      fail(m, p.offset, &c, nullptr);
      piece_done(slot);
      continue;
    }
    if (p.at == stage::reading) {
      {
        const std::lock_guard lock(mutex_);
        stats_.bytes_read += p.bytes;
      }
      if (m.failure) {
        piece_done(slot);  // another piece failed: the move is lost, do not copy more of it
        continue;
      }
      start_copy(p, copy_kind::host_to_device, in_stream_.view(), stage::copying_in);
      // From here the piece needs only its buffer and its event; the move may finish first.
      p.move = nullptr;
      --m.pieces_out;
    } else {
      {
        const std::lock_guard lock(mutex_);
        stats_.bytes_written += p.bytes;
      }
      piece_done(slot);
    }
  }
}

void nvme_mover::piece_done(std::size_t slot) {
  piece& p = pieces_[slot];
  --p.move->pieces_out;
  p.move = nullptr;
  p.lease.release();
  free_pieces_.push_back(slot);
}

void nvme_mover::fail(nvme_move& m, std::uint64_t offset, const io::io_completion* c, std::exception_ptr e) {
  if (m.failure) return;  // the first failure is the one to report
  const std::string where = str(m.op == io::io_op::read ? "reading " : "writing ", m.what, " (", m.bytes, " bytes) ",
                                m.op == io::io_op::read ? "from" : "to", " swap extent ", m.extent.id,
                                " failed at byte ", offset, " of the extent: ");
  if (c != nullptr) {
    m.failure =
        carried_error{c->corrupt ? error_category::corrupt : error_category::io, c->os_errno, where + c->message};
    return;
  }
  carried_error cause = carried_error::of(e);
  m.failure = carried_error{error_category::io, cause.os_errno, where + cause.message};
}

bool nvme_mover::finish_moves() {
  const auto over = [](const std::unique_ptr<nvme_move>& m) {
    return m->pieces_out == 0 && (m->failure || m->issued == m->bytes);
  };
  bool any = false;
  for (auto& m : moves_) {
    if (!over(m)) continue;
    finish(*m);
    any = true;
  }
  if (any) std::erase_if(moves_, [](const std::unique_ptr<nvme_move>& m) { return m->finished; });
  return any;
}

void nvme_mover::finish(nvme_move& m) noexcept {
  std::optional<carried_error> failure = std::move(m.failure);
  m.failure.reset();
  m.finished = true;
  try {
    // After a failed read the home is intact; after a failed write the tier manager marks it
    // released and dirty: the caller's device copy is then the only good one.
    if (failure) {
      tiers_.abort_move(m.param, m.state);
    } else {
      tiers_.finish_move(m.param, m.state);
    }
  } catch (...) {
    if (!failure) failure = carried_error::of(std::current_exception());
  }
  if (m.op == io::io_op::read) {
    // After the move's last copy (and any that went before on the stream), whether it succeeded
    // or not: the caller's memory is written until then.
    try {
      m.ticket->copied = dev_.create_event();
      dev_.record(m.ticket->copied, in_stream_.view());
    } catch (...) {
      if (!failure) failure = carried_error::of(std::current_exception());
    }
  }
  {
    const std::lock_guard lock(mutex_);
    ++(m.op == io::io_op::read ? stats_.moves_in : stats_.moves_out);
    if (failure) ++stats_.failed_moves;
  }
  m.ticket->complete(std::move(failure));
}

void nvme_mover::note_busy(const io::swap_channel& channel) {
  const auto now = std::chrono::steady_clock::now();
  if (channel.outstanding() > 0) {
    if (!busy_since_) busy_since_ = now;
    return;
  }
  if (!busy_since_) return;
  const std::lock_guard lock(mutex_);
  stats_.io_busy_seconds += std::chrono::duration<double>(now - *busy_since_).count();
  busy_since_.reset();
}

}  // namespace zoe::engine::detail
