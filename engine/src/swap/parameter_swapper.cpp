#include "zoe/engine/swap/parameter_swapper.hpp"

#include <algorithm>
#include <optional>

#include "zoe/core/check.hpp"
#include "zoe/core/units.hpp"

namespace zoe::engine {

state_kind working_state(const parameter_layout& p) noexcept {
  return p.dtype == kernels::dtype::fp32 ? state_kind::master : state_kind::working;
}

mover_pool_spec parameter_pool(std::uint64_t buffer_count, std::uint64_t buffer_bytes, std::uint64_t chunk) {
  // The planned pinned memory is cut into slots of one chunk: a shard streams through them chunk
  // by chunk, read, copied and returned, so the memory keeps as many chunks in flight as it holds
  // instead of one shard per buffer.
  const std::uint64_t slot = buffer_bytes >= chunk ? chunk : buffer_bytes;
  const std::uint64_t count = slot == 0 ? 0 : buffer_count * buffer_bytes / slot;
  return {.key = "params", .slot_bytes = static_cast<std::size_t>(slot), .slot_count = static_cast<std::size_t>(count)};
}

namespace {
// What the pieces of one NVMe move share. Their done callbacks all run on the mover's I/O thread,
// one at a time: no lock.
struct nvme_move {
  parameter_id param = 0;
  state_kind state = state_kind::working;
  io::io_op op = io::io_op::read;
  std::size_t pieces_left = 0;
  std::optional<carried_error> failure;  ///< the first piece that failed
  std::shared_ptr<detail::ticket_state> ticket;
};
}  // namespace

struct parameter_swapper::impl {
  impl(tier_manager& t, device& d, mover* m)
      : tiers(t),
        dev(d),
        movers(m),
        copy_stream(d.create_stream()),
        in_stream(d.create_stream()),
        out_stream(d.create_stream()) {}

  tier_manager& tiers;
  device& dev;
  mover* movers;
  std::size_t pool = mover::no_pool;
  std::size_t slot_bytes = 0;
  // Host and device homes: one stream for both directions, so a write-back queued after a fetch
  // of the same state runs after it.
  device_stream copy_stream;
  // NVMe pieces: their hooks copy slot -> device on one, device -> slot on the other.
  device_stream in_stream;
  device_stream out_stream;

  mutable std::mutex mutex;
  parameter_swapper_stats stats;

