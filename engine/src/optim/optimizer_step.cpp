// The pipelined optimizer step (optimizer_step.hpp): the shards with a state on nvme piece by
// piece through pinned slots (reads ahead on the I/O thread, Adam here, writes to the shadows
// behind), then the shards in memory (those with a state in device memory, then those all in host
// memory), then the commit.
#include "zoe/engine/optim/optimizer_step.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstring>
#include <mutex>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "pending_space.hpp"
#include "step_io.hpp"
#include "tiers/step_pieces.hpp"
#include "undo_log.hpp"
#include "zoe/allocators/buffer_pool.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/stream_launch.hpp"
#include "zoe/core/units.hpp"
#include "zoe/kernels/cuda.hpp"

namespace zoe::engine {
namespace {

using clock = std::chrono::steady_clock;

double seconds_since(clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); }

// The states Adam rewrites (the gradient is only read).
constexpr std::array<state_kind, 4> rewritten = {state_kind::working, state_kind::master, state_kind::exp_avg,
                                                 state_kind::exp_avg_sq};

bool is_rewritten(state_kind s) noexcept { return s != state_kind::gradient; }

std::size_t index_of(state_kind s) noexcept { return static_cast<std::size_t>(s); }

// Adam's view of one piece: `data[s]` holds elements [0, count) of state s of `p`.
kernels::adam_shard shard_view(const parameter_layout& p, const std::array<std::byte*, state_kind_count>& data,
                               std::uint64_t count) {
  const auto floats = [&](state_kind s) {
    return std::span<float>(
        reinterpret_cast<float*>(data[index_of(s)]),  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
        static_cast<std::size_t>(count));
  };
  kernels::adam_shard shard{
      .params = floats(state_kind::master),
      .exp_avg = floats(state_kind::exp_avg),
      .exp_avg_sq = floats(state_kind::exp_avg_sq),
      .grad = kernels::const_tensor_view(state_dtype(p, state_kind::gradient), data[index_of(state_kind::gradient)],
                                         static_cast<std::size_t>(count)),
      .working = std::nullopt};
  if (state_bytes(p, state_kind::working) > 0) {
    shard.working = kernels::tensor_view{state_dtype(p, state_kind::working), data[index_of(state_kind::working)],
                                         static_cast<std::size_t>(count)};
  }
  return shard;
}

// Whether a shard speculated with `a` and stepped with `b` gets the same bits: every setting
// equal, the floats bit for bit.
bool same_settings(const kernels::adam_config& a, const kernels::adam_config& b) noexcept {
  const auto same = [](float x, float y) { return std::bit_cast<std::uint32_t>(x) == std::bit_cast<std::uint32_t>(y); };
  return same(a.lr, b.lr) && same(a.beta1, b.beta1) && same(a.beta2, b.beta2) && same(a.eps, b.eps) &&
         same(a.weight_decay, b.weight_decay) && a.adamw == b.adamw && a.bias_correction == b.bias_correction &&
         a.step == b.step && same(a.grad_scale, b.grad_scale);
}

// Adds the work `from` did (Adam's time, the bytes read, written and stepped, and the pieces where
// `to` counts them) to `to`: a step's figures, speculation's, or the totals.
template <class Figures>
void add_work(Figures& to, const optimizer_step_stats& from) noexcept {
  to.adam_seconds += from.adam_seconds;
  to.bytes_read += from.bytes_read;
  to.bytes_written += from.bytes_written;
  to.bytes_stepped += from.bytes_stepped;
  if constexpr (requires { to.pieces; }) to.pieces += from.pieces;
}

// Bytes Adam reads and writes for `count` elements of `p`: the fp32 states both ways, the gradient
// read, the working copy written.
std::uint64_t stepped_bytes(const parameter_layout& p, std::uint64_t count) {
  const std::uint64_t fp32 = kernels::dtype_size(kernels::dtype::fp32);
  return count * (6 * fp32 + kernels::dtype_size(state_dtype(p, state_kind::gradient)) +
                  (state_bytes(p, state_kind::working) > 0 ? kernels::dtype_size(p.dtype) : 0));
}

}  // namespace

struct optimizer_step::impl {
  impl(tier_manager& t, device& d, allocators::pinned_host_resource& pinned, mover* m, optimizer_step_options o);
  ~impl() {
    io.reset();  // joins the I/O thread while the slots are still there
    try {
      dev.synchronize(stream.view());
    } catch (const std::exception& e) {
      log::error("optimizer step: the device failed while the step was torn down: ", e.what());
    }
  }
  impl(const impl&) = delete;
  impl& operator=(const impl&) = delete;

  // One piece of a shard with a state on nvme, on its way through the pipeline.
  struct piece_run {
    std::array<allocators::buffer_lease, state_kind_count> slots;
    std::vector<state_kind> read_states;   // the read batch's requests, in order
    std::vector<state_kind> write_states;  // the write batch's requests, in order
    bool read_done = false;
    bool write_done = false;
    bool holding = false;  // counted in the pieces in flight
  };

  // A shard stepped speculatively: the settings it was stepped with and where the new values of its
  // host states lie in `pending` (their offsets; the other states' new values are in the shadows).
  struct speculated_shard {
    kernels::adam_config adam;
    std::array<std::uint64_t, state_kind_count> pending_at{};
  };
  // The leading pieces of a parameter's master shard as backward's fetch brought them (complete once
  // `ready` has), which its speculation reads instead of the NVMe home: piece i (elements [i,
  // i + 1) x piece_numel) in pending memory at chunks[i], each taken on its own, so a master is kept
  // as far as the pending memory has room, in whatever runs are free. Read in order; the first
  // `given_back` are read and free again, for backward's later fetches to keep theirs there while
  // the speculation goes on (it lags behind backward: its I/O is five times the fetch's).
  struct fetched_master {
    parameter_id param = 0;
    std::vector<std::uint64_t> chunks;
    std::uint64_t bytes = 0;  // of the pieces kept
    std::size_t given_back = 0;
    device_event ready;
  };

