#include "zoe/engine/coordinator/coordinator.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"

namespace zoe::engine {

namespace {
using clock = std::chrono::steady_clock;
// A demand fetch that has waited this long for arena space says what holds it.
constexpr auto arena_wait_warning = std::chrono::seconds(10);
}  // namespace

// One parameter's full copy, as the coordinator holds it.
struct gathered_parameter {
  enum class phase : std::uint8_t { none, reading, gathered };
  phase at = phase::none;
  allocators::arena_block block;  // set in reading and gathered
  swap_ticket in;                 // the shard's read (reading)
  device_event ready;             // recorded after the gather
  swap_ticket out;                // its write-back, while `writing`
  bool live = false;              // the policy counts it in flight or gathered
  bool dirty = false;             // changed on the device since it was gathered
  bool writing = false;
  std::uint32_t holders = 0;             // open fetches of modules that have it
  std::optional<carried_error> failure;  // its read failed; thrown by the waits of the fetches that hold it
};

struct coordinator::impl {
  impl(tier_manager& t, parameter_swapper& s, communicator& c, device& d, const coordinator_options& o)
      : tiers(t),
        swapper(s),
        comm(c),
        dev(d),
        stream(d.create_stream()),
        arena(d, o.arena_bytes, allocators::arena_options{.name = "gathered-parameter arena"}),
        policy(t.layout(), o.limits),
        params(t.layout().parameters().size()),
        open(t.layout().modules().size()) {}

  tier_manager& tiers;
  parameter_swapper& swapper;
  communicator& comm;
  device& dev;
  device_stream stream;  // the gathers run here; each gathered block records its use of it
  allocators::arena arena;

  mutable std::mutex mutex;
  std::condition_variable changed;  // a gather, a write-back or a release completed
  prefetch_policy policy;
  std::vector<gathered_parameter> params;
  std::vector<std::deque<std::shared_ptr<detail::fetch_state>>> open;  // per module, oldest first
  std::deque<parameter_id> gathers;      // reading, in the order started: gathered in this order
  std::vector<parameter_id> writebacks;  // writing
  std::vector<carried_error> write_failures;
  coordinator_stats stats;

  [[nodiscard]] std::uint64_t shard_bytes(parameter_id p) const {
    return state_bytes(tiers.layout().parameter(p), working_state(tiers.layout().parameter(p)));
  }
  [[nodiscard]] std::uint64_t full_bytes(parameter_id p) const { return shard_bytes(p) * comm.size(); }
  [[nodiscard]] std::uint64_t module_bytes(module_id m) const {
    std::uint64_t total = 0;
    for (const parameter_id p : tiers.layout().module(m).parameters) {
      total += align_up(full_bytes(p), arena.alignment());
    }
    return total;
  }
  [[nodiscard]] std::byte* own_shard(parameter_id p) const {
    return static_cast<std::byte*>(params[p].block.data()) + comm.rank() * shard_bytes(p);
  }

