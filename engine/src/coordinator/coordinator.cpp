#include "zoe/engine/coordinator/coordinator.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"

namespace zoe::engine {

namespace {
using clock = std::chrono::steady_clock;
// A demand fetch that has waited this long for arena space says what holds it.
constexpr auto arena_wait_warning = std::chrono::seconds(10);

// Parameters gathered by one collective, in the order they were started (see Buckets in
// coordinator.hpp). Sealed when the fetch that started them returns: only then is it issued, so
// its members never depend on how fast its reads arrive.
struct gather_bucket {
  std::vector<parameter_id> members;
  module_id module = 0;       // whose parameters they all are
  std::uint64_t numel = 0;    // gathered elements
  std::uint64_t scratch = 0;  // qwZ scratch bytes it needs
  bool hpz = false;           // from the secondary shards within comm.hpz()
  bool sealed = false;
};

bool is_memory_error(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const memory_error&) {
    return true;
  } catch (...) {
    return false;
  }
}
}  // namespace

coordinator_options coordinator_options_of(const engine_config& config, const footprint_plan& plan) {
  return {.arena_bytes = plan.arena_bytes,
          .limits = prefetch_limits::from(config.zero),
          .allgather_bucket_numel = config.zero.allgather_bucket_size,
          .quantized_weights = config.zero.zero_quantized_weights,
          .quantized_scratch_bytes = plan.qwz_scratch_bytes,
          .hpz_secondary_bytes = plan.hpz_secondary_bytes,
          .rank_independent_order = false};
}

// One parameter's full copy, as the coordinator holds it.
struct gathered_parameter {
  enum class phase : std::uint8_t { none, reading, gathered };
  phase at = phase::none;
  allocators::arena_block block;         // set in reading and gathered
  swap_ticket in;                        // the shard's read (reading)
  bool arrived = false;                  // reading: its read is done and the gather stream waits for it (unpinned)
  device_event ready;                    // recorded after the gather
  bool live = false;                     // the policy counts it in flight or gathered
  std::uint32_t holders = 0;             // open fetches of modules that have it
  std::optional<carried_error> failure;  // its read failed; thrown by the waits of the fetches that hold it
};

struct coordinator::impl {
  impl(tier_manager& t, parameter_swapper& s, communicator& c, device& d, const coordinator_options& o)
      : tiers(t),
        swapper(s),
        comm(c),
        dev(d),
        options(o),
        ordered(o.rank_independent_order || c.size() > 1),
        hpz_on(c.hpz().size() > 1),
        stream(d.create_stream()),
        arena(d, o.arena_bytes, allocators::arena_options{.name = "gathered-parameter arena"}),
        policy(t.layout(), o.limits),
        params(t.layout().parameters().size()),
        open(t.layout().modules().size()),
        secondary_offset(params.size(), 0),
        has_secondary(params.size(), false) {
    const model_layout& layout = t.layout();
    if (hpz_on) {
      std::uint64_t at = 0;
      for (const parameter_layout& p : layout.parameters()) {
        secondary_offset[p.id] = at;
        at += align_up(hpz_secondary_shard_bytes(p, c.size(), c.hpz().size()), arena_alignment);
      }
      ZOE_EXPECTS(o.hpz_secondary_bytes >= at, "coordinator: the hpZ secondary shards need ", at,
                  " bytes of device memory; the plan lent ", o.hpz_secondary_bytes,
                  " (zero_optimization.zero_hpz_partition_size)");
      secondary = std::make_unique<device_allocation>(d, at);
    }
    if (o.quantized_weights) {
      std::uint64_t largest = 0;
      for (const parameter_layout& p : layout.parameters()) {
        largest = std::max<std::uint64_t>(largest, quantized_all_gather_scratch(c.size(), p.shard_numel));
      }
      ZOE_EXPECTS(o.quantized_scratch_bytes >= largest, "coordinator: the quantized gathers need ", largest,
                  " bytes of scratch for the largest parameter; the plan lent ", o.quantized_scratch_bytes,
                  " (zero_optimization.zero_quantized_weights)");
      scratch = std::make_unique<device_allocation>(d, o.quantized_scratch_bytes);
    }
  }