  const model_layout& layout() const noexcept { return tiers.layout(); }
  bool speculate(parameter_id id, const kernels::adam_config& adam);
  void forgo(parameter_id id) noexcept;
  void drop_speculation() noexcept;
  std::vector<std::span<std::byte>> keep_fetched_master(parameter_id id);
  // Bytes of fp32 piece i of p's master (the last piece may be short).
  std::uint64_t master_piece_bytes(const parameter_layout& p, std::size_t i) const noexcept;
  // What backward's fetch kept of `piece`'s master for this run: the speculated shard's, or in a
  // whole run the one of a shard not speculated (forgone or never handed in: a speculation that
  // declines or is dropped has freed its pieces). nullptr: none.
  fetched_master* master_kept_for(const detail::piece& piece) noexcept;
  // `piece` of that master, or nullptr (it is read from NVMe).
  const std::byte* kept_master(const detail::piece& piece) noexcept;
  // Copies `piece` of that master into `slot` and frees it, if it is kept.
  void take_kept_master(const detail::piece& piece, std::byte* slot) noexcept;
  // Before a whole run reads them: waits for backward's copies into the fetched masters kept, and
  // forgets those whose copy was never recorded.
  void settle_fetched();
  void fetched_master_ready(parameter_id id, device_event ready);
  // Takes p's fetched master out of the registry (nullopt when there is none).
  std::optional<fetched_master> take_fetched(parameter_id id);
  // Waits for a fetched master's copy and frees the pending memory it still holds. Never throws (logs).
  void forget_fetched(fetched_master& f) noexcept;
  // Frees the kept pieces of a fetched master before piece `end` (read into slots).
  void give_back_fetched(fetched_master& f, std::size_t end) noexcept;
  // Forgets every fetched master (none was speculated with) and frees all the pending memory.
  void clear_pending() noexcept;
  // Whether every NVMe state of `p` the step rewrites has a shadow extent (speculation writes there).
  bool shadowed(const parameter_layout& p) const;
  // Forgets a step that failed midway (bounded): its retained slots go back.
  void abandon_part_done() noexcept;
  // Where Adam finds and leaves the host states of a speculated piece from element `first`: their
  // pending memory (nullptr for the others).
  std::array<std::byte*, state_kind_count> pending_staging(const parameter_layout& p, const speculated_shard& shard,
                                                           std::uint64_t first);
  // Copies the pending bytes of the shards a whole run commits into their host homes (host
  // memcpys: nothing can fail).
  void commit_pending() noexcept;
  void execute(std::span<const kernels::adam_config> adam, step_stages which);
  // Every state of every shard -> in flight (rewrite; the gradient read). usage_error, with
  // nothing held, when one is not resident.
  void hold_states();
  // Every held state back to resident; with `commit`, the shadows of the rewritten nvme states
  // become their homes.
  void release_states(bool commit) noexcept;
  void abort_states() noexcept;
  void run_nvme_pieces(std::span<const kernels::adam_config> adam, step_stages which);
  void start_reads(std::size_t i, bool read);
  void start_writes(std::size_t i);
  // Waits for the next I/O batch; throws (io_error / corruption_error naming the state, the
  // parameter, the path and the offset) when it failed.
  void reap_one();
  // Gives back the slots of `r` that no write uses (the gradient's, the device parts'), or all.
  void release_slots(const parameter_layout& p, piece_run& r, bool all) noexcept;
  // The data of every state of one piece where Adam can reach it, Adam, and the new bytes home.
  // `staging[s]`: host memory for state s (a slot, or scratch). `in_place`: the step proper (the
  // in-memory parts change; with `undo`, logged first); otherwise a stage alone (copies only).
  void step_piece(const parameter_layout& p, std::uint64_t first, std::uint64_t count,
                  const std::array<std::byte*, state_kind_count>& staging, bool in_place, bool undo,
                  std::span<const kernels::adam_config> adam);
  void run_memory_shards(std::span<const kernels::adam_config> adam, bool in_place);
  // Steps `p` piece by piece through the scratch memory (step_piece), logging undo if asked.
  void step_staged(const parameter_layout& p, std::span<const kernels::adam_config> adam, bool in_place, bool log_undo);
  // One staging area of `slot` bytes per state in the scratch (grown to hold them: stage runs).
  std::array<std::byte*, state_kind_count> scratch_staging(std::uint64_t slot);
  [[noreturn]] void raise_io(const detail::io_batch_result& r) const;
  void drain() noexcept;
  // Adds the run that just ended (stats) to the totals.
  void account(bool whole, bool failed) noexcept;

  tier_manager& tiers;
  device& dev;
  mover* movers;
  io::swap_store* store;  // the mover's
  optimizer_step_options options;
  detail::tier_of where;
  detail::piece_geometry geometry;
  std::vector<detail::piece> pieces;  // of the shards with a state on nvme, in sub-group order
  // The others, in sub-group order, by where their states are: all in host memory, all in device
  // memory, split between the two (staged through the scratch memory), or split with only the
  // working copy in device memory (detail::working_alone_on_device).
  enum class memory_home { host, device, split, working_on_device };
  // Set while a whole step writes device-resident states in place with nothing to undo them; a
  // failure then leaves `broken` naming it, and every later run is refused (optimizer_step.hpp).
  bool past_undo = false;
  std::string broken;
  // Bounded shadows (zoe.swap.shadows "bounded", optimizer_step.hpp): the NVMe states are written
  // in place. During a whole run, each piece's progress; after a run that failed once a piece had
  // changed, that progress and the settings it ran with, for the next run to roll forward from (the
  // pieces stepped and not known written keep their slots, with the new bytes, in `runs`).
  enum class piece_progress : std::uint8_t { untouched, stepped, written };
  bool bounded = false;  // no shadow extents
  std::vector<piece_progress> progress;
  std::optional<std::vector<kernels::adam_config>> part_done;
  bool piece_changed = false;  // step_piece's Adam ran on the homes (bounded)
  std::vector<std::pair<parameter_id, memory_home>> memory_shards;
  std::vector<std::pair<parameter_id, state_kind>> held;
  std::vector<piece_run> runs;
  std::vector<std::size_t> active;  // the pieces the pipeline runs now (indices into `pieces`), in order
  std::size_t next_read = 0;        // position in `active` of the next piece to read
  std::size_t holding = 0;
  detail::undo_log undo;
  // Speculation (optimizer_step.hpp): per parameter, its speculated shard, if any; during a whole
  // run, whether that run commits it; the pending memory, which of it is free, and the masters
  // backward's fetches left in it.
  std::vector<std::optional<speculated_shard>> speculative;
  std::vector<bool> committing;
  // Not zeroed: only the pages the first-fit space hands out become resident (RSS).
  std::unique_ptr<std::byte[]> pending;  // NOLINT(cppcoreguidelines-avoid-c-arrays): one raw pageable block
  detail::pending_space space;
  std::mutex fetched_mutex;  // the compute thread registers, the speculation thread takes
  std::vector<std::optional<fetched_master>> fetched;
  const speculated_shard* speculating = nullptr;  // while speculate() runs the pipeline
  // speculate()'s settings for the pipeline, one slot per parameter (only the speculated one's is
  // read): made once, not per speculated shard.
  std::vector<kernels::adam_config> speculation_adam;
  fetched_master* speculating_master = nullptr;  // its fetched master, if it has one
  speculation_totals spec_totals;
  std::atomic<std::uint64_t> stepped_ahead{0};  // spec_totals.speculated, for other threads
  // What speculation did for the coming step (its reads, writes, Adam), counted in that step's
  // figures once it runs, or in the totals when the speculation is dropped without one.
  optimizer_step_stats ahead;
  // Staging for the shards split between device and host memory, taken with the step (a failed
  // allocation must come before any state changes; footprint_plan lists it), and for stage runs
  // (made when first needed: they change nothing in place).
  std::vector<std::byte> scratch;
  std::uint64_t staging_slot = 0;  // bytes per state of the planned scratch (detail::staging_slot_bytes)
  device_stream stream;
  optimizer_step_stats stats;
  optimizer_step_stats last_step;  // the last whole step that completed
  optimizer_step_totals totals;
  std::optional<allocators::buffer_pool> pool;
  std::unique_ptr<detail::step_io> io;  // last: its thread uses the pool's memory
};