  void pump();  // under the lock
  void complete_gather(parameter_id p);
  void retire_writebacks();
  bool start(parameter_id p, bool demand, std::unique_lock<std::mutex>& lock);
  allocators::arena_block allocate_waiting(parameter_id p, std::unique_lock<std::mutex>& lock);
  bool evict_one();
  void free(parameter_id p, std::unique_lock<std::mutex>& lock);
  void start_writeback(parameter_id p);
  void drop(parameter_id p);
  // A copy of the ticket: once the lock is dropped, another caller may reset the one it came from.
  void wait_outside(swap_ticket t, std::unique_lock<std::mutex>& lock) {  // NOLINT(performance-unnecessary-value-param)
    lock.unlock();
    t.wait_ready();
    lock.lock();
  }
};

// Issues the gathers whose shards arrived, oldest first (the order every rank issues them in), and
// retires finished write-backs.
void coordinator::impl::pump() {
  bool any = false;
  while (!gathers.empty() && params[gathers.front()].in.ready()) {
    const parameter_id p = gathers.front();
    gathers.pop_front();
    complete_gather(p);
    any = true;
  }
  if (!writebacks.empty()) {
    const std::size_t before = writebacks.size();
    retire_writebacks();
    any = any || writebacks.size() != before;
  }
  if (any) changed.notify_all();
}

void coordinator::impl::complete_gather(parameter_id p) {
  gathered_parameter& g = params[p];
  try {
    g.in.wait(stream.view());  // the gather runs after the shard's copies
    const std::uint64_t shard = shard_bytes(p);
    comm.all_gather(own_shard(p), g.block.data(), shard, stream.view());
    if (!g.ready.valid()) g.ready = dev.create_event();
    dev.record(g.ready, stream.view());
    g.block.record_use(stream.view());
  } catch (...) {
    g.failure = carried_error::of(std::current_exception());
    ++stats.failed_gathers;
    g.block.record_use(stream.view());  // the stream waits for the copies of the pieces that arrived
    g.block.unpin();
    g.block.reset();
    g.at = gathered_parameter::phase::none;
    if (g.live) {
      g.live = false;
      policy.on_freed(p);
    }
    return;
  }
  g.block.unpin();  // until a fetch's wait pins it, compaction may move it
  g.at = gathered_parameter::phase::gathered;
  // Not live: the policy released it and a free() waits for this read outside the lock (it drops
  // the block when it wakes); the policy would refuse it as gathered.
  if (g.live) policy.on_gathered(p);
}

void coordinator::impl::retire_writebacks() {
  std::erase_if(writebacks, [&](parameter_id p) {
    gathered_parameter& g = params[p];
    if (!g.out.ready()) return false;
    g.writing = false;
    g.block.unpin();
    if (std::optional<carried_error> f = g.out.failure()) {
      // The home is released and dirty now; the gathered copy is the only good one: keep it.
      write_failures.push_back(std::move(*f));
      ++stats.failed_write_backs;
    } else {
      g.dirty = false;
      ++stats.write_backs;
      if (!g.live) drop(p);
    }
    g.out = {};
    return true;
  });
}

// Gathers `p` for the policy. False when a prefetch backed off (the arena is full).
bool coordinator::impl::start(parameter_id p, bool demand, std::unique_lock<std::mutex>& lock) {
  gathered_parameter& g = params[p];
  if (g.block) {
    // Still here: kept for a write-back (in flight or failed). The data is the newest there is.
    g.live = true;
    if (g.at == gathered_parameter::phase::gathered) policy.on_gathered(p);
    return true;
  }
  g.failure.reset();
  std::optional<allocators::arena_block> block;
  if (demand) {
    block = allocate_waiting(p, lock);
  } else {
    block = arena.try_allocate(full_bytes(p));
  }
  if (!block) {
    ++stats.prefetch_backoffs;
    policy.on_freed(p);
    return false;
  }
  // Allocated on no stream, so the space is free of all earlier work: the swapper's streams write
  // it, not the gather stream (space pending on a stream is safe only for work on that stream).
  // Pinned while the swapper holds its address, until the gather is queued.
  block->pin();
  g.block = std::move(*block);
  try {
    g.in = swapper.swap_in(p, own_shard(p));
  } catch (...) {
    g.block.unpin();
    g.block.reset();
    policy.on_freed(p);
    throw;
  }
  g.at = gathered_parameter::phase::reading;
  g.live = true;
  gathers.push_back(p);
  // A wait that found `p` still being started sleeps on `changed` until its read exists.
  changed.notify_all();
  ++(demand ? stats.gathers : stats.prefetches);
  stats.peak_live_numel = std::max(stats.peak_live_numel, policy.live_numel());
  return true;
}

allocators::arena_block coordinator::impl::allocate_waiting(parameter_id p, std::unique_lock<std::mutex>& lock) {
  const std::uint64_t bytes = full_bytes(p);
  const auto since = clock::now();
  bool counted = false;
  bool warned = false;
  for (;;) {
    if (auto b = arena.try_allocate(bytes)) return std::move(*b);
    if (!counted) {
      ++stats.arena_waits;
      counted = true;
    }
    if (evict_one()) continue;
    // Space comes back as reads arrive (their parameters become evictable once gathered) and as
    // write-backs finish; after that only other callers' releases free any.
    if (!gathers.empty()) {
      wait_outside(params[gathers.front()].in, lock);
    } else if (!writebacks.empty()) {
      wait_outside(params[writebacks.front()].out, lock);
    } else {
      changed.wait_for(lock, std::chrono::seconds(1));
      if (!warned && clock::now() - since > arena_wait_warning) {
        warned = true;
        const allocators::arena_stats a = arena.stats();
        log::warn("fetch of parameter '", tiers.layout().parameter(p).name, "' has waited ",
                  std::chrono::duration_cast<std::chrono::seconds>(clock::now() - since).count(), " s for ",
                  format_bytes(bytes), " of the gathered-parameter arena (", format_bytes(a.used), " of ",
                  format_bytes(a.capacity), " held by modules fetched and not released)");
      }
    }
    pump();
  }
}

// Frees one parameter gathered ahead that no open fetch holds. False when there is none.
bool coordinator::impl::evict_one() {
  for (parameter_id p = 0; p < params.size(); ++p) {
    gathered_parameter& g = params[p];
    if (g.at != gathered_parameter::phase::gathered || !g.live || g.holders > 0 || g.dirty || g.writing) continue;
    g.live = false;
    policy.on_freed(p);
    drop(p);
    ++stats.evictions;
    return true;
  }
  return false;
}

// The policy released `p`: free its memory, after writing it back if it is dirty.
void coordinator::impl::free(parameter_id p, std::unique_lock<std::mutex>& lock) {
  gathered_parameter& g = params[p];
  g.live = false;
  if (g.at == gathered_parameter::phase::reading) {
    // Gathered ahead for a use that did not come: its read still writes into the block.
    const swap_ticket in = g.in;
    wait_outside(in, lock);
    if (g.at == gathered_parameter::phase::reading) {
      std::erase(gathers, p);
      try {
        in.wait(stream.view());
      } catch (const std::exception&) {  // nobody uses it; the read's failure does not matter
      }
      g.block.record_use(stream.view());  // reused after the copies into it
      g.block.unpin();
      g.at = gathered_parameter::phase::gathered;
    }
    if (g.live) return;  // fetched again while we waited
  }
  if (g.dirty && !g.writing) start_writeback(p);
  if (!g.writing && !g.dirty) drop(p);
}

void coordinator::impl::start_writeback(parameter_id p) {
  gathered_parameter& g = params[p];
  g.block.pin();  // the swapper reads it at this address until the write is known good
  try {
    g.out = swapper.swap_out(p, own_shard(p));
  } catch (...) {
    g.block.unpin();
    throw;
  }
  g.writing = true;
  writebacks.push_back(p);
}

void coordinator::impl::drop(parameter_id p) {
  gathered_parameter& g = params[p];
  g.block.reset();  // reused after the work queued on the gather stream (and recorded uses)
  g.at = gathered_parameter::phase::none;
  g.in = {};
  changed.notify_all();
}

// ---- fetch_handle -------------------------------------------------------------------------------

void fetch_handle::wait() const {
  ZOE_EXPECTS(state_ != nullptr, "wait on an empty fetch_handle");
  state_->owner->wait_fetch(*state_, nullptr);
}

void fetch_handle::wait(stream_view stream) const {
  ZOE_EXPECTS(state_ != nullptr, "wait on an empty fetch_handle");
  state_->owner->wait_fetch(*state_, &stream);
}

module_id fetch_handle::module() const {
  ZOE_EXPECTS(state_ != nullptr, "module of an empty fetch_handle");
  return state_->module;
}

// ---- coordinator ---------------------------------------------------------------------------------

coordinator::coordinator(tier_manager& tiers, parameter_swapper& swapper, communicator& comm, device& dev,
                         coordinator_options options)
    : impl_(std::make_unique<impl>(tiers, swapper, comm, dev, options)) {}

coordinator::~coordinator() {
  std::unique_lock lock(impl_->mutex);
  // Changes not yet written home (a persistent parameter, one whose write failed, one never
  // released) would go with the arena: write them back now; a failure is logged below, naming
  // the parameter, the path and the offset (call flush() first to have it thrown).
  for (parameter_id p = 0; p < impl_->params.size(); ++p) {
    const gathered_parameter& g = impl_->params[p];
    if (!g.dirty || g.writing || g.at != gathered_parameter::phase::gathered) continue;
    try {
      impl_->start_writeback(p);
    } catch (const std::exception& e) {
      log::error("parameter '", impl_->tiers.layout().parameter(p).name,
                 "' was changed and cannot be written back; its changes are lost: ", e.what());
    }
  }
  while (!impl_->gathers.empty() || !impl_->writebacks.empty()) {
    const swap_ticket t = impl_->gathers.empty() ? impl_->params[impl_->writebacks.front()].out
                                                 : impl_->params[impl_->gathers.front()].in;
    impl_->wait_outside(t, lock);
    try {
      impl_->pump();
    } catch (const std::exception& e) {
      log::error("gathered-parameter coordinator: while stopping: ", e.what());
    }
  }
  for (const carried_error& f : impl_->write_failures) {
    log::error("a write-back failed and was never flushed again; its data is lost: ", f.message);
  }
  try {
    impl_->dev.synchronize(impl_->stream.view());
  } catch (const std::exception& e) {
    log::error("gathered-parameter coordinator: the gather stream failed: ", e.what());
  }
  // The blocks go back to the arena before it is destroyed (params is declared after it).
}

void coordinator::begin_step() {
  const std::lock_guard lock(impl_->mutex);
  impl_->policy.begin_step();
}

fetch_handle coordinator::fetch(module_id module) {
  std::unique_lock lock(impl_->mutex);
  const module_layout& m = impl_->tiers.layout().module(module);
  const std::uint64_t need = impl_->module_bytes(module);
  if (need > impl_->arena.capacity()) {
    throw memory_error(
        str("module '", m.name, "' needs ", format_bytes(need), " of gathered parameters, more than the ",
            format_bytes(impl_->arena.capacity()),
            " gathered-parameter arena holds even with nothing else gathered: raise the device budget "
            "(zoe.device.budget_bytes) or stage3_max_live_parameters, which size the arena, or split the "
            "module"));
  }
  fetch_decision decision = impl_->policy.on_fetch(module);
  ++impl_->stats.fetches;
  auto state = std::make_shared<detail::fetch_state>();
  state->owner = this;
  state->module = module;
  impl_->open[module].push_back(state);
  for (const parameter_id p : m.parameters) ++impl_->params[p].holders;
  try {
    for (const parameter_id p : decision.gather) impl_->start(p, true, lock);
  } catch (...) {
    // The parameters not started are released in the policy's view; the fetch stays open, so its
    // release (which the policy expects) still comes.
    for (const parameter_id p : decision.gather) {
      if (!impl_->params[p].live && impl_->policy.status(p) != gather_status::released) impl_->policy.on_freed(p);
    }
    for (const parameter_id p : decision.prefetch) impl_->policy.on_freed(p);
    throw;
  }
  // Ahead of need, in trace order: the first that does not fit, or whose read cannot start now
  // (another mover has its state), ends the walk; it and the rest are released again and their
  // own fetches gather them (and report a refusal that lasts). A prefetch never fails this fetch.
  bool backed_off = false;
  for (const parameter_id p : decision.prefetch) {
    if (backed_off) {
      impl_->policy.on_freed(p);
      continue;
    }
    try {
      backed_off = !impl_->start(p, false, lock);
    } catch (const std::exception&) {
      if (!impl_->params[p].live && impl_->policy.status(p) != gather_status::released) impl_->policy.on_freed(p);
      ++impl_->stats.prefetch_backoffs;
      backed_off = true;
    }
  }
  impl_->pump();
  return fetch_handle(std::move(state));
}

void coordinator::wait_fetch(detail::fetch_state& state, const stream_view* stream) {
  const auto started = clock::now();
  std::unique_lock lock(impl_->mutex);
  ZOE_EXPECTS(!state.released, "wait on a fetch of module '", impl_->tiers.layout().module(state.module).name,
              "' that was already released");
  const auto& members = impl_->tiers.layout().module(state.module).parameters;
  for (;;) {
    impl_->pump();
    bool all = true;
    for (const parameter_id p : members) {
      const gathered_parameter& g = impl_->params[p];
      if (g.failure) {
        impl_->stats.wait_seconds += std::chrono::duration<double>(clock::now() - started).count();
        g.failure->raise();
      }
      all = all && g.at == gathered_parameter::phase::gathered;
    }
    // A parameter released dirty and fetched again before its write-back finished: the caller
    // may change it once this returns, so the write must have read it first.
    const auto writing =
        std::find_if(members.begin(), members.end(), [&](parameter_id p) { return impl_->params[p].writing; });
    if (all && writing == members.end()) break;
    if (all) {
      impl_->wait_outside(impl_->params[*writing].out, lock);
    } else if (!impl_->gathers.empty()) {
      // The next gather is the oldest read's: wait for it, whoever's it is.
      impl_->wait_outside(impl_->params[impl_->gathers.front()].in, lock);
    } else {
      impl_->changed.wait(lock);  // another caller is starting it
    }
  }
  if (!state.pinned) {
    for (const parameter_id p : members) impl_->params[p].block.pin();
    state.pinned = true;
  }
  std::vector<const device_event*> events;
  for (const parameter_id p : members) events.push_back(&impl_->params[p].ready);
  lock.unlock();
  // The events stay as they are: the module's parameters are pinned and gathered until its release.
  for (const device_event* e : events) {
    if (stream != nullptr) {
      impl_->dev.wait(*stream, *e);
    } else {
      impl_->dev.synchronize(*e);
    }
  }
  lock.lock();
  impl_->stats.wait_seconds += std::chrono::duration<double>(clock::now() - started).count();
}

void coordinator::release(module_id module, stream_view stream) {
  std::unique_lock lock(impl_->mutex);
  const module_layout& m = impl_->tiers.layout().module(module);
  ZOE_EXPECTS(!impl_->open[module].empty(), "release of module '", m.name, "' without an open fetch of it");
  const std::vector<parameter_id> to_free = impl_->policy.on_release(module);
  const std::shared_ptr<detail::fetch_state> fetch = impl_->open[module].front();
  impl_->open[module].pop_front();
  fetch->released = true;
  bool dirty = false;
  for (const parameter_id p : m.parameters) {
    gathered_parameter& g = impl_->params[p];
    --g.holders;
    if (fetch->pinned) g.block.unpin();
    if (g.block && !stream.is_default()) g.block.record_use(stream);
    dirty = dirty || g.dirty;
  }
  if (dirty && !stream.is_default()) {
    // The write-back copies from the device on the swapper's stream: the caller's writes first.
    lock.unlock();
    impl_->dev.synchronize(stream);
    lock.lock();
  }
  for (const parameter_id p : to_free) impl_->free(p, lock);
  impl_->pump();
  impl_->changed.notify_all();
}

void coordinator::end_step() {
  std::unique_lock lock(impl_->mutex);
  for (const parameter_id p : impl_->policy.end_step()) impl_->free(p, lock);
  impl_->pump();
  if (!impl_->write_failures.empty()) {
    const carried_error first = impl_->write_failures.front();
    impl_->write_failures.clear();
    first.raise();
  }
}

void coordinator::mark_dirty(module_id module) {
  const std::lock_guard lock(impl_->mutex);
  const module_layout& m = impl_->tiers.layout().module(module);
  // A waited fetch has its parameters gathered and no write-back of them reading them.
  const auto& fetches = impl_->open[module];
  ZOE_EXPECTS(std::any_of(fetches.begin(), fetches.end(), [](const auto& f) { return f->pinned; }),
              "mark_dirty of module '", m.name, "' without a fetch of it that was waited for and not released");
  for (const parameter_id p : m.parameters) {
    gathered_parameter& g = impl_->params[p];
    g.dirty = true;
    impl_->tiers.set_dirty(p, working_state(impl_->tiers.layout().parameter(p)), true);
  }
}

void coordinator::flush() {
  std::unique_lock lock(impl_->mutex);
  impl_->pump();
  for (parameter_id p = 0; p < impl_->params.size(); ++p) {
    gathered_parameter& g = impl_->params[p];
    if (g.dirty && !g.writing && g.at == gathered_parameter::phase::gathered) impl_->start_writeback(p);
  }
  while (!impl_->writebacks.empty()) {
    impl_->wait_outside(impl_->params[impl_->writebacks.front()].out, lock);
    impl_->pump();
  }
  if (!impl_->write_failures.empty()) {
    const carried_error first = impl_->write_failures.front();
    impl_->write_failures.clear();
    first.raise();
  }
}

void coordinator::drop_gathered() {
  flush();
  std::unique_lock lock(impl_->mutex);
  const model_layout& layout = impl_->tiers.layout();
  for (const module_layout& m : layout.modules()) {
    ZOE_EXPECTS(impl_->open[m.id].empty(), "cannot drop the gathered parameters while module '", m.name,
                "' has an open fetch: release it first");
  }
  for (parameter_id p = 0; p < impl_->params.size(); ++p) {
    gathered_parameter& g = impl_->params[p];
    if (g.at == gathered_parameter::phase::none) continue;
    ZOE_EXPECTS(g.at == gathered_parameter::phase::gathered, "cannot drop the gathered parameters while parameter '",
                layout.parameter(p).name, "' is being prefetched: end the step first");
    ZOE_ASSERT(!g.dirty && !g.writing);  // flushed above, and no fetch could dirty it since
    if (g.live) {
      g.live = false;
      impl_->policy.on_freed(p);
    }
    impl_->drop(p);
  }
}

void* coordinator::address(parameter_id p) const {
  const std::lock_guard lock(impl_->mutex);
  const parameter_layout& param = impl_->tiers.layout().parameter(p);
  const gathered_parameter& g = impl_->params[p];
  ZOE_EXPECTS(g.at == gathered_parameter::phase::gathered, "parameter '", param.name, "' is not gathered");
  return g.block.data();
}

std::uint64_t coordinator::full_bytes(parameter_id p) const { return impl_->full_bytes(p); }

coordinator_stats coordinator::stats() const {
  const std::lock_guard lock(impl_->mutex);
  coordinator_stats out = impl_->stats;
  out.arena = impl_->arena.stats();
  return out;
}

const prefetch_policy& coordinator::policy() const noexcept { return impl_->policy; }

const allocators::arena& coordinator::arena() const noexcept { return impl_->arena; }

}  // namespace zoe::engine
