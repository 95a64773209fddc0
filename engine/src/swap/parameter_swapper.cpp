#include "zoe/engine/swap/parameter_swapper.hpp"

#include <algorithm>
#include <optional>

#include "zoe/core/check.hpp"
#include "zoe/core/units.hpp"

namespace zoe::engine {

state_kind working_state(const parameter_layout& p) noexcept {
  return p.dtype == kernels::dtype::fp32 ? state_kind::master : state_kind::working;
}

struct parameter_swapper::impl {
  impl(tier_manager& t, device& d, mover* m)
      : tiers(t), dev(d), movers(m), copy_stream(d.create_stream()), in_stream(d.create_stream()) {}

  tier_manager& tiers;
  device& dev;
  mover* movers;
  std::size_t pool = mover::no_pool;
  std::size_t slot_bytes = 0;
  device_stream copy_stream;  ///< host and device homes
  device_stream in_stream;    ///< NVMe pieces: their hooks copy slot -> device

  mutable std::mutex mutex;
  parameter_swapper_stats stats;

  struct nvme_move;
  struct started {
    const parameter_layout& param;
    state_kind state;
    const state_location& home;
  };
  // Takes the state for a read (-> in_flight); usage_error when it cannot be read now.
  started begin(parameter_id p);
  // Hands a read of `m`'s NVMe home into `device` to the mover, piece by piece.
  void submit_nvme(parameter_id p, const started& m, std::byte* device, move_priority priority,
                   std::shared_ptr<detail::ticket_state> ticket);
  std::shared_ptr<detail::ticket_state> new_ticket() {
    auto t = std::make_shared<detail::ticket_state>();
    t->dev = &dev;
    return t;
  }
  void finish(nvme_move& m) noexcept;
  void count_copy(std::uint64_t bytes) {
    const std::lock_guard lock(mutex);
    stats.bytes_copied += bytes;
    ++stats.moves_in;
  }
};

// What the pieces of one NVMe read share. Their hooks and done callbacks all run on the mover's
// I/O thread, one at a time: no lock. The byte counts go to the stats once, when the move finishes.
struct parameter_swapper::impl::nvme_move {
  impl* owner = nullptr;
  parameter_id param = 0;
  state_kind state = state_kind::working;
  std::byte* device = nullptr;  ///< where the shard goes
  std::size_t pieces_left = 0;
  std::uint64_t bytes_read = 0;
  std::uint64_t bytes_staged = 0;
  std::optional<carried_error> failure;  ///< the first piece that failed
  std::shared_ptr<detail::ticket_state> ticket;
};

namespace {
std::string describe(const parameter_layout& p, state_kind s) {
  return str("the ", state_kind_name(s), " state of parameter '", p.name, "'");
}

}  // namespace

parameter_swapper::impl::started parameter_swapper::impl::begin(parameter_id p) {
  const parameter_layout& param = tiers.layout().parameter(p);
  const state_kind s = working_state(param);
  // A read of a released state is refused by the tier manager, naming it.
  ZOE_EXPECTS(tiers.begin_move(p, s, move_kind::read), "cannot move ", describe(param, s),
              ": it is already being moved");
  return {param, s, tiers.location(p, s)};
}

void parameter_swapper::impl::submit_nvme(parameter_id p, const started& m, std::byte* device, move_priority priority,
                                          std::shared_ptr<detail::ticket_state> ticket) {
  ZOE_ASSERT(pool != mover::no_pool);
  auto move = std::make_shared<nvme_move>();
  move->owner = this;
  move->param = p;
  move->state = m.state;
  move->device = device;
  move->ticket = std::move(ticket);
  const std::uint64_t bytes = m.home.bytes;
  move->pieces_left = static_cast<std::size_t>((bytes + slot_bytes - 1) / slot_bytes);
  const std::string what = describe(m.param, m.state);
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
    piece.read = mover::io_range{m.home.extent, offset};
    // The pieces' done callbacks keep the move; a piece's hook runs before its done.
    piece.hook = [mv = move.get(), offset](std::span<std::byte> slot) {
      impl& self = *mv->owner;
      self.dev.copy_async(mv->device + offset, slot.data(), slot.size(), copy_kind::host_to_device,
                          self.in_stream.view());
      mv->bytes_staged += slot.size();
      return std::optional<stream_view>(self.in_stream.view());
    };
    piece.done = [move, n = piece.bytes](const carried_error* e) {
      if (e != nullptr && !move->failure) move->failure = *e;
      if (e == nullptr) move->bytes_read += n;
      if (--move->pieces_left == 0) move->owner->finish(*move);
    };
    piece.what = what;
    piece.group = group;
    movers->submit(std::move(piece));
  }
}

void parameter_swapper::impl::finish(nvme_move& m) noexcept {
  std::optional<carried_error> failure = std::move(m.failure);
  try {
    // After a failed read the home is intact.
    if (failure) {
      tiers.abort_move(m.param, m.state);
    } else {
      tiers.finish_move(m.param, m.state);
    }
  } catch (...) {
    if (!failure) failure = carried_error::of(std::current_exception());
  }
  // After the move's last copy (and any that went before on the stream), whether it succeeded or
  // not: the caller's memory is written until then.
  try {
    m.ticket->copied = dev.create_event();
    dev.record(m.ticket->copied, in_stream.view());
  } catch (...) {
    if (!failure) failure = carried_error::of(std::current_exception());
  }
  {
    const std::lock_guard lock(mutex);
    stats.bytes_read += m.bytes_read;
    stats.bytes_staged += m.bytes_staged;
    ++stats.moves_in;
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
  // A piece that starts inside a checksum chunk reads and verifies that chunk whole, so only a
  // slot smaller than a chunk may be a buffer of its own, and then it must hold the largest shard whole.
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
  } catch (const std::exception&) {  // reported by the stream's owner below; nothing to add
  }
}

swap_ticket parameter_swapper::swap_in(parameter_id p, void* dst, move_priority priority) {
  const impl::started m = impl_->begin(p);
  auto ticket = impl_->new_ticket();
  const std::uint64_t bytes = m.home.bytes;
  if (m.home.where == tier::nvme) {
    impl_->submit_nvme(p, m, static_cast<std::byte*>(dst), priority, ticket);
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
  // Queued on copy_stream: the ticket's event says when the copy has read the home.
  impl_->tiers.finish_move(p, m.state);
  impl_->count_copy(bytes);
  ticket->complete(std::nullopt);
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