namespace {

std::uint64_t undo_bytes_needed(const tier_manager& tiers, const detail::tier_of& where) {
  std::uint64_t bytes = 0;
  for (const parameter_layout& p : tiers.layout().parameters()) {
    for (const state_kind s : rewritten) {
      if (detail::logs_undo(p, s, where)) bytes += state_bytes(p, s);
    }
  }
  return bytes;
}

}  // namespace

optimizer_step::impl::impl(tier_manager& t, device& d, allocators::pinned_host_resource& pinned, mover* m,
                           optimizer_step_options o)
    : tiers(t),
      dev(d),
      movers(m),
      store(m != nullptr ? m->store() : nullptr),
      options(o),
      where([&t](parameter_id p, state_kind k) { return t.location(p, k).where; }),
      geometry(detail::make_piece_geometry(
          t.layout(), where, store != nullptr ? store->options().io.block_size : detail::default_piece_chunk)),
      undo([&] {
        const std::uint64_t needed = undo_bytes_needed(t, where);
        ZOE_EXPECTS(o.undo_bytes >= needed, "optimizer step: the undo log needs ", format_bytes(needed),
                    " (footprint_plan::optimizer_undo_bytes) but options.undo_bytes is ", format_bytes(o.undo_bytes));
        return needed;
      }()),
      speculative(t.layout().parameters().size()),
      committing(t.layout().parameters().size(), false),
      space(o.pending_bytes),
      fetched(t.layout().parameters().size()),
      speculation_adam(t.layout().parameters().size()),
      stream(d.create_stream()) {
  try {
    if (o.pending_bytes > 0) pending.reset(new std::byte[static_cast<std::size_t>(o.pending_bytes)]);
  } catch (const std::bad_alloc&) {
    throw memory_error(str("optimizer step: cannot allocate its ", format_bytes(o.pending_bytes),
                           " pending memory (pageable host memory; zoe.optimizer_pending_bytes)"));
  }
  const auto on_nvme = [this](const parameter_layout& p) { return detail::has_nvme_state(p, where); };
  for (const sub_group& g : sub_groups(layout(), options.sub_group_size)) {
    for (parameter_id id = g.first; id < g.last; ++id) {
      const parameter_layout& p = layout().parameter(id);
      if (p.frozen || on_nvme(p)) continue;  // frozen: never stepped
      const bool any_on_device = std::any_of(all_states.begin(), all_states.end(), [&](state_kind k) {
        return state_bytes(p, k) > 0 && where(id, k) == tier::device;
      });
      memory_shards.emplace_back(id, detail::working_alone_on_device(p, where) ? memory_home::working_on_device
                                     : detail::staged_in_memory(p, where)      ? memory_home::split
                                     : any_on_device                           ? memory_home::device
                                                                               : memory_home::host);
    }
  }
  for (const parameter_layout& p : layout().parameters()) {
    for (const state_kind k : rewritten) {
      if (state_bytes(p, k) > 0 && where(p.id, k) == tier::nvme && t.shadow(p.id, k).bytes == 0) bounded = true;
    }
  }
  staging_slot = detail::staging_slot_bytes(layout(), where, geometry);
  try {
    scratch.resize(static_cast<std::size_t>(detail::scratch_bytes(layout(), where, geometry)));
  } catch (const std::bad_alloc&) {
    throw memory_error(str("optimizer step: cannot allocate its ",
                           format_bytes(detail::scratch_bytes(layout(), where, geometry)),
                           " scratch memory (pageable host memory)"));
  }
  if (geometry.slots_per_piece == 0) return;
  ZOE_EXPECTS(store != nullptr, "optimizer step: states are on nvme but no mover with a swap store was given");
  // The planned pinned memory (buffer_count buffers of buffer_bytes) is cut into slots of one
  // piece of an fp32 state: the pipeline holds as many pieces as the slots allow.
  const std::uint64_t planned = static_cast<std::uint64_t>(options.buffer_count) * options.buffer_bytes;
  const std::uint64_t count = planned / geometry.slot_bytes;
  if (count < geometry.slots_per_piece) {
    throw config_error(str("optimizer step: ", options.buffer_count, " optimizer swap buffers of ",
                           format_bytes(options.buffer_bytes), " hold ", count, " slots of ",
                           format_bytes(geometry.slot_bytes), " (one piece of an fp32 state), but one piece needs ",
                           geometry.slots_per_piece,
                           ": raise zero_optimization.offload_optimizer.buffer_count (or "
                           "zero_optimization.sub_group_size, which sizes the buffers)"));
  }
  pool.emplace(pinned, allocators::buffer_pool_options{.buffer_count = static_cast<std::size_t>(count),
                                                       .buffer_size = static_cast<std::size_t>(geometry.slot_bytes),
                                                       .name = "optimizer swap buffers"});
  stats.pinned_bytes = count * geometry.slot_bytes;
  pieces = detail::cut_pieces(layout(), options.sub_group_size, geometry.piece_numel, on_nvme);
  io = std::make_unique<detail::step_io>(*movers);
}

