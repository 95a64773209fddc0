#include "engine_state.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <thread>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/file.hpp"

namespace zoe::io::detail {
namespace {

// EAGAIN means the kernel is busy now: retry after a pause that doubles from the first to the
// longest, and past this many in a row report it (about a quarter of a second in all).
constexpr unsigned max_eagain_retries = 32;
constexpr std::chrono::microseconds first_eagain_pause{10};
constexpr std::chrono::microseconds longest_eagain_pause{10'000};
constexpr std::size_t bounce_alignment = 4096;

}  // namespace

engine_state::engine_state(std::unique_ptr<io_backend> backend, engine_options options)
    : backend_(std::move(backend)), options_(options) {
  ZOE_EXPECTS(backend_ != nullptr, "io_engine needs a backend");
  options_.validate();
  bounce_size_ = options_.block_size;
  bounce_memory_ =
      options_.bounce != nullptr ? options_.bounce : heap_bounce_memory(std::numeric_limits<std::size_t>::max());
  notifier_ = std::make_shared<notifier>();
  backend_->notify_on_result(notifier_->event_fd());
}

int engine_state::notify_fd() const noexcept {
  notifier_->enable();
  return notifier_->fd();
}

void engine_state::submit(std::span<const io_request> requests) {
  enqueue(requests, submitted_);
  // The requests start at the next poll: an event loop waiting on the notifier must make one.
  if (notifier_->enabled()) notifier_->signal();
}

engine_state::~engine_state() = default;

std::size_t engine_state::file_alignment(const piece& p) {
  const file& f = *users_[p.user].request.target;
  return f.direct() ? f.offset_alignment() : 1;
}

bool engine_state::register_buffers(std::span<const std::span<std::byte>> regions) {
  ZOE_EXPECTS(submitted_.outstanding + running_.outstanding == 0, "register_buffers while ",
              submitted_.outstanding + running_.outstanding, " requests are outstanding");
  return backend_->register_buffers(regions);
}

void engine_state::validate(const io_request& request) const {
  ZOE_EXPECTS(request.target != nullptr, "io_request has no file");
  const file& f = *request.target;
  ZOE_EXPECTS(request.op == io_op::read || f.writable(), "cannot write to '", f.path().string(),
              "': it was opened read-only");
  // Unsigned arithmetic: compare before subtracting, or an offset past the limit wraps around.
  constexpr auto largest = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  ZOE_EXPECTS(request.offset <= largest && request.buffer.size() <= largest - request.offset, op_name(request.op),
              " of ", request.buffer.size(), " bytes at offset ", request.offset, " in '", f.path().string(),
              "' reaches past the largest file offset");
  ZOE_EXPECTS(!f.direct() || f.offset_alignment() <= options_.block_size, "block_size ", options_.block_size,
              " is smaller than the O_DIRECT alignment ", f.offset_alignment(), " of '", f.path().string(), "'");
}

void engine_state::enqueue(std::span<const io_request> requests, completion_queue& queue) {
  // All or nothing: every check first, then bookkeeping that is undone if it runs out of memory.
  // No I/O starts here (only collect() starts it), so undoing is only bookkeeping.
  for (const io_request& r : requests) validate(r);
  const std::size_t planned_before = planned_.size();
  const std::size_t done_before = queue.done.size();
  const auto now = clock::now();
  std::vector<std::uint32_t> users;
  try {
    users.reserve(requests.size());
    for (const io_request& r : requests) {
      if (r.buffer.empty()) {
        io_completion c;
        c.user_data = r.user_data;
        queue.done.push_back(std::move(c));
        continue;
      }
      users.push_back(users_.add({r, 0, {}, &queue, now}));
      add_pieces(r, users.back());
    }
  } catch (...) {
    for (; planned_.size() > planned_before; planned_.pop_back()) pieces_.remove(planned_.back());
    for (const std::uint32_t u : users) users_.remove(u);
    queue.done.resize(done_before);
    throw;
  }
  queue.outstanding += requests.size();
  for (const io_request& r : requests) {
    stats_.started(r.op, now);
    if (r.buffer.empty()) stats_.finished(r.op, now, now, 0, false);
    if (r.op == io_op::write && !r.buffer.empty()) r.target->note_write_end(r.offset + r.buffer.size());
  }
}

void engine_state::add_pieces(const io_request& request, std::uint32_t user) {
  const file& f = *request.target;
  const bool direct = f.direct();
  const alignment_rule rule{
      direct ? f.offset_alignment() : 1, direct ? f.memory_alignment() : 1,
      direct ? std::max<std::size_t>(align_down(options_.block_size, f.offset_alignment()), f.offset_alignment())
             : options_.block_size};
  const auto plans = plan_request(reinterpret_cast<std::uintptr_t>(request.buffer.data()), request.offset,
                                  request.buffer.size(), rule);
  for (const piece_plan& plan : plans) {
    piece p;
    p.user = user;
    p.plan = plan;
    if (!plan.direct) {
      p.cover_begin = align_down(plan.file_offset, rule.offset);
      p.cover_end = align_up(plan.file_offset + plan.length, rule.offset);
      p.at = request.op == io_op::read ? stage::bounce_read : stage::rmw_wait_lock;
    }
    const std::uint32_t id = pieces_.add(std::move(p));
    try {
      planned_.push_back(id);
    } catch (...) {
      pieces_.remove(id);
      throw;
    }
    ++users_[user].pieces_left;
  }
}

void engine_state::run(std::span<const io_request> requests) {
  std::vector<io_completion> done;
  // Requests of an earlier run() that the backend broke off: their caller has had its exception.
  if (running_.outstanding > 0) collect(running_, done, std::numeric_limits<std::size_t>::max(), true);
  done.clear();
  enqueue(requests, running_);
  collect(running_, done, std::numeric_limits<std::size_t>::max(), true);
  for (const io_completion& c : done) c.throw_if_failed();
}

void engine_state::drain() noexcept {
  std::vector<io_completion> discard;
  try {
    while (submitted_.outstanding + running_.outstanding > 0) {
      discard.clear();
      collect(submitted_.outstanding > 0 ? submitted_ : running_, discard, std::numeric_limits<std::size_t>::max(),
              true);
    }
  } catch (const std::exception& e) {
    log::error("io_engine shutting down with ", submitted_.outstanding + running_.outstanding,
               " requests in flight, whose buffers the backend may still use: ", e.what());
  }
}

std::size_t engine_state::collect(completion_queue& queue, std::vector<io_completion>& out, std::size_t min_count,
                                  bool block) {
  if (!notifier_->enabled()) return collect_loop(queue, out, min_count, block);
  // Cleared before anything is reaped, so a result that arrives from here on signals again.
  notifier_->clear();
  backend_unreaped_ = raws_in_flight_ > 0;
  const std::size_t moved = collect_loop(queue, out, min_count, block);
  arm_notification();
  return moved;
}

void engine_state::arm_notification() {
  const std::size_t capacity = backend_->capacity();
  const bool work_now = !submitted_.done.empty() || (raws_in_flight_ > 0 && backend_unreaped_) ||
                        (!ready_.empty() && raws_in_flight_ < capacity) ||
                        (!planned_.empty() && active_pieces_ < capacity);
  if (work_now) notifier_->signal();
  if (delayed_.empty()) {
    notifier_->disarm_timer();
  } else {
    notifier_->arm_timer(next_due());
  }
}

std::size_t engine_state::collect_until(std::vector<io_completion>& out, std::size_t min_count,
                                        clock_deadline deadline) {
  notifier_->enable();
  // Between polls, sleep until the backend, a timer or another engine's unlock says that the
  // next poll can do something: no spinning, and the thread that drives the engine is the only
  // one that touches it.
  return poll_until(
      notifier_->fd(), deadline, min_count, [&] { return collect(submitted_, out, 0, false); },
      [&] { return submitted_.outstanding; });
}

std::size_t engine_state::collect_loop(completion_queue& queue, std::vector<io_completion>& out, std::size_t min_count,
                                       bool block) {
  std::size_t moved = 0;
  // A poll keeps the time it started with, so an operation that meets EAGAIN during it is not
  // due again before the next call: a poll never spins on a busy kernel.
  clock::time_point now = clock::now();
  for (;;) {
    pump(now);
    moved += queue.done.size();
    queue.outstanding -= queue.done.size();
    std::move(queue.done.begin(), queue.done.end(), std::back_inserter(out));
    queue.done.clear();
    if (queue.outstanding == 0 || (block && moved >= min_count)) return moved;
    if (raws_in_flight_ > 0) {
      results_.clear();
      backend_->reap(results_, block ? 1 : 0);
      backend_unreaped_ = false;
      if (results_.empty()) {
        ZOE_CHECK(!block, internal_error, "the ", backend_->name(), " backend returned from a blocking reap with ",
                  raws_in_flight_, " operations in flight and none finished");
        return moved;
      }
      if (block) now = clock::now();
      for (const raw_result& r : results_) on_result(r, now);
    } else if (!lock_wait_.empty()) {
      if (!block) return moved;
      // Only another engine can hold the lock we wait for: all of ours would be in flight.
      target_of(pieces_[lock_wait_.front()]).wait_for_unlock();
    } else if (!delayed_.empty()) {
      if (!block) return moved;
      std::this_thread::sleep_until(next_due());
      now = clock::now();
    } else {
      throw internal_error("io_engine has outstanding requests but nothing in flight or waiting");
    }
  }
}

engine_state::clock::time_point engine_state::next_due() const {
  return std::min_element(delayed_.begin(), delayed_.end(), [](const auto& a, const auto& b) { return a.due < b.due; })
      ->due;
}

void engine_state::pump(clock::time_point now) {
  while (active_pieces_ < backend_->capacity() && !planned_.empty()) {
    const std::uint32_t id = planned_.front();
    planned_.pop_front();
    ++active_pieces_;
    activate(id);
  }
  for (std::size_t n = lock_wait_.size(); n > 0; --n) {
    const std::uint32_t id = lock_wait_.front();
    lock_wait_.pop_front();
    piece& p = pieces_[id];
    // The notifier listens for the holder's unlock, so an event loop learns when to try again.
    if (target_of(p).try_lock_range(p.cover_begin, p.cover_end, notifier_)) {
      p.locked = true;
      start_rmw(id);
    } else {
      lock_wait_.push_back(id);
    }
  }
  std::erase_if(delayed_, [&](const delayed_raw& d) {
    if (d.due > now) return false;
    ready_.push_back(d.raw);
    return true;
  });
  submit_ready();
}

void engine_state::submit_ready() {
  submit_batch_.clear();
  while (!ready_.empty() && raws_in_flight_ < backend_->capacity()) {
    raw_slot& r = raws_[static_cast<std::uint32_t>(ready_.front())];
    ready_.pop_front();
    raw_op op = r.op;
    op.buffer += r.sub_start;
    op.offset += r.sub_start;
    op.length -= r.sub_start;
    submit_batch_.push_back(op);
    ++raws_in_flight_;
  }
  if (submit_batch_.empty()) return;
  backend_unreaped_ = true;
  try {
    backend_->submit(submit_batch_);
  } catch (const std::exception& e) {
    // The backend took none of them (io_backend::submit): they fail with its reason. Failing one
    // may queue more work (never another submit from here), which the next pump offers again.
    raws_in_flight_ -= submit_batch_.size();
    const auto* io = dynamic_cast<const io_error*>(&e);
    const int os_errno = io != nullptr ? io->os_errno() : 0;
    for (const raw_op& op : submit_batch_) {
      const auto raw_id = static_cast<std::uint32_t>(op.tag);
      finish_raw(raw_id, failure_of(raws_[raw_id], os_errno, e.what()));
    }
  }
}

void engine_state::activate(std::uint32_t id) {
  piece& p = pieces_[id];
  io_request& request = users_[p.user].request;
  if (p.at == stage::direct) {
    queue_raw(id, request.op, request.buffer.data() + p.plan.buffer_offset, p.plan.length, p.plan.file_offset, false);
    return;
  }
  const std::span<std::byte> memory = bounce_memory_->lend(bounce_size_, bounce_alignment);
  if (memory.size() < bounce_size_) {
    if (!memory.empty()) bounce_memory_->take_back(memory);
    // A failed completion, not an exception: the piece is already counted as active.
    p.error = {true, ENOMEM, p.plan.file_offset,
               str("cannot get a ", bounce_size_, "-byte I/O bounce buffer (",
                   options_.bounce ? "the caller's" : "heap", " bounce memory has none) for the ", op_name(request.op),
                   " at offset ", p.plan.file_offset, " in '", request.target->path().string(), "'")};
    finish_piece(id);
    return;
  }
  p.bounce = memory.data();
  p.bounce_lent = memory.size();
  if (p.at == stage::bounce_read) {
    queue_raw(id, io_op::read, p.bounce, p.cover_end - p.cover_begin, p.cover_begin, true);
  } else {
    lock_wait_.push_back(id);
  }
}

void engine_state::start_rmw(std::uint32_t id) {
  piece& p = pieces_[id];
  p.at = stage::rmw_fill;
  // Someone else may have grown the file since we opened it; the trim after the write must not
  // cut off what they wrote.
  try {
    target_of(p).refresh_logical_size();
  } catch (const io_error& e) {
    p.error = {true, e.os_errno(), p.cover_begin, e.what()};
    advance(id);
    return;
  }
  const std::size_t align = file_alignment(p);
  const std::uint64_t begin = p.plan.file_offset;
  const std::uint64_t end = begin + p.plan.length;
  // Only blocks the write covers in part need their old bytes read first.
  const bool partial_head = begin != p.cover_begin;
  const bool partial_tail = end != p.cover_end;
  if (partial_head) queue_raw(id, io_op::read, p.bounce, align, p.cover_begin, true);
  if (partial_tail && !(partial_head && p.cover_end - p.cover_begin == align)) {
    queue_raw(id, io_op::read, p.bounce + (p.cover_end - p.cover_begin - align), align, p.cover_end - align, true);
  }
  if (p.raws_left == 0) advance(id);
}

void engine_state::queue_raw(std::uint32_t piece_id, io_op op, std::byte* buffer, std::size_t length,
                             std::uint64_t offset, bool eof_ok) {
  piece& p = pieces_[piece_id];
  raw_slot r;
  r.piece = piece_id;
  r.op = {target_of(p).fd(), op, buffer, length, offset, 0};
  r.eof_ok = eof_ok;
  const std::uint32_t raw_id = raws_.add(r);
  raws_[raw_id].op.tag = raw_id;
  ++p.raws_left;
  ready_.push_back(raw_id);
}

engine_state::failure engine_state::os_failure(const raw_slot& r, int os_errno) {
  return failure_of(r, os_errno, errno_text(os_errno));
}

engine_state::failure engine_state::failure_of(const raw_slot& r, int os_errno, std::string_view cause) {
  const file& f = target_of(pieces_[r.piece]);
  return {true, os_errno, r.op.offset + r.sub_start,
          str(op_name(r.op.op), " of ", r.op.length - r.sub_start, " bytes at offset ", r.op.offset + r.sub_start,
              " in '", f.path().string(), "' failed: ", cause)};
}

void engine_state::on_result(const raw_result& result, clock::time_point now) {
  const auto raw_id = static_cast<std::uint32_t>(result.tag);
  raw_slot& r = raws_[raw_id];
  --raws_in_flight_;
  const std::int64_t res = result.result;
  if (res == -EINTR) {
    ready_.push_back(raw_id);
    return;
  }
  if (res == -EAGAIN && ++r.retries < max_eagain_retries) {
    const auto pause = std::min(longest_eagain_pause, first_eagain_pause * (1U << std::min(r.retries - 1, 10U)));
    delayed_.push_back({now + pause, raw_id});
    return;
  }
  if (res < 0) {
    finish_raw(raw_id, os_failure(r, static_cast<int>(-res)));
    return;
  }
  const std::size_t total = r.sub_start + static_cast<std::size_t>(res);
  if (total <= r.done || res == 0) {
    // No new bytes: end of file for a read; for a write, a device that stopped taking data.
    const file& f = target_of(pieces_[r.piece]);
    if (r.op.op == io_op::read && r.eof_ok) {
      finish_raw(raw_id, {});
    } else if (r.op.op == io_op::read) {
      finish_raw(raw_id, {true, 0, r.op.offset + r.done,
                          str("unexpected end of file at offset ", r.op.offset + r.done, " in '", f.path().string(),
                              "' (read of ", r.op.length, " bytes at offset ", r.op.offset, ")")});
    } else {
      finish_raw(raw_id, os_failure(r, EIO));
    }
    return;
  }
  r.done = std::min(total, r.op.length);
  r.retries = 0;
  if (r.done == r.op.length) {
    finish_raw(raw_id, {});
    return;
  }
  // A short transfer: send the rest. O_DIRECT needs the restart aligned; re-moving a few bytes
  // that already moved is harmless for both reads and writes.
  r.sub_start = align_down(r.done, file_alignment(pieces_[r.piece]));
  ready_.push_back(raw_id);
}

void engine_state::finish_raw(std::uint32_t raw_id, failure error) {
  raw_slot& r = raws_[raw_id];
  piece& p = pieces_[r.piece];
  if (error.failed && (!p.error.failed || error.at < p.error.at)) p.error = std::move(error);
  if (r.eof_ok) {
    // A bounce fill that met end of file: what lies beyond reads as zeros, as in a sparse file.
    std::memset(r.op.buffer + r.done, 0, r.op.length - r.done);
    if (p.at == stage::bounce_read) p.bytes_read = r.done;
  }
  const std::uint32_t piece_id = r.piece;
  raws_.remove(raw_id);
  if (--p.raws_left == 0) advance(piece_id);
}

void engine_state::advance(std::uint32_t id) {
  piece& p = pieces_[id];
  if (p.error.failed) {
    finish_piece(id);
    return;
  }
  const io_request& request = users_[p.user].request;
  const std::size_t head = p.plan.file_offset - p.cover_begin;
  switch (p.at) {
    case stage::direct: break;
    case stage::bounce_read:
      if (p.bytes_read < head + p.plan.length) {
        p.error = {true, 0, p.cover_begin + p.bytes_read,
                   str("unexpected end of file at offset ", p.cover_begin + p.bytes_read, " in '",
                       request.target->path().string(), "' (read of ", request.buffer.size(), " bytes at offset ",
                       request.offset, ")")};
      } else {
        std::memcpy(request.buffer.data() + p.plan.buffer_offset, p.bounce + head, p.plan.length);
      }
      break;
    case stage::rmw_fill:
      std::memcpy(p.bounce + head, request.buffer.data() + p.plan.buffer_offset, p.plan.length);
      p.at = stage::rmw_write;
      if (p.cover_end > request.target->logical_size()) {
        request.target->begin_extension();
        p.extending = true;
      }
      queue_raw(id, io_op::write, p.bounce, p.cover_end - p.cover_begin, p.cover_begin, false);
      return;
    case stage::rmw_write: break;
    case stage::rmw_wait_lock: ZOE_ASSERT(false);
  }
  finish_piece(id);
}

void engine_state::release_bounce(piece& p) {
  if (p.extending) {
    p.extending = false;
    try {
      // The whole last block went out (or failed part-way): cut the file back to the length
      // the caller asked for, before another writer of this block may start.
      target_of(p).end_extension();
    } catch (const io_error& e) {
      if (!p.error.failed) p.error = {true, e.os_errno(), p.cover_end, e.what()};
    }
  }
  if (p.locked) {
    target_of(p).unlock_range(p.cover_begin, p.cover_end);
    p.locked = false;
  }
  if (p.bounce != nullptr) {
    bounce_memory_->take_back({p.bounce, p.bounce_lent});
    p.bounce = nullptr;
  }
}

void engine_state::finish_piece(std::uint32_t id) {
  piece& p = pieces_[id];
  release_bounce(p);
  user_slot& u = users_[p.user];
  // Several pieces may fail (a read past the end fails in every piece beyond it); the lowest
  // offset is the one that explains the others.
  if (p.error.failed && (!u.error.failed || p.error.at < u.error.at)) u.error = std::move(p.error);
  --active_pieces_;
  const std::uint32_t user = p.user;
  pieces_.remove(id);
  if (--u.pieces_left > 0) return;
  io_completion c;
  c.user_data = u.request.user_data;
  c.failed = u.error.failed;
  c.os_errno = u.error.os_errno;
  c.message = std::move(u.error.message);
  c.bytes = c.failed ? 0 : u.request.buffer.size();
  stats_.finished(u.request.op, u.started, clock::now(), c.bytes, c.failed);
  u.queue->done.push_back(std::move(c));
  users_.remove(user);
}

}  // namespace zoe::io::detail