  tier_manager& tiers;
  parameter_swapper& swapper;
  communicator& comm;
  device& dev;
  coordinator_options options;
  const bool ordered;    // the rank-independent choices (coordinator.hpp)
  const bool hpz_on;     // comm.hpz() has more than one rank
  device_stream stream;  // the gathers run here; each gathered block records its use of it
  allocators::arena arena;

  mutable std::mutex mutex;
  std::condition_variable changed;  // a gather or a release completed
  prefetch_policy policy;
  std::vector<gathered_parameter> params;
  std::vector<std::deque<std::shared_ptr<detail::fetch_state>>> open;  // per module, oldest first
  std::deque<gather_bucket> gathers;  // started, in order: issued in this order, once sealed
  coordinator_stats stats;
  // hpZ: each parameter's secondary shard at its offset; whether it holds one (a world gather of it
  // was started since the last drop_gathered: it is issued before any later gather of it).
  std::vector<std::uint64_t> secondary_offset;
  std::vector<bool> has_secondary;
  std::unique_ptr<device_allocation> secondary;
  std::unique_ptr<device_allocation> scratch;  // qwZ, lent to one bucket's gather at a time (stream order)

  [[nodiscard]] std::uint64_t shard_bytes(parameter_id p) const {
    return state_bytes(tiers.layout().parameter(p), working_state(tiers.layout().parameter(p)));
  }
  // This rank dropped a collective the peers will issue: at world size > 1 they must fail naming
  // it rather than match its next collective with the dropped one (communicator::abort).
  void abort_world(std::string_view reason) noexcept {
    if (comm.size() > 1) comm.abort(reason);
  }
  [[nodiscard]] std::uint64_t full_bytes(parameter_id p) const { return shard_bytes(p) * comm.size(); }
  [[nodiscard]] std::uint64_t module_bytes(module_id m) const {
    std::uint64_t total = 0;
    for (const parameter_id p : tiers.layout().module(m).parameters) {
      total += align_up(full_bytes(p), arena.alignment());
    }
    return total;
  }
  // The largest arena block a parameter without one may still ask for (0 when all have one).
  [[nodiscard]] std::uint64_t largest_not_gathered() const {
    std::uint64_t largest = 0;
    for (parameter_id p = 0; p < params.size(); ++p) {
      if (!params[p].block) largest = std::max(largest, align_up(full_bytes(p), arena.alignment()));
    }
    return largest;
  }
  [[nodiscard]] std::byte* own_shard(parameter_id p) const {
    return static_cast<std::byte*>(params[p].block.data()) + comm.rank() * shard_bytes(p);
  }
  [[nodiscard]] std::uint64_t slice_bytes(parameter_id p) const { return full_bytes(p) / comm.hpz().size(); }
  [[nodiscard]] std::byte* secondary_shard(parameter_id p) const { return secondary->data() + secondary_offset[p]; }
  // The arena bytes of the parameters gathered or in flight for the policy: set only by the calls
  // (start, free, evict), never by timing, so every rank counts the same.
  [[nodiscard]] std::uint64_t live_bytes() const {
    std::uint64_t total = 0;
    for (parameter_id p = 0; p < params.size(); ++p) {
      if (params[p].live && params[p].block) total += align_up(full_bytes(p), arena.alignment());
    }
    return total;
  }