void optimizer_step::impl::execute(std::span<const kernels::adam_config> adam, step_stages which) {
  const auto started = clock::now();
  const std::uint64_t pinned_bytes = stats.pinned_bytes;
  stats = {};
  stats.pinned_bytes = pinned_bytes;
  const bool whole = which.read && which.adam && which.write;
  if (!broken.empty()) {
    throw device_error(
        str("optimizer step: refused: an earlier step failed while it wrote states that live on the "
            "device in place (",
            broken,
            "); they cannot be put back, so no later step would be exact: make a new engine and load "
            "a checkpoint"));
  }
  ZOE_EXPECTS(adam.size() == layout().parameters().size(), "optimizer step: ", adam.size(), " Adam settings for ",
              layout().parameters().size(), " parameters");
  for (const kernels::adam_config& a : adam) kernels::adam_step(a, {});  // checks the settings before anything moves
  if (part_done) {
    ZOE_EXPECTS(whole,
                "optimizer step: the last step failed midway (zoe.swap.shadows bounded): retry it before "
                "timing stages");
    for (std::size_t p = 0; p < adam.size(); ++p) {
      ZOE_EXPECTS(same_settings((*part_done)[p], adam[p]),
                  "optimizer step: the last step failed midway "
                  "(zoe.swap.shadows bounded) and rolls forward only with the settings it ran with; parameter '",
                  layout().parameter(static_cast<parameter_id>(p)).name, "' has others now");
    }
  } else {
    // Bounded: the stage runs write in place what they read (a write without the read would
    // write whatever the slots hold).
    ZOE_EXPECTS(!bounded || which.read || !which.write,
                "optimizer step: with zoe.swap.shadows bounded the "
                "writes are in place and cannot be timed without the reads");
    progress.assign(pieces.size(), piece_progress::untouched);
  }
  // A whole step commits each speculated shard stepped with its settings and steps the others; a
  // stage run writes the shadows the speculation filled.
  committing.assign(layout().parameters().size(), false);
  if (!whole) drop_speculation();
  for (parameter_id id = 0; id < speculative.size(); ++id) {
    if (!speculative[id]) continue;
    if (same_settings(speculative[id]->adam, adam[id])) {
      committing[id] = true;
    } else {
      speculative[id].reset();
      ++spec_totals.dropped;
    }
  }
  active.clear();
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    if (!committing[pieces[i].param] && progress[i] != piece_progress::written) active.push_back(i);
  }
  settle_fetched();
  hold_states();
  past_undo = false;
  try {
    run_nvme_pieces(adam, which);
    if (which.adam) run_memory_shards(adam, whole);
  } catch (...) {
    if (past_undo) {
      try {
        throw;
      } catch (const std::exception& e) {
        broken = e.what();
      } catch (...) {
        broken = "an unknown error";
      }
    }
    drain();
    const bool changed = bounded && whole && std::any_of(progress.begin(), progress.end(), [](piece_progress x) {
                           return x != piece_progress::untouched;
                         });
    try {
      undo.restore(tiers, dev, stream.view());
    } catch (const std::exception& e) {
      // The log may be partly back: a later run would step the rest twice, so none may run.
      log::error("optimizer step: putting the undo log back failed: ", e.what());
      if (broken.empty()) broken = str("putting the undo log back failed: ", e.what());
    }
    abort_states();
    stats.seconds = seconds_since(started);
    account(whole, true);
    if (changed) {
      // Some pieces are stepped in place: they cannot go back, so the next run goes on from here.
      part_done.emplace(adam.begin(), adam.end());
      try {
        throw;
      } catch (const std::exception& e) {
        log::warn("optimizer step: failed midway with zoe.swap.shadows bounded; retry the step to finish it: ",
                  e.what());
      }
    } else {
      part_done.reset();
      runs.clear();
      holding = 0;
    }
    throw;
  }
  part_done.reset();
  // A stage alone changed nothing in place and commits nothing: the homes are as they were.
  release_states(whole);
  undo.clear();
  for (parameter_id id = 0; id < speculative.size(); ++id) {
    if (!committing[id]) continue;
    speculative[id].reset();
    ++spec_totals.committed;
  }
  if (whole) {
    clear_pending();  // every speculation was committed or dropped
    // The step's figures include what speculation did for it inside backward.
    add_work(stats, ahead);
    ahead = {};
  }
  stats.seconds = seconds_since(started);
  account(whole, false);
}

void optimizer_step::impl::account(bool whole, bool failed) noexcept {
  if (failed) {
    ++totals.failed_runs;
  } else if (whole) {
    ++totals.steps;
    last_step = stats;
  } else {
    ++totals.stage_runs;
  }
  totals.seconds += stats.seconds;
  totals.read_wait_seconds += stats.read_wait_seconds;
  totals.write_wait_seconds += stats.write_wait_seconds;
  add_work(totals, stats);
}

void optimizer_step::impl::hold_states() {
  held.clear();
  try {
    for (const parameter_layout& p : layout().parameters()) {
      if (p.frozen) continue;  // not stepped: its value may be read (a fetch) meanwhile
      for (const state_kind s : all_states) {
        if (state_bytes(p, s) == 0) continue;
        const state_status status = tiers.status(p.id, s);
        if (status != state_status::resident) {
          throw usage_error(str("optimizer step: ", state_kind_name(s), " of parameter '", p.name, "' is ",
                                state_status_name(status),
                                "; every state must be resident for the step (nothing may move one meanwhile)"));
        }
        if (!tiers.begin_move(p.id, s, is_rewritten(s) ? move_kind::rewrite : move_kind::read)) {
          throw usage_error(str("optimizer step: ", state_kind_name(s), " of parameter '", p.name,
                                "' is in flight; no move may run during the step"));
        }
        held.emplace_back(p.id, s);
      }
    }
  } catch (...) {
    abort_states();
    throw;
  }
}

void optimizer_step::impl::release_states(bool commit) noexcept {
  for (const auto& [p, s] : held) {
    try {
      tiers.finish_move(p, s);
      if (commit && is_rewritten(s) && tiers.location(p, s).where == tier::nvme && tiers.shadow(p, s).bytes > 0) {
        tiers.commit_shadow(p, s);
      }
    } catch (const std::exception& e) {
      log::error("optimizer step: releasing ", state_kind_name(s), " of parameter ", p, ": ", e.what());
    }
  }
  held.clear();
}

void optimizer_step::impl::abort_states() noexcept {
  for (const auto& [p, s] : held) {
    try {
      tiers.abort_move(p, s);
    } catch (const std::exception& e) {
      log::error("optimizer step: releasing ", state_kind_name(s), " of parameter ", p, ": ", e.what());
    }
  }
  held.clear();
}

void optimizer_step::impl::drain() noexcept {
  while (io && io->outstanding() > 0) {
    try {
      const detail::io_batch_result done = io->wait_any();
      const auto i = static_cast<std::size_t>(done.batch / 2);
      if (done.batch % 2 == 1 && !done.failed_request && i < progress.size()) progress[i] = piece_progress::written;
    } catch (const std::exception& e) {
      log::error("optimizer step: ", e.what());
      break;
    }
  }
  // Every slot back, but those of pieces stepped in place and not known written (bounded): their
  // new bytes are the only copy, for the retry to write.
  holding = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    piece_run& r = runs[i];
    if (bounded && i < progress.size() && progress[i] == piece_progress::stepped) {
      r.read_done = true;
      r.write_done = false;
      r.read_states.clear();
      r.write_states.clear();
      holding += r.holding ? 1 : 0;
      continue;
    }
    runs[i] = piece_run{};
  }
}

void optimizer_step::impl::run_nvme_pieces(std::span<const kernels::adam_config> adam, step_stages which) {
  // A roll-forward keeps the runs of the pieces stepped and not written (drain()).
  if (!part_done || speculating != nullptr) {
    runs.clear();
    holding = 0;
  }
  runs.resize(pieces.size());
  next_read = 0;
  for (std::size_t at = 0; at < active.size(); ++at) {
    const std::size_t i = active[at];
    const detail::piece& piece = pieces[i];
    const parameter_layout& p = layout().parameter(piece.param);
    if (speculating == nullptr && which.write && i < progress.size() && progress[i] == piece_progress::stepped) {
      start_writes(i);  // rolling forward: its new bytes are in its slots
      continue;
    }
    // Read ahead as far as the slots allow (only this piece without pipeline_read: the previous
    // piece's Adam is done by now).
    start_reads(at, which.read);
    piece_run& r = runs[i];
    const auto waiting = clock::now();
    while (!r.read_done) reap_one();
    stats.read_wait_seconds += seconds_since(waiting);
    if (which.adam) {
      // The step proper changes the in-memory parts in place (logged first); a stage alone
      // steps copies of them in scratch memory.
      const bool whole = which.read && which.write;
      std::array<std::byte*, state_kind_count> staging{};
      const std::array<std::byte*, state_kind_count> spare = whole ? staging : scratch_staging(geometry.slot_bytes);
      for (const state_kind s : all_states) {
        const std::size_t k = index_of(s);
        staging[k] = r.slots[k] ? r.slots[k].data() : spare[k];
      }
      if (speculating != nullptr) {
        // Speculation: the host states are stepped in their pending memory, the homes only read.
        const std::array<std::byte*, state_kind_count> held_back = pending_staging(p, *speculating, piece.first);
        for (std::size_t k = 0; k < state_kind_count; ++k) {
          if (held_back[k] != nullptr) staging[k] = held_back[k];
        }
      }
      // The master's piece backward's fetch kept, which start_reads did not read.
      take_kept_master(piece, staging[index_of(state_kind::master)]);
      if (speculating != nullptr) {
        step_piece(p, piece.first, piece.count, staging, false, false, adam);
      } else if (bounded && whole) {
        // In place, with no undo: once Adam ran, the piece can only go forward (a device copy that
        // fails after it leaves the piece torn, so no later step may run).
        piece_changed = false;
        try {
          step_piece(p, piece.first, piece.count, staging, true, false, adam);
        } catch (const std::exception& e) {
          if (piece_changed) broken = e.what();
          throw;
        }
        progress[i] = piece_progress::stepped;
      } else {
        step_piece(p, piece.first, piece.count, staging, whole, whole, adam);
      }
    }
    ++stats.pieces;
    release_slots(p, r, false);  // the slots of what is not written (the gradient, device parts)
    if (which.write) {
      start_writes(i);
      if (!options.pipeline_write) {
        const auto writing = clock::now();
        while (!r.write_done) reap_one();
        stats.write_wait_seconds += seconds_since(writing);
      }
    } else {
      release_slots(p, r, true);
    }
  }
  const auto writing = clock::now();
  while (io && io->outstanding() > 0) reap_one();
  stats.write_wait_seconds += seconds_since(writing);
  runs.clear();
  holding = 0;
}

