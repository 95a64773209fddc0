#include "zoe/engine/swap/parameter_swapper.hpp"

#include <algorithm>
#include <optional>

#include "nvme_mover.hpp"
#include "zoe/allocators/buffer_pool.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/units.hpp"

namespace zoe::engine {

state_kind working_state(const parameter_layout& p) noexcept {
  return p.dtype == kernels::dtype::fp32 ? state_kind::master : state_kind::working;
}

struct parameter_swapper::impl {
  impl(tier_manager& t, device& d) : tiers(t), dev(d), copy_stream(d.create_stream()) {}

  tier_manager& tiers;
  device& dev;
  // Host and device homes: one stream for both directions, so a write-back queued after a fetch
  // of the same state runs after it.
  device_stream copy_stream;
  std::optional<allocators::buffer_pool> pool;
  std::unique_ptr<detail::nvme_mover> mover;  // last: its thread uses the pool

  mutable std::mutex mutex;
  parameter_swapper_stats stats;  // the copies of host and device homes

  struct started {
    const parameter_layout& param;
    state_kind state;
    const state_location& home;
  };
  // Takes the state for a move (-> in_flight); usage_error when it cannot be moved now.
  started begin(parameter_id p, move_kind kind);
  // Hands a move of `m`'s NVMe home (in: to `device`; out: from it) to the I/O thread.
  void enqueue_nvme(parameter_id p, const started& m, io::io_op op, std::byte* device,
                    std::shared_ptr<detail::ticket_state> ticket);
  std::shared_ptr<detail::ticket_state> new_ticket() {
    auto t = std::make_shared<detail::ticket_state>();
    t->dev = &dev;
    return t;
  }
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

void parameter_swapper::impl::enqueue_nvme(parameter_id p, const started& m, io::io_op op, std::byte* device,
                                           std::shared_ptr<detail::ticket_state> ticket) {
  ZOE_ASSERT(mover != nullptr);
  auto move = std::make_unique<detail::nvme_move>();
  move->op = op;
  move->param = p;
  move->state = m.state;
  move->what = describe(m.param, m.state);
  move->extent = m.home.extent;
  move->device = device;
  move->bytes = m.home.bytes;
  move->ticket = std::move(ticket);
  mover->enqueue(std::move(move));
}

parameter_swapper::parameter_swapper(tier_manager& tiers, device& dev, allocators::pinned_host_resource& pinned,
                                     io::swap_store* store, parameter_swapper_options options)
    : impl_(std::make_unique<impl>(tiers, dev)) {
  if (store == nullptr) return;
  const std::uint64_t chunk = store->options().io.block_size;
  std::uint64_t largest = 0;
  for (const parameter_layout& param : tiers.layout().parameters()) {
    const state_location& home = tiers.location(param.id, working_state(param));
    if (home.where == tier::nvme) largest = std::max(largest, home.bytes);
  }
  // The store may hold only other states (offload_optimizer nvme with the working copies in
  // memory): then there is nothing to swap, and the plan gives no buffers to swap with.
  if (largest == 0) return;
  // The planned pinned memory (buffer_count buffers of buffer_bytes) is cut into slots of one
  // aio.block_size chunk: a shard streams through them chunk by chunk, read, copied and returned,
  // so the memory keeps as many chunks in flight as it holds instead of one shard per buffer. A
  // write must cover whole checksum chunks (or end at its extent's end), so only a buffer smaller
  // than a chunk may be a slot of its own, and then it must hold the largest shard whole.
  const std::uint64_t slot = options.buffer_bytes >= chunk ? chunk : options.buffer_bytes;
  if (options.buffer_count == 0 || slot == 0 || (largest > slot && slot < chunk)) {
    throw config_error(str("parameter swap buffers: ", options.buffer_count, " buffers of ",
                           format_bytes(options.buffer_bytes), " cannot move shards of up to ", format_bytes(largest),
                           " from NVMe; a buffer must hold the largest shard or a whole aio.block_size chunk (",
                           format_bytes(chunk),
                           "): raise zero_optimization.offload_param.buffer_count / buffer_size "
                           "or lower aio.block_size"));
  }
  const std::uint64_t planned = static_cast<std::uint64_t>(options.buffer_count) * options.buffer_bytes;
  impl_->pool.emplace(pinned, allocators::buffer_pool_options{.buffer_count = static_cast<std::size_t>(planned / slot),
                                                              .buffer_size = static_cast<std::size_t>(slot),
                                                              .name = "parameter swap buffers"});
  impl_->stats.pinned_bytes = planned / slot * slot;
  impl_->stats.buffer_slots = impl_->pool->buffer_count();
  impl_->mover = std::make_unique<detail::nvme_mover>(tiers, dev, *store, *impl_->pool, slot);
}

parameter_swapper::~parameter_swapper() {
  impl_->mover.reset();  // finishes the NVMe moves while the pool is still there
  try {
    impl_->dev.synchronize(impl_->copy_stream.view());
  } catch (const std::exception&) {  // reported by the stream's owner below; nothing to add
  }
}

swap_ticket parameter_swapper::swap_in(parameter_id p, void* dst) {
  const impl::started m = impl_->begin(p, move_kind::read);
  auto ticket = impl_->new_ticket();
  const std::uint64_t bytes = m.home.bytes;
  if (m.home.where == tier::nvme) {
    impl_->enqueue_nvme(p, m, io::io_op::read, static_cast<std::byte*>(dst), ticket);
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
    impl_->enqueue_nvme(p, m, io::io_op::write, source, ticket);
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
  if (impl_->mover) impl_->mover->add_stats(out);
  return out;
}

std::string parameter_swapper::backend_name() const { return impl_->mover ? impl_->mover->backend_name() : ""; }

}  // namespace zoe::engine