  struct started {
    const parameter_layout& param;
    state_kind state;
    const state_location& home;
  };
  // Takes the state for a move (-> in_flight); usage_error when it cannot be moved now.
  started begin(parameter_id p, move_kind kind);
  // Hands a move of `m`'s NVMe home (in: to `device`; out: from it) to the mover, piece by piece.
  void submit_nvme(parameter_id p, const started& m, io::io_op op, std::byte* device, move_priority priority,
                   std::shared_ptr<detail::ticket_state> ticket);
  std::shared_ptr<detail::ticket_state> new_ticket() {
    auto t = std::make_shared<detail::ticket_state>();
    t->dev = &dev;
    return t;
  }
  void finish(nvme_move& m) noexcept;
  void count_copy(std::uint64_t bytes, bool in) {
    const std::lock_guard lock(mutex);
    stats.bytes_copied += bytes;
    ++(in ? stats.moves_in : stats.moves_out);
  }
};

namespace {
std::string describe(const parameter_layout& p, state_kind s) {
  return str("the ", state_kind_name(s), " state of parameter '", p.name, "'");
}

}  // namespace

parameter_swapper::impl::started parameter_swapper::impl::begin(parameter_id p, move_kind kind) {
  const parameter_layout& param = tiers.layout().parameter(p);
  const state_kind s = working_state(param);
  // A read of a released state is refused by the tier manager, naming it.
  ZOE_EXPECTS(tiers.begin_move(p, s, kind), "cannot move ", describe(param, s), ": it is already being moved");
  return {param, s, tiers.location(p, s)};
}

void parameter_swapper::impl::submit_nvme(parameter_id p, const started& m, io::io_op op, std::byte* device,
                                          move_priority priority, std::shared_ptr<detail::ticket_state> ticket) {
  ZOE_ASSERT(pool != mover::no_pool);
  auto move = std::make_shared<nvme_move>();
  move->param = p;
  move->state = m.state;
  move->op = op;
  move->ticket = std::move(ticket);
  const std::uint64_t bytes = m.home.bytes;
  move->pieces_left = static_cast<std::size_t>((bytes + slot_bytes - 1) / slot_bytes);
  const std::string what = describe(m.param, m.state);
  const bool in = op == io::io_op::read;
  const std::uint64_t group = movers->new_group();
  if (priority != move_priority::demand) {
    // Called only while the ticket is not ready: its pieces are in the mover, which lives until they are done.
    move->ticket->raise = [movers = movers, group] { movers->raise(group); };
  }
  for (std::uint64_t offset = 0; offset < bytes; offset += slot_bytes) {
    mover::piece piece;
    piece.priority = priority;
    piece.pool = pool;
    piece.bytes = static_cast<std::size_t>(std::min<std::uint64_t>(slot_bytes, bytes - offset));
    (in ? piece.read : piece.write) = mover::io_range{m.home.extent, offset};
    std::byte* at_device = device + offset;
    piece.hook = [this, at_device, in](std::span<std::byte> slot) {
      const stream_view stream = in ? in_stream.view() : out_stream.view();
      if (in) {
        dev.copy_async(at_device, slot.data(), slot.size(), copy_kind::host_to_device, stream);
      } else {
        dev.copy_async(slot.data(), at_device, slot.size(), copy_kind::device_to_host, stream);
      }
      device_event copied = dev.create_event();
      dev.record(copied, stream);
      const std::lock_guard lock(mutex);
      stats.bytes_staged += slot.size();
      return copied;
    };
    piece.done = [this, move, in, n = piece.bytes](const carried_error* e) {
      if (e != nullptr && !move->failure) move->failure = *e;
      if (e == nullptr) {
        const std::lock_guard lock(mutex);
        (in ? stats.bytes_read : stats.bytes_written) += n;
      }
      if (--move->pieces_left == 0) finish(*move);
    };
    piece.what = what;
    piece.group = group;
    movers->submit(std::move(piece));
  }
}

void parameter_swapper::impl::finish(nvme_move& m) noexcept {
  std::optional<carried_error> failure = std::move(m.failure);
  try {
    // After a failed read the home is intact; after a failed write the tier manager marks it
    // released and dirty: the caller's device copy is then the only good one.
    if (failure) {
      tiers.abort_move(m.param, m.state);
    } else {
      tiers.finish_move(m.param, m.state);
    }
  } catch (...) {
    if (!failure) failure = carried_error::of(std::current_exception());
  }
  if (m.op == io::io_op::read) {
    // After the move's last copy (and any that went before on the stream), whether it succeeded
    // or not: the caller's memory is written until then.
    try {
      m.ticket->copied = dev.create_event();
      dev.record(m.ticket->copied, in_stream.view());
    } catch (...) {
      if (!failure) failure = carried_error::of(std::current_exception());
    }
  }
  {
    const std::lock_guard lock(mutex);
    ++(m.op == io::io_op::read ? stats.moves_in : stats.moves_out);
    if (failure) ++stats.failed_moves;
  }
  m.ticket->complete(std::move(failure));
}

parameter_swapper::parameter_swapper(tier_manager& tiers, device& dev, mover* movers)
    : impl_(std::make_unique<impl>(tiers, dev, movers)) {
  if (movers == nullptr || movers->store() == nullptr) return;
  const std::uint64_t chunk = movers->chunk_bytes();
  std::uint64_t largest = 0;
  for (const parameter_layout& param : tiers.layout().parameters()) {
    const state_location& home = tiers.location(param.id, working_state(param));
    if (home.where == tier::nvme) largest = std::max(largest, home.bytes);
  }
  // The store may hold only other states (offload_optimizer nvme with the working copies in
  // memory): then there is nothing to swap, and the plan gives no buffers to swap with.
  if (largest == 0) return;
  const mover_pool_spec none{};
  const mover_pool_spec& pool = movers->has_pool("params") ? movers->pool_spec(movers->pool("params")) : none;
  // A write must cover whole checksum chunks (or end at its extent's end), so only a slot smaller
  // than a chunk may be a buffer of its own, and then it must hold the largest shard whole.
  if (pool.slot_count == 0 || pool.slot_bytes == 0 || (largest > pool.slot_bytes && pool.slot_bytes < chunk)) {
    throw config_error(str("parameter swap buffers: ", pool.slot_count, " slots of ", format_bytes(pool.slot_bytes),
                           " cannot move shards of up to ", format_bytes(largest),
                           " from NVMe; a buffer must hold the largest shard or a whole aio.block_size chunk (",
                           format_bytes(chunk),
                           "): raise zero_optimization.offload_param.buffer_count / buffer_size "
                           "or lower aio.block_size"));
  }
  impl_->pool = movers->pool("params");
  impl_->slot_bytes = pool.slot_bytes;
  impl_->stats.pinned_bytes = static_cast<std::uint64_t>(pool.slot_count) * pool.slot_bytes;
  impl_->stats.buffer_slots = pool.slot_count;
}

parameter_swapper::~parameter_swapper() {
  try {
    impl_->dev.synchronize(impl_->copy_stream.view());
    impl_->dev.synchronize(impl_->in_stream.view());
    impl_->dev.synchronize(impl_->out_stream.view());
  } catch (const std::exception&) {  // reported by the stream's owner below; nothing to add
  }
}

swap_ticket parameter_swapper::swap_in(parameter_id p, void* dst, move_priority priority) {
  const impl::started m = impl_->begin(p, move_kind::read);
  auto ticket = impl_->new_ticket();
  const std::uint64_t bytes = m.home.bytes;
  if (m.home.where == tier::nvme) {
    impl_->submit_nvme(p, m, io::io_op::read, static_cast<std::byte*>(dst), priority, ticket);
    return swap_ticket(std::move(ticket));
  }
  try {
    const void* src = m.home.where == tier::host ? static_cast<const void*>(m.home.host.data()) : m.home.device;
    const copy_kind kind = m.home.where == tier::host ? copy_kind::host_to_device : copy_kind::device_to_device;
    impl_->dev.copy_async(dst, src, bytes, kind, impl_->copy_stream.view());
    ticket->copied = impl_->dev.create_event();
    impl_->dev.record(ticket->copied, impl_->copy_stream.view());
  } catch (...) {
    impl_->tiers.abort_move(p, m.state);
    throw;
  }
  // Queued: a later write of the home is queued behind it on the same stream.
  impl_->tiers.finish_move(p, m.state);
  impl_->count_copy(bytes, true);
  ticket->complete(std::nullopt);
  return swap_ticket(std::move(ticket));
}

swap_ticket parameter_swapper::swap_out(parameter_id p, const void* src) {
  const impl::started m = impl_->begin(p, move_kind::write);
  auto ticket = impl_->new_ticket();
  const std::uint64_t bytes = m.home.bytes;
  auto* source = static_cast<std::byte*>(const_cast<void*>(src));  // read only: a write never modifies it
  if (m.home.where == tier::nvme) {
    impl_->submit_nvme(p, m, io::io_op::write, source, move_priority::write_behind, ticket);
    return swap_ticket(std::move(ticket));
  }
  try {
    void* dst = m.home.where == tier::host ? static_cast<void*>(m.home.host.data()) : m.home.device;
    const copy_kind kind = m.home.where == tier::host ? copy_kind::device_to_host : copy_kind::device_to_device;
    impl_->dev.copy_async(dst, source, bytes, kind, impl_->copy_stream.view());
    // The home holds the data once the copy ran: the stream says so, without a thread waiting on it.
    impl_->dev.launch_host(impl_->copy_stream.view(), [this, p, s = m.state, ticket] {
      std::optional<carried_error> failure;
      try {
        impl_->tiers.finish_move(p, s);  // the home is current: it clears dirty
      } catch (...) {
        failure = carried_error::of(std::current_exception());
      }
      ticket->complete(std::move(failure));
    });
  } catch (...) {
    impl_->tiers.abort_move(p, m.state);
    throw;
  }
  impl_->count_copy(bytes, false);
  return swap_ticket(std::move(ticket));
}

parameter_swapper_stats parameter_swapper::stats() const {
  parameter_swapper_stats out;
  {
    const std::lock_guard lock(impl_->mutex);
    out = impl_->stats;
  }
  if (impl_->pool != mover::no_pool) {
    const mover_stats m = impl_->movers->stats();
    out.buffer_waits = m.slot_waits;
    out.io_busy_seconds = m.io_busy_seconds;
    out.peak_buffers_in_use = out.buffer_slots - impl_->movers->pool_low_water(impl_->pool);
  }
  return out;
}

std::string parameter_swapper::backend_name() const {
  return impl_->pool != mover::no_pool ? impl_->movers->backend_name() : "";
}

}  // namespace zoe::engine