void optimizer_step::impl::start_reads(std::size_t at, bool read) {
  while (next_read < active.size()) {
    if (!options.pipeline_read && next_read > at) return;
    const std::size_t i = active[next_read];
    if (speculating == nullptr && i < progress.size() && progress[i] == piece_progress::stepped) {
      ++next_read;  // rolling forward: it holds its slots and reads nothing
      continue;
    }
    const detail::piece& piece = pieces[i];
    const parameter_layout& p = layout().parameter(piece.param);
    std::vector<state_kind> slot_states;
    for (const state_kind s : all_states) {
      if (detail::takes_slot(p, s, where)) slot_states.push_back(s);
    }
    std::optional<std::vector<allocators::buffer_lease>> leases = pool->try_acquire_many(slot_states.size());
    if (!leases) {
      if (next_read > at) return;  // read ahead later, when writes behind give slots back
      reap_one();                  // this piece's own slots: wait for a write behind to finish
      continue;
    }
    piece_run& r = runs[i];
    for (std::size_t k = 0; k < slot_states.size(); ++k) r.slots[index_of(slot_states[k])] = std::move((*leases)[k]);
    r.holding = true;
    stats.max_pieces_in_flight = std::max(stats.max_pieces_in_flight, ++holding);
    std::vector<io::swap_request> requests;
    for (const state_kind s : slot_states) {
      // The working copy is only written; a stage without reads leaves the slots as they are.
      if (!read || s == state_kind::working || where(p.id, s) != tier::nvme) continue;
      if (s == state_kind::master && kept_master(piece) != nullptr) continue;  // backward's fetch brought it
      const std::uint64_t size = kernels::dtype_size(state_dtype(p, s));
      requests.push_back({.op = io::io_op::read,
                          .extent = tiers.location(p.id, s).extent,
                          .offset = piece.first * size,
                          .buffer = r.slots[index_of(s)].span().first(static_cast<std::size_t>(piece.count * size))});
      r.read_states.push_back(s);
    }
    if (requests.empty()) {
      r.read_done = true;
    } else {
      // The step's read-ahead comes after backward's fetches; speculation's runs behind them all.
      io->submit(2 * i, requests, speculating != nullptr ? move_priority::write_behind : move_priority::prefetch);
    }
    ++next_read;
  }
}

void optimizer_step::impl::start_writes(std::size_t i) {
  const detail::piece& piece = pieces[i];
  const parameter_layout& p = layout().parameter(piece.param);
  piece_run& r = runs[i];
  std::vector<io::swap_request> requests;
  for (const state_kind s : rewritten) {
    if (state_bytes(p, s) == 0 || where(p.id, s) != tier::nvme) continue;
    const std::uint64_t size = kernels::dtype_size(state_dtype(p, s));
    const io::swap_extent shadow = tiers.shadow(p.id, s);
    requests.push_back({.op = io::io_op::write,
                        .extent = shadow.bytes > 0 ? shadow : tiers.location(p.id, s).extent,
                        .offset = piece.first * size,
                        .buffer = r.slots[index_of(s)].span().first(static_cast<std::size_t>(piece.count * size))});
    r.write_states.push_back(s);
  }
  if (requests.empty()) {
    r.write_done = true;
    release_slots(p, r, true);
    return;
  }
  io->submit(2 * i + 1, requests, move_priority::write_behind);
}

void optimizer_step::impl::reap_one() {
  ZOE_CHECK(io && io->outstanding() > 0, internal_error,
            "optimizer step: waiting for a slot with no read or write out (the slots cannot hold one piece)");
  const detail::io_batch_result done = io->wait_any();
  if (done.failed_request) raise_io(done);
  const auto i = static_cast<std::size_t>(done.batch / 2);
  const bool write = done.batch % 2 == 1;
  const detail::piece& piece = pieces[i];
  const parameter_layout& p = layout().parameter(piece.param);
  piece_run& r = runs[i];
  for (const state_kind s : write ? r.write_states : r.read_states) {
    (write ? stats.bytes_written : stats.bytes_read) += piece.count * kernels::dtype_size(state_dtype(p, s));
  }
  if (write) {
    r.write_done = true;
    if (speculating == nullptr && i < progress.size() && progress[i] == piece_progress::stepped) {
      progress[i] = piece_progress::written;
    }
    release_slots(p, r, true);  // known good: the slots may take the next pieces
  } else {
    r.read_done = true;
  }
}

void optimizer_step::impl::raise_io(const detail::io_batch_result& done) const {
  const auto i = static_cast<std::size_t>(done.batch / 2);
  const bool write = done.batch % 2 == 1;
  const detail::piece& piece = pieces[i];
  const parameter_layout& p = layout().parameter(piece.param);
  const std::vector<state_kind>& states = write ? runs[i].write_states : runs[i].read_states;
  std::string folders;
  for (const auto& f : store->folders()) folders += (folders.empty() ? "'" : ", '") + f.string() + "'";
  std::string what = str("parameter '", p.name, "'");
  if (*done.failed_request < states.size()) {
    const state_kind s = states[*done.failed_request];
    const std::uint64_t size = kernels::dtype_size(state_dtype(p, s));
    const io::swap_extent shadow = tiers.shadow(p.id, s);
    const bool to_shadow = write && shadow.bytes > 0;
    const io::swap_extent extent = to_shadow ? shadow : tiers.location(p.id, s).extent;
    what = str(state_kind_name(s), " of parameter '", p.name, "' ",
               to_shadow ? "to its shadow extent "
               : write   ? "to swap extent "
                         : "from swap extent ",
               extent.id, " at offset ", piece.first * size, " (", piece.count * size, " bytes: elements ", piece.first,
               " to ", piece.first + piece.count, " of the shard)");
  }
  carried_error{done.failure.category, done.failure.os_errno,
                str("optimizer step: ", write ? "writing " : "reading ", what, " in the swap store at ", folders,
                    " failed: ", done.failure.message,
                    bounded && std::any_of(progress.begin(), progress.end(),
                                           [](piece_progress x) { return x != piece_progress::untouched; })
                        ? "; the step is part done (zoe.swap.shadows bounded, no shadow extents): retry it to "
                          "roll forward to the bits of an undisturbed step"
                        : "; every state is as it was before the step")}
      .raise();
}