  void pump();  // under the lock
  bool mark_arrivals();
  void issue(const gather_bucket& bucket);
  void communicate(const std::vector<parameter_id>& members, bool hpz);
  void fail_gather(parameter_id p, const carried_error& e);
  void finish_gather(parameter_id p);
  bool start(parameter_id p, bool demand, bool backward, std::unique_lock<std::mutex>& lock);
  void enqueue(parameter_id p, bool hpz);
  void seal() noexcept {
    if (!gathers.empty() && !gathers.back().sealed) {
      gathers.back().sealed = true;
      changed.notify_all();
    }
  }
  void wait_head(std::unique_lock<std::mutex>& lock);
  void settle(parameter_id p, std::unique_lock<std::mutex>& lock);
  allocators::arena_block allocate_waiting(parameter_id p, std::unique_lock<std::mutex>& lock);
  // Every open fetch was opened on the calling thread: only its own releases could free space.
  [[nodiscard]] bool only_this_thread_holds() const {
    const std::thread::id me = std::this_thread::get_id();
    return std::all_of(open.begin(), open.end(), [&](const auto& fetches) {
      return std::all_of(fetches.begin(), fetches.end(), [&](const auto& f) { return f->opened_on == me; });
    });
  }
  [[nodiscard]] std::string no_room(parameter_id p, std::uint64_t bytes) const;
  bool evict_one();
  bool evict_ordered(std::unique_lock<std::mutex>& lock);
  void free(parameter_id p, std::unique_lock<std::mutex>& lock);
  // The policy released all of `ps` at once: none is live any more, before any free() waits (a
  // gather issued meanwhile must not report one of them gathered to the policy).
  void free_all(const std::vector<parameter_id>& ps, std::unique_lock<std::mutex>& lock) {
    for (const parameter_id p : ps) params[p].live = false;
    for (const parameter_id p : ps) free(p, lock);
  }
  void drop(parameter_id p);
  // A copy of the ticket: once the lock is dropped, another caller may reset the one it came from.
  // Whoever waits on a read waits for the compute (a fetch, or room for one): a prefetch becomes demand.
  void wait_outside(swap_ticket t, std::unique_lock<std::mutex>& lock) {  // NOLINT(performance-unnecessary-value-param)
    t.raise_to_demand();
    lock.unlock();
    t.wait_ready();
    lock.lock();
  }
};

// Issues the sealed buckets whose shards arrived, oldest first (the order every rank issues them
// in). A bucket behind one still reading waits for it.
void coordinator::impl::pump() {
  bool any = false;
  mark_arrivals();
  while (!gathers.empty() && gathers.front().sealed &&
         std::all_of(gathers.front().members.begin(), gathers.front().members.end(),
                     [&](parameter_id p) { return params[p].in.ready(); })) {
    const gather_bucket bucket = std::move(gathers.front());
    gathers.pop_front();
    issue(bucket);
    any = true;
  }
  if (any) changed.notify_all();
}

// A read that arrived before its bucket is issued: the gather stream waits for its copies now and
// the block is unpinned, so that compaction may move it while the bucket waits for its other reads
// or its seal (a pinned block the arena cannot move could leave the fetch that fills the bucket
// without room, waiting for a seal that only its own return brings). True when one arrived.
bool coordinator::impl::mark_arrivals() {
  bool any = false;
  for (const gather_bucket& b : gathers) {
    for (const parameter_id p : b.members) {
      gathered_parameter& g = params[p];
      if (g.arrived || g.at != gathered_parameter::phase::reading || !g.in.ready() || g.in.failure()) continue;
      g.in.wait(stream.view());  // never throws: it succeeded
      g.block.record_use(stream.view());
      g.block.unpin();
      g.arrived = true;
      any = true;
    }
  }
  return any;
}