void optimizer_step::impl::release_slots(const parameter_layout& p, piece_run& r, bool all) noexcept {
  for (const state_kind s : all_states) {
    const bool written = is_rewritten(s) && where(p.id, s) == tier::nvme;
    if (all || !written) r.slots[index_of(s)].release();
  }
  if (all && r.holding) {
    r.holding = false;
    --holding;
  }
}

std::array<std::byte*, state_kind_count> optimizer_step::impl::scratch_staging(std::uint64_t slot) {
  if (scratch.size() < state_kind_count * slot) scratch.resize(static_cast<std::size_t>(state_kind_count * slot));
  std::array<std::byte*, state_kind_count> out{};
  for (std::size_t k = 0; k < state_kind_count; ++k) out[k] = scratch.data() + k * slot;
  return out;
}

void optimizer_step::impl::step_piece(const parameter_layout& p, std::uint64_t first, std::uint64_t count,
                                      const std::array<std::byte*, state_kind_count>& staging, bool in_place,
                                      bool log_undo, std::span<const kernels::adam_config> adam) {
  std::array<std::byte*, state_kind_count> data{};
  bool copied_in = false;
  for (const state_kind s : all_states) {
    if (state_bytes(p, s) == 0) continue;
    const std::size_t k = index_of(s);
    const std::uint64_t size = kernels::dtype_size(state_dtype(p, s));
    const std::uint64_t offset = first * size;
    const auto len = static_cast<std::size_t>(count * size);
    const state_location& home = tiers.location(p.id, s);
    switch (home.where) {
      case tier::nvme: data[k] = staging[k]; break;
      case tier::device:
        data[k] = staging[k];
        // Adam only writes the working copy: its old bytes are wanted only for the undo log.
        if (s != state_kind::working || log_undo) {
          dev.copy_async(staging[k], static_cast<const std::byte*>(home.device) + offset, len,
                         copy_kind::device_to_host, stream.view());
          copied_in = true;
        }
        break;
      case tier::host:
        if (in_place || s == state_kind::gradient) {
          data[k] = home.host.data() + offset;
        } else {
          data[k] = staging[k];
          if (s != state_kind::working) std::memcpy(staging[k], home.host.data() + offset, len);
        }
        break;
    }
  }
  if (copied_in) dev.synchronize(stream.view());
  if (log_undo) {
    for (const state_kind s : rewritten) {
      if (state_bytes(p, s) == 0 || tiers.location(p.id, s).where == tier::nvme) continue;
      const std::uint64_t size = kernels::dtype_size(state_dtype(p, s));
      const auto len = static_cast<std::size_t>(count * size);
      undo.record(p.id, s, first * size, {data[index_of(s)], len});
      stats.undo_bytes += len;
    }
  }
  const auto adam_started = clock::now();
  kernels::adam_step(adam[p.id], shard_view(p, data, count), options.adam_threads);
  piece_changed = in_place;
  stats.adam_seconds += seconds_since(adam_started);
  stats.bytes_stepped += stepped_bytes(p, count);
  if (!in_place) return;
  bool copied_out = false;
  for (const state_kind s : rewritten) {
    const state_location& home = tiers.location(p.id, s);
    if (state_bytes(p, s) == 0 || home.where != tier::device) continue;
    const std::uint64_t size = kernels::dtype_size(state_dtype(p, s));
    dev.copy_async(static_cast<std::byte*>(home.device) + first * size, data[index_of(s)],
                   static_cast<std::size_t>(count * size), copy_kind::host_to_device, stream.view());
    copied_out = true;
  }
  if (copied_out) dev.synchronize(stream.view());
}

// A step that throws leaves every state as it was (optimizer_step.hpp), yet a shard split between
// device and host memory is stepped by calls that can fail (copies, the stream's sync) after its
// states changed: those shards go first, each in-memory state they rewrite copied to the undo log
// before it changes. Then the shards whose rewritten device states are written in place on the
// device, with nothing logged: all in device memory (the device's kernel), or with only the working
// copy there (Adam in place on the host states, the new working copy copied to the device). An
// undo copy of them would cost host memory and a device-to-host copy of every such state every
// step, or a second Adam over the offloaded ones, to guard against a device failure that loses
// what lives on the device anyway: such a failure instead refuses every later step (`broken`). The
// shards all in host memory go last, in place, once nothing can fail any more.
void optimizer_step::impl::run_memory_shards(std::span<const kernels::adam_config> adam, bool in_place) {
  const auto home_data = [this](const parameter_layout& p) {
    std::array<std::byte*, state_kind_count> data{};
    for (const state_kind s : all_states) {
      if (state_bytes(p, s) == 0) continue;
      const state_location& home = tiers.location(p.id, s);
      data[index_of(s)] = home.where == tier::host ? home.host.data() : static_cast<std::byte*>(home.device);
    }
    return data;
  };
  if (!in_place) {
    // A stage alone steps copies of every shard: nothing changes in place.
    for (const auto& [id, home] : memory_shards) step_staged(layout().parameter(id), adam, false, false);
    return;
  }
  for (const auto& [id, home] : memory_shards) {
    if (home == memory_home::split && !committing[id]) step_staged(layout().parameter(id), adam, true, true);
  }
  past_undo = true;
  for (const auto& [id, home] : memory_shards) {
    if (home == memory_home::working_on_device) step_staged(layout().parameter(id), adam, true, false);
  }
  const auto started = clock::now();
  bool launched = false;
  for (const auto& [id, home] : memory_shards) {
    if (home != memory_home::device) continue;
    const parameter_layout& p = layout().parameter(id);
    // In stream order on the device: the host device runs the CPU kernel as a host task, CUDA
    // its own; both give the same bits.
    const kernels::adam_shard shard = shard_view(p, home_data(p), p.shard_numel);
    const kernels::thread_budget budget = options.adam_threads;
    launch_kernel(
        dev, stream.view(), [a = adam[p.id], shard, budget] { kernels::adam_step(a, shard, budget); },
        [&](stream_view s) { kernels::cuda::adam_step(adam[p.id], shard, s); });
    launched = true;
    stats.bytes_stepped += stepped_bytes(p, p.shard_numel);
  }
  if (launched) {
    dev.synchronize(stream.view());
    stats.adam_seconds += seconds_since(started);  // the device's kernels
  }
  commit_pending();  // nothing can fail from here on
  for (const auto& [id, home] : memory_shards) {
    if (home != memory_home::host || committing[id]) continue;
    const parameter_layout& p = layout().parameter(id);
    const kernels::adam_shard shard = shard_view(p, home_data(p), p.shard_numel);
    const auto adam_started = clock::now();
    kernels::adam_step(adam[p.id], shard, options.adam_threads);
    stats.adam_seconds += seconds_since(adam_started);
    stats.bytes_stepped += stepped_bytes(p, p.shard_numel);
  }
}