void coordinator::impl::issue(const gather_bucket& bucket) {
  std::vector<parameter_id> ok;
  std::optional<carried_error> failed;
  for (const parameter_id p : bucket.members) {
    try {
      if (!params[p].arrived) params[p].in.wait(stream.view());  // the gather runs after the shard's copies
      ok.push_back(p);
    } catch (...) {
      const carried_error e = carried_error::of(std::current_exception());
      fail_gather(p, e);
      if (!failed) failed = e;
    }
  }
  // Ranks must issue the same collectives: a bucket with a failed read is not issued at all,
  // rather than issued with a part left out, and the world is aborted so that the other ranks
  // fail naming this one instead of matching its next gather with the one it dropped.
  if (failed && ordered) {
    for (const parameter_id p : ok) fail_gather(p, *failed);
    ok.clear();
    abort_world(str("a gather bucket was dropped: ", failed->message));
  }
  if (ok.empty()) return;
  try {
    communicate(ok, bucket.hpz);
  } catch (...) {
    const carried_error e = carried_error::of(std::current_exception());
    for (const parameter_id p : ok) fail_gather(p, e);
    return;
  }
  for (const parameter_id p : ok) finish_gather(p);
}

// One collective for the bucket's parameters (the ones whose reads succeeded).
void coordinator::impl::communicate(const std::vector<parameter_id>& members, bool hpz) {
  const auto gather = [&](communicator& group, const std::vector<gather_part>& parts) {
    if (parts.size() == 1) {
      group.all_gather(parts[0].send, parts[0].recv, parts[0].bytes, stream.view());
    } else {
      group.all_gather_coalesced(parts, stream.view());
    }
  };
  std::vector<gather_part> parts;
  if (hpz) {
    // The hpZ group's ranks are consecutive world ranks and hold consecutive slices, so their
    // secondary shards in group-rank order are the full parameter.
    for (const parameter_id p : members) parts.push_back({secondary_shard(p), params[p].block.data(), slice_bytes(p)});
    gather(comm.hpz(), parts);
    stats.hpz_gathers += members.size();
  } else if (options.quantized_weights) {
    std::vector<quantized_gather_part> q;
    for (const parameter_id p : members) {
      const parameter_layout& pl = tiers.layout().parameter(p);
      q.push_back({own_shard(p), params[p].block.data(), static_cast<std::size_t>(pl.shard_numel), pl.dtype});
    }
    // One scratch for every bucket: the gathers run in order on one stream, each after the last.
    quantized_all_gather(comm, dev, q, std::span(scratch->data(), scratch->size()), stream.view());
  } else {
    for (const parameter_id p : members) parts.push_back({own_shard(p), params[p].block.data(), shard_bytes(p)});
    gather(comm, parts);
  }
  ++stats.collectives;
  if (hpz_on && !hpz) {
    // The forward gather leaves this rank's slice over the hpZ group for backward's gathers.
    for (const parameter_id p : members) {
      dev.copy_async(secondary_shard(p),
                     static_cast<std::byte*>(params[p].block.data()) + comm.hpz().rank() * slice_bytes(p),
                     slice_bytes(p), copy_kind::device_to_device, stream.view());
    }
  }
}

void coordinator::impl::fail_gather(parameter_id p, const carried_error& e) {
  gathered_parameter& g = params[p];
  g.failure = e;
  ++stats.failed_gathers;
  has_secondary[p] = false;           // never gather from a slice that was not written
  g.block.record_use(stream.view());  // the stream waits for the copies of the pieces that arrived
  if (!g.arrived) g.block.unpin();
  g.arrived = false;
  g.block.reset();
  g.at = gathered_parameter::phase::none;
  if (g.live) {
    g.live = false;
    policy.on_freed(p);
  }
}

void coordinator::impl::finish_gather(parameter_id p) {
  gathered_parameter& g = params[p];
  if (!g.ready.valid()) g.ready = dev.create_event();
  dev.record(g.ready, stream.view());
  g.block.record_use(stream.view());
  if (!g.arrived) g.block.unpin();  // until a fetch's wait pins it, compaction may move it
  g.arrived = false;
  g.at = gathered_parameter::phase::gathered;
  // Not live: the policy released it and a free() waits for this gather outside the lock (it drops
  // the block when it wakes); the policy would refuse it as gathered.
  if (g.live) policy.on_gathered(p);
}

// Gathers `p` for the policy (from the hpZ secondary shards when `backward` and it has one).
// False when a prefetch backed off (the arena is full).
bool coordinator::impl::start(parameter_id p, bool demand, bool backward, std::unique_lock<std::mutex>& lock) {
  gathered_parameter& g = params[p];
  if (g.block) {
    // Still here: a free() waits for its gather. The data is the newest there is.
    g.live = true;
    if (g.at == gathered_parameter::phase::gathered) policy.on_gathered(p);
    return true;
  }
  g.failure.reset();
  const std::uint64_t bytes = full_bytes(p);
  std::optional<allocators::arena_block> block;
  if (ordered) {
    // Decided on the live bytes, which every rank counts alike; the allocation then waits for the
    // space to settle (coordinator.hpp, Order of collectives).
    const std::uint64_t need = align_up(bytes, arena.alignment());
    const auto fits = [&] { return live_bytes() + need <= arena.capacity(); };
    if (demand) {
      while (!fits() && evict_ordered(lock)) {
      }
      block = allocate_waiting(p, lock);
    } else if (fits()) {
      block = allocate_waiting(p, lock);
    }
  } else if (demand) {
    block = allocate_waiting(p, lock);
  } else {
    // A prefetch takes a hole or backs off: its own fetch comes back for it, and compacting for
    // it would stall the compute on the arena's copies for a read not yet needed.
    block = arena.try_allocate_in_place(bytes);
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
  const bool from_secondary = backward && hpz_on && has_secondary[p];
  if (from_secondary) {
    g.in = {};  // this rank's part is in its secondary shard: nothing to read
  } else {
    try {
      g.in = swapper.swap_in(p, own_shard(p), demand ? move_priority::demand : move_priority::prefetch);
    } catch (...) {
      g.block.unpin();
      g.block.reset();
      policy.on_freed(p);
      throw;
    }
    // Its world gather, issued before any later gather of `p`, leaves the secondary shard.
    if (hpz_on) has_secondary[p] = true;
  }
  g.at = gathered_parameter::phase::reading;
  g.live = true;
  enqueue(p, from_secondary);
  // A wait that found `p` still being started sleeps on `changed` until its read exists.
  changed.notify_all();
  ++(demand ? stats.gathers : stats.prefetches);
  stats.peak_live_numel = std::max(stats.peak_live_numel, policy.live_numel());
  return true;
}

// Adds `p` to the open bucket, or opens one: a bucket holds one module's parameters, at most
// allgather_bucket_numel gathered elements (a larger parameter alone) and, with qwZ, no more than
// the scratch lent. One module's: a bucket is issued once all its reads arrived, so a bucket that
// also held the next modules' prefetches would keep the module fetched first waiting for reads it
// does not need (zoe-bench params: the compute waited 0.145 of the step against 0.035).
void coordinator::impl::enqueue(parameter_id p, bool hpz) {
  const parameter_layout& pl = tiers.layout().parameter(p);
  const std::uint64_t numel = pl.padded_numel(comm.size());
  const bool quantized = options.quantized_weights && !hpz;
  const auto scratch_with = [&](const gather_bucket& b) -> std::uint64_t {
    if (!quantized) return 0;
    std::vector<std::size_t> counts;
    for (const parameter_id m : b.members) counts.push_back(tiers.layout().parameter(m).shard_numel);
    counts.push_back(pl.shard_numel);
    return quantized_all_gather_scratch(comm.size(), counts);
  };
  if (!gathers.empty() && !gathers.back().sealed) {
    gather_bucket& b = gathers.back();
    const std::uint64_t scratch_need = scratch_with(b);
    if (b.hpz == hpz && b.module == pl.module &&
        numel <= options.allgather_bucket_numel - std::min(b.numel, options.allgather_bucket_numel) &&
        (!quantized || scratch_need <= options.quantized_scratch_bytes)) {
      b.members.push_back(p);
      b.numel += numel;
      b.scratch = scratch_need;
      return;
    }
    b.sealed = true;
  }
  gather_bucket b;
  b.hpz = hpz;
  b.module = pl.module;
  b.scratch = scratch_with(b);
  b.members.push_back(p);
  b.numel = numel;
  gathers.push_back(std::move(b));
}

// Waits for the next bucket's progress: its first read still running, or (while it is being
// filled by a fetch on another thread) for that fetch to seal it.
void coordinator::impl::wait_head(std::unique_lock<std::mutex>& lock) {
  if (!gathers.empty() && gathers.front().sealed) {
    for (const parameter_id p : gathers.front().members) {
      if (!params[p].in.ready()) {
        wait_outside(params[p].in, lock);
        return;
      }
    }
    return;  // all arrived: the caller's pump() issues it
  }
  changed.wait_for(lock, std::chrono::seconds(1));
}

// Until `p`'s gather is issued (or failed): a started gather is always issued, in order.
void coordinator::impl::settle(parameter_id p, std::unique_lock<std::mutex>& lock) {
  while (params[p].at == gathered_parameter::phase::reading) {
    wait_head(lock);
    pump();
  }
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
    // Ordered, what to evict was decided before (start); here the space only settles.
    if (!ordered && evict_one()) continue;
    // Space comes back as reads arrive (their parameters become evictable once gathered); after
    // that only other callers' releases free any. A read that arrived since the allocation failed
    // unpinned its block, so compaction may now move it: try again before waiting or refusing
    // (refusing here failed 1 run in 8 of CoordinatorOrder.TheGathersAreTheSameWhateverTheTiming,
    // with every block movable and enough space free).
    if (mark_arrivals()) continue;
    const swap_ticket* reading = nullptr;
    for (const gather_bucket& b : gathers) {
      for (const parameter_id m : b.members) {
        if (reading == nullptr && !params[m].in.ready()) reading = &params[m].in;
      }
    }
    if (reading != nullptr) {
      wait_outside(*reading, lock);
    } else if (!gathers.empty() && gathers.front().sealed) {
      wait_head(lock);
    } else if (only_this_thread_holds()) {
      throw memory_error(no_room(p, bytes));
    } else {
      changed.wait_for(lock, std::chrono::seconds(1));
      if (!warned && clock::now() - since > arena_wait_warning) {
        warned = true;
        const allocators::arena_stats a = arena.stats();
        log::warn("fetch of parameter '", tiers.layout().parameter(p).name, "' has waited ",
                  std::chrono::duration_cast<std::chrono::seconds>(clock::now() - since).count(), " s for ",
                  format_bytes(bytes), " of the gathered-parameter arena (", format_bytes(a.used), " of ",
                  format_bytes(a.capacity), " held by modules fetched and not released)");
        // What holds the arena: a pinned block cannot be moved by compaction.
        for (parameter_id q = 0; q < params.size(); ++q) {
          const gathered_parameter& g = params[q];
          if (!g.block || !g.block.pinned()) continue;
          log::warn("  pinned: parameter '", tiers.layout().parameter(q).name, "' (",
                    g.at == gathered_parameter::phase::reading ? "reading" : "gathered", ", ", g.holders,
                    " open fetch(es))");
        }
      }
    }
    pump();
  }
}