void optimizer_step::impl::step_staged(const parameter_layout& p, std::span<const kernels::adam_config> adam,
                                       bool in_place, bool log_undo) {
  // The step proper cuts pieces as the planned scratch holds them; a stage run as the slots do.
  const std::uint64_t slot = in_place ? staging_slot : geometry.slot_bytes;
  const std::array<std::byte*, state_kind_count> staging = scratch_staging(slot);
  const std::uint64_t piece = slot / kernels::dtype_size(kernels::dtype::fp32);
  for (std::uint64_t first = 0; first < p.shard_numel; first += piece) {
    step_piece(p, first, std::min(piece, p.shard_numel - first), staging, in_place, log_undo, adam);
  }
}

bool optimizer_step::impl::speculate(parameter_id id, const kernels::adam_config& adam) {
  const parameter_layout& p = layout().parameter(id);
  kernels::adam_step(adam, {});  // checks the settings before anything moves
  if (p.frozen || speculative[id]) return false;
  const auto decline = [this] {
    ++spec_totals.declined;
    return false;
  };
  std::optional<fetched_master> master = take_fetched(id);
  const auto decline_all = [&] {
    if (master) forget_fetched(*master);
    return decline();
  };
  if (!broken.empty() || !detail::speculates(p, where) || !shadowed(p)) return decline_all();
  const std::uint64_t need = detail::pending_bytes(p, where);
  const std::optional<std::uint64_t> base = need > 0 ? space.take(need) : std::optional<std::uint64_t>(0);
  if (!base) return decline_all();
  const auto give_back = [&] {
    if (need > 0) space.give_back(*base, need);
  };
  // Every state held for reading (the homes are read, never written), so nothing moves one
  // meanwhile; but the parameter's value (its working copy, or an fp32 parameter's master), which
  // backward's fetches read at the same time: nothing writes it in backward (the engine marks no
  // gathered parameter dirty), so it is only checked to be resident and current.
  const state_kind value = state_bytes(p, state_kind::working) > 0 ? state_kind::working : state_kind::master;
  std::vector<state_kind> reading;
  const auto let_go = [&]() noexcept {
    for (const state_kind s : reading) {
      try {
        tiers.finish_move(id, s);
      } catch (const std::exception& e) {
        log::error("optimizer step: releasing ", state_kind_name(s), " of parameter '", p.name, "': ", e.what());
      }
    }
  };
  for (const state_kind s : all_states) {
    if (state_bytes(p, s) == 0) continue;
    if (s == value) {
      if (tiers.status(id, s) == state_status::resident && !tiers.dirty(id, s)) continue;
      let_go();
      give_back();
      return decline_all();
    }
    if (tiers.status(id, s) != state_status::resident || !tiers.begin_move(id, s, move_kind::read)) {
      let_go();
      give_back();
      return decline_all();
    }
    reading.push_back(s);
  }
  speculated_shard shard{.adam = adam};
  std::uint64_t end = *base;
  for (const state_kind s : rewritten) {
    if (state_bytes(p, s) == 0 || where(id, s) != tier::host) continue;
    shard.pending_at[index_of(s)] = end;
    end += round_up(state_bytes(p, s), detail::pending_alignment);
  }
  // The pipeline and step_piece take one setting per parameter: only this one's is read.
  speculation_adam[id] = adam;
  const std::span<const kernels::adam_config> each = speculation_adam;
  const optimizer_step_stats outer = stats;  // the last run's figures stay the last run's
  stats = {};
  bool stepped = true;
  speculating = &shard;
  try {
    if (master && master->ready.valid()) {
      dev.synchronize(master->ready);  // backward's copy of it is done
      speculating_master = &*master;
    }
    if (detail::has_nvme_state(p, where)) {
      active.clear();
      for (std::size_t i = 0; i < pieces.size(); ++i) {
        if (pieces[i].param == id) active.push_back(i);
      }
      run_nvme_pieces(each, step_stages{});
    } else {
      step_piece(p, 0, p.shard_numel, pending_staging(p, shard, 0), false, false, each);
    }
  } catch (const std::exception& e) {
    drain();
    log::warn("optimizer step: the speculative step of parameter '", p.name,
              "' failed; it steps after backward instead: ", e.what());
    stepped = false;
  }
  speculating = nullptr;
  speculating_master = nullptr;
  if (master) forget_fetched(*master);
  let_go();
  spec_totals.bytes_read += stats.bytes_read;
  spec_totals.bytes_written += stats.bytes_written;
  add_work(ahead, stats);
  stats = outer;
  if (!stepped) {
    give_back();
    return decline();
  }
  speculative[id] = shard;
  ++spec_totals.speculated;
  stepped_ahead.store(spec_totals.speculated);
  return true;
}

void optimizer_step::impl::forgo(parameter_id id) noexcept {
  // The master backward's fetch kept for it stays: the step after backward reads it there.
  const parameter_layout& p = layout().parameter(id);
  if (!p.frozen && broken.empty() && detail::speculates(p, where) && shadowed(p)) ++spec_totals.forgone;
}

void optimizer_step::impl::drop_speculation() noexcept {
  for (std::optional<speculated_shard>& shard : speculative) {
    if (!shard) continue;
    shard.reset();
    ++spec_totals.dropped;
  }
  clear_pending();
  // No step takes what it did: the totals do.
  add_work(totals, ahead);
  ahead = {};
}

std::uint64_t optimizer_step::impl::master_piece_bytes(const parameter_layout& p, std::size_t i) const noexcept {
  const std::uint64_t first = i * geometry.piece_numel;
  return std::min(geometry.piece_numel, p.shard_numel - first) * kernels::dtype_size(kernels::dtype::fp32);
}

optimizer_step::impl::fetched_master* optimizer_step::impl::master_kept_for(const detail::piece& piece) noexcept {
  if (speculating != nullptr) return speculating_master;
  // A whole run: no master is kept meanwhile (the engine keeps them only during backward).
  std::optional<fetched_master>& f = fetched[piece.param];
  return f ? &*f : nullptr;
}

const std::byte* optimizer_step::impl::kept_master(const detail::piece& piece) noexcept {
  const fetched_master* f = master_kept_for(piece);
  if (f == nullptr) return nullptr;
  const auto i = static_cast<std::size_t>(piece.first / geometry.piece_numel);
  // A piece given back (read by a run that then failed) may hold another's bytes by now.
  return i >= f->given_back && i < f->chunks.size() ? pending.get() + f->chunks[i] : nullptr;
}

void optimizer_step::impl::take_kept_master(const detail::piece& piece, std::byte* slot) noexcept {
  const std::byte* kept = kept_master(piece);
  if (kept == nullptr) return;
  const std::uint64_t bytes = piece.count * kernels::dtype_size(kernels::dtype::fp32);
  std::memcpy(slot, kept, static_cast<std::size_t>(bytes));
  give_back_fetched(*master_kept_for(piece), static_cast<std::size_t>(piece.first / geometry.piece_numel) + 1);
  spec_totals.fetched_bytes += bytes;
}