// Why `p` cannot be gathered while only the caller's own releases could make room: the modules
// it holds, and how the free space lies around their pinned blocks.
std::string coordinator::impl::no_room(parameter_id p, std::uint64_t bytes) const {
  const model_layout& layout = tiers.layout();
  const allocators::arena_stats a = arena.stats();
  std::string held;
  for (const module_layout& m : layout.modules()) {
    if (open[m.id].empty()) continue;
    std::uint64_t gathered = 0;
    for (const parameter_id q : m.parameters) {
      if (params[q].block) gathered += align_up(full_bytes(q), arena.alignment());
    }
    held += str(held.empty() ? "" : ", ", "'", m.name, "' (", format_bytes(gathered), ")");
  }
  return str("module '", layout.module(layout.parameter(p).module).name, "' needs ", format_bytes(bytes),
             " in one piece for parameter '", layout.parameter(p).name, "' in the ", format_bytes(a.capacity),
             " gathered-parameter arena, which has ", format_bytes(a.free), " free in pieces of at most ",
             format_bytes(a.largest_hole), " around the blocks of the modules this thread holds (",
             held.empty() ? std::string("none") : held,
             "); only their release can make room, and no other thread holds a fetch that could: release a "
             "module first, or raise the device budget (zoe.device.budget_bytes) or stage3_max_live_parameters, "
             "which size the arena");
}

// Frees one parameter gathered ahead that no open fetch holds. False when there is none.
bool coordinator::impl::evict_one() {
  for (parameter_id p = 0; p < params.size(); ++p) {
    gathered_parameter& g = params[p];
    if (g.at != gathered_parameter::phase::gathered || !g.live || g.holders > 0) continue;
    g.live = false;
    policy.on_freed(p);
    drop(p);
    ++stats.evictions;
    return true;
  }
  return false;
}

// As evict_one, choosing by what the calls set (live, held), not by whether its read has
// arrived: one still in flight is gathered first (its collective was started on every rank).
bool coordinator::impl::evict_ordered(std::unique_lock<std::mutex>& lock) {
  for (parameter_id p = 0; p < params.size(); ++p) {
    gathered_parameter& g = params[p];
    if (!g.live || !g.block || g.holders > 0) continue;
    settle(p, lock);
    if (!g.live) return true;  // its read failed: freed already
    g.live = false;
    policy.on_freed(p);
    drop(p);
    ++stats.evictions;
    return true;
  }
  return false;
}

// The policy released `p`: free its memory.
void coordinator::impl::free(parameter_id p, std::unique_lock<std::mutex>& lock) {
  gathered_parameter& g = params[p];
  g.live = false;
  if (g.at == gathered_parameter::phase::reading) {
    // Gathered ahead for a use that did not come: its gather is issued all the same (every rank
    // issues every gather it started, whether or not the read has arrived when the use is dropped).
    settle(p, lock);
    if (g.live) return;  // fetched again while we waited
  }
  drop(p);
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
  impl_->seal();
  while (!impl_->gathers.empty()) {
    impl_->wait_head(lock);
    try {
      impl_->pump();
    } catch (const std::exception& e) {
      log::error("gathered-parameter coordinator: while stopping: ", e.what());
    }
  }
  try {
    impl_->dev.synchronize(impl_->stream.view());
  } catch (const std::exception& e) {
    log::error("gathered-parameter coordinator: the gather stream failed: ", e.what());
  }
  // The blocks go back to the arena before it is destroyed (params is declared after it).
}

void coordinator::begin_step(step_kind kind) {
  const std::lock_guard lock(impl_->mutex);
  impl_->policy.begin_step(kind);
}