void optimizer_step::impl::settle_fetched() {
  for (std::optional<fetched_master>& f : fetched) {
    if (!f) continue;
    if (f->ready.valid()) {
      dev.synchronize(f->ready);
      f->ready = {};
    } else {
      forget_fetched(*f);  // the copy failed before it was recorded: the bytes are not the master's
      f.reset();
    }
  }
}

std::vector<std::span<std::byte>> optimizer_step::impl::keep_fetched_master(parameter_id id) {
  const parameter_layout& p = layout().parameter(id);
  // Only an fp32 parameter's fetch brings its master (the working copy is the master), and only a
  // master on nvme is worth keeping: the speculation would read it there.
  if (!broken.empty() || detail::fetched_master_bytes(p, where) == 0 || !shadowed(p)) return {};
  const std::lock_guard lock(fetched_mutex);
  if (fetched[id]) return {};
  // Piece by piece from the first, as far as there is room: each piece kept is one read less.
  fetched_master kept{.param = id};
  std::vector<std::span<std::byte>> out;
  for (std::size_t i = 0; i * geometry.piece_numel < p.shard_numel; ++i) {
    const std::uint64_t bytes = master_piece_bytes(p, i);
    const std::optional<std::uint64_t> at = space.take(bytes);
    if (!at) break;
    kept.chunks.push_back(*at);
    kept.bytes += bytes;
    out.emplace_back(pending.get() + *at, static_cast<std::size_t>(bytes));
  }
  if (!out.empty()) fetched[id] = std::move(kept);
  return out;
}

void optimizer_step::impl::fetched_master_ready(parameter_id id, device_event ready) {
  const std::lock_guard lock(fetched_mutex);
  ZOE_EXPECTS(fetched[id].has_value(), "optimizer step: no fetched master of parameter ", id, " is kept");
  fetched[id]->ready = std::move(ready);
}

std::optional<optimizer_step::impl::fetched_master> optimizer_step::impl::take_fetched(parameter_id id) {
  const std::lock_guard lock(fetched_mutex);
  std::optional<fetched_master> out = std::move(fetched[id]);
  fetched[id].reset();
  return out;
}

void optimizer_step::impl::forget_fetched(fetched_master& f) noexcept {
  try {
    if (f.ready.valid()) dev.synchronize(f.ready);  // no copy may land in memory given to another
  } catch (const std::exception& e) {
    log::error("optimizer step: a copy of a fetched master failed: ", e.what());
  }
  give_back_fetched(f, f.chunks.size());
}

void optimizer_step::impl::give_back_fetched(fetched_master& f, std::size_t end) noexcept {
  const parameter_layout& p = layout().parameter(f.param);
  for (; f.given_back < std::min(end, f.chunks.size()); ++f.given_back) {
    space.give_back(f.chunks[f.given_back], master_piece_bytes(p, f.given_back));
  }
}

bool optimizer_step::impl::shadowed(const parameter_layout& p) const {
  return std::none_of(rewritten.begin(), rewritten.end(), [&](state_kind k) {
    return state_bytes(p, k) > 0 && where(p.id, k) == tier::nvme && tiers.shadow(p.id, k).bytes == 0;
  });
}

void optimizer_step::impl::abandon_part_done() noexcept {
  part_done.reset();
  progress.clear();
  runs.clear();
  holding = 0;
}

void optimizer_step::impl::clear_pending() noexcept {
  for (parameter_id id = 0; id < fetched.size(); ++id) {
    std::optional<fetched_master> f = take_fetched(id);
    if (f) forget_fetched(*f);
  }
  space.clear();
}

std::array<std::byte*, state_kind_count> optimizer_step::impl::pending_staging(const parameter_layout& p,
                                                                               const speculated_shard& shard,
                                                                               std::uint64_t first) {
  std::array<std::byte*, state_kind_count> out{};
  for (const state_kind s : rewritten) {
    if (state_bytes(p, s) == 0 || where(p.id, s) != tier::host) continue;
    out[index_of(s)] = pending.get() + shard.pending_at[index_of(s)] + first * kernels::dtype_size(state_dtype(p, s));
  }
  return out;
}

void optimizer_step::impl::commit_pending() noexcept {
  for (parameter_id id = 0; id < speculative.size(); ++id) {
    if (!committing[id]) continue;
    const parameter_layout& p = layout().parameter(id);
    for (const state_kind s : rewritten) {
      if (state_bytes(p, s) == 0 || where(id, s) != tier::host) continue;
      std::memcpy(tiers.location(id, s).host.data(), pending.get() + speculative[id]->pending_at[index_of(s)],
                  static_cast<std::size_t>(state_bytes(p, s)));
    }
  }
}

optimizer_step::optimizer_step(tier_manager& tiers, device& dev, allocators::pinned_host_resource& pinned,
                               mover* movers, optimizer_step_options options)
    : impl_(std::make_unique<impl>(tiers, dev, pinned, movers, options)) {}

optimizer_step::~optimizer_step() = default;

void optimizer_step::run(std::span<const kernels::adam_config> adam) { impl_->execute(adam, step_stages{}); }

void optimizer_step::run(const kernels::adam_config& adam) {
  const std::vector<kernels::adam_config> each(impl_->layout().parameters().size(), adam);
  run(each);
}

void optimizer_step::run_stages(const kernels::adam_config& adam, step_stages which) {
  const std::vector<kernels::adam_config> each(impl_->layout().parameters().size(), adam);
  impl_->execute(each, which);
}

bool optimizer_step::speculate(parameter_id p, const kernels::adam_config& adam) { return impl_->speculate(p, adam); }

std::vector<std::span<std::byte>> optimizer_step::keep_fetched_master(parameter_id p) {
  return impl_->keep_fetched_master(p);
}

void optimizer_step::fetched_master_ready(parameter_id p, device_event ready) {
  impl_->fetched_master_ready(p, std::move(ready));
}

void optimizer_step::forgo(parameter_id p) noexcept { impl_->forgo(p); }

void optimizer_step::drop_speculation() noexcept { impl_->drop_speculation(); }

bool optimizer_step::part_done() const noexcept { return impl_->part_done.has_value(); }

void optimizer_step::abandon_part_done() noexcept { impl_->abandon_part_done(); }

std::size_t optimizer_step::speculated() const noexcept {
  return static_cast<std::size_t>(std::count_if(impl_->speculative.begin(), impl_->speculative.end(),
                                                [](const auto& shard) { return shard.has_value(); }));
}

const speculation_totals& optimizer_step::speculation() const noexcept { return impl_->spec_totals; }

std::uint64_t optimizer_step::shards_stepped_ahead() const noexcept { return impl_->stepped_ahead.load(); }

const optimizer_step_stats& optimizer_step::last() const noexcept { return impl_->stats; }

const optimizer_step_stats& optimizer_step::last_step() const noexcept { return impl_->last_step; }

const optimizer_step_totals& optimizer_step::totals() const noexcept { return impl_->totals; }

}  // namespace zoe::engine