fetch_handle coordinator::fetch(module_id module, fetch_pass pass) {
  std::unique_lock lock(impl_->mutex);
  const bool backward = pass == fetch_pass::backward;
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
  state->opened_on = std::this_thread::get_id();
  impl_->open[module].push_back(state);
  for (const parameter_id p : m.parameters) ++impl_->params[p].holders;
  try {
    for (const parameter_id p : decision.gather) impl_->start(p, true, backward, lock);
  } catch (...) {
    // The peers start every member of the fetch: the bucket sealed below holds fewer here.
    impl_->abort_world(
        str("the fetch of module '", m.name, "' was cut short: ", carried_error::of(std::current_exception()).message));
    impl_->seal();  // what was started is issued
    // The parameters not started are released in the policy's view; the fetch stays open, so its
    // release (which the policy expects) still comes.
    for (const parameter_id p : decision.gather) {
      if (!impl_->params[p].live && impl_->policy.status(p) != gather_status::released) impl_->policy.on_freed(p);
    }
    for (const parameter_id p : decision.prefetch) impl_->policy.on_freed(p);
    // No room and none to come (allocate_waiting): the caller is told so and may release a module
    // and fetch again, so the fetch is closed, as a release would, rather than left open.
    if (is_memory_error(std::current_exception())) {
      // release() ends the oldest fetch of the module: make it this one.
      auto& fetches = impl_->open[module];
      std::erase(fetches, state);
      fetches.push_front(state);
      lock.unlock();
      release(module);
    }
    throw;
  }
  // Ahead of need, in trace order: the first that does not fit, or whose read cannot start now
  // (another mover has its state), ends the walk; it and the rest are released again and their
  // own fetches gather them (and report a refusal that lasts). A prefetch never fails this fetch.
  // At world size > 1 a back-off is decided on the live bytes (start), the same on every rank; a
  // read the swapper refuses (its state is being moved by the optimizer step or a checkpoint,
  // which run between steps) does not happen within a step. The prefetches take the fetch's pass.
  bool backed_off = false;
  for (const parameter_id p : decision.prefetch) {
    if (backed_off) {
      impl_->policy.on_freed(p);
      continue;
    }
    try {
      backed_off = !impl_->start(p, false, backward, lock);
    } catch (const std::exception& e) {
      if (!impl_->params[p].live && impl_->policy.status(p) != gather_status::released) impl_->policy.on_freed(p);
      ++impl_->stats.prefetch_backoffs;
      backed_off = true;
      // A back-off decided by a throw is this rank's alone: the peers prefetch what it does not.
      impl_->abort_world(str("the prefetch for module '", m.name, "' failed: ", e.what()));
    }
  }
  impl_->seal();  // the fetch's last bucket: its members are now what every rank started
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
    if (all) break;
    if (!impl_->gathers.empty()) {
      // The next gather is the oldest bucket's: wait for it, whoever's it is.
      impl_->wait_head(lock);
    } else {
      impl_->changed.wait(lock);  // another caller is starting it
    }
  }
  if (!state.pinned) {
    // Pinned where they lie, the module's blocks could split the arena until its release
    // (coordinator.hpp, Held blocks): compaction slides them down first when, pinned in place, they
    // would leave no span free of pins for the largest parameter not gathered, and unpinned they
    // would. Only then: compacting whenever the free space is in pieces (as prefetching leaves it)
    // stalled every fetch behind the arena's copies (zoe-bench params: swap-in 1.7 -> 1.05 GiB/s),
    // and whenever no piece held the largest parameter, a model whose largest block (GPT-2's tied
    // embedding) takes half an arena compacted at nearly every wait (zoe.torch.bench at 124M: 23
    // compactions and 4.2 GB moved per step). An allocation that finds no hole compacts itself.
    for (const parameter_id p : members) impl_->params[p].block.pin();
    const std::uint64_t need = impl_->largest_not_gathered();
    if (impl_->arena.largest_unpinned_span() < need) {
      for (const parameter_id p : members) impl_->params[p].block.unpin();
      if (impl_->arena.largest_unpinned_span() >= need) impl_->arena.compact();
      for (const parameter_id p : members) impl_->params[p].block.pin();
    }
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
  for (const parameter_id p : m.parameters) {
    gathered_parameter& g = impl_->params[p];
    --g.holders;
    if (fetch->pinned) g.block.unpin();
    if (g.block && !stream.is_default()) g.block.record_use(stream);
  }
  impl_->free_all(to_free, lock);
  impl_->pump();
  impl_->changed.notify_all();
}

void coordinator::end_step() {
  std::unique_lock lock(impl_->mutex);
  impl_->free_all(impl_->policy.end_step(), lock);
  impl_->pump();
}

void coordinator::drop_gathered() {
  std::unique_lock lock(impl_->mutex);
  impl_->pump();
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
    if (g.live) {
      g.live = false;
      impl_->policy.on_freed(p);
    }
    impl_->drop(p);
  }
  // The homes changed: the next forward gather leaves new secondary shards.
  std::fill(impl_->has_secondary.begin(), impl_->has_secondary.end(), false);
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
