#pragma once
// The ZeRO-3 coordinator: fetch and release of modules, with trace-based prefetch. Fetching a
// module brings each of its parameters' shards from its tier (parameter_swapper) into a full
// parameter allocated from the defragmenting arena, and gathers it through the communicator. The
// arena is the one allocator of gathered parameters. Release frees full parameters (the shards
// stay: a gathered parameter is a read-only copy; the optimizer step writes the homes). What to
// gather ahead and what to keep is prefetch_policy's decision; the coordinator carries it out.
//
// Addresses: a gathered parameter's block may be moved by the arena's compaction while nobody uses
// it; from a fetch_handle's wait() until the module's release it is pinned, so address() is stable.
//
// Order of collectives: every rank must issue the same all-gathers, of the same sizes, in the same
// order, or the ranks deadlock (and fail naming a rank after the communicator's timeout). So what
// is gathered, in which buckets and in which order is a function of the calls alone (fetch,
// release, end_step, drop_gathered, in the same order on every rank: at world size > 1 one thread
// drives the fetches and releases), never of timing:
// - the parameters a fetch starts (its demand gathers, then its prefetches in trace order) are
//   grouped in that order into buckets (below) sealed when the fetch returns, and the buckets are
//   issued strictly in the order they were sealed, by whichever caller finds the head bucket's
//   shards arrived (a later bucket whose reads finished first waits for it);
// - a gather once started is always issued, even when its parameter is freed before its use
//   (a prefetch for a use that did not come): whether its read had finished by then is timing;
// - the arena's momentary state is timing (frees settle as streams run): at
//   world size > 1 (or with coordinator_options::rank_independent_order) neither a prefetch's
//   back-off nor a demand fetch's eviction looks at it. Both look at the bytes of the parameters
//   gathered or in flight (set only by the calls above): a prefetch backs off when it would take
//   them past the arena's capacity (the walk stops there for this fetch; what it passed is gathered
//   at its own fetch, on every rank alike), and a demand fetch evicts parameters gathered ahead that no open fetch
//   holds, in id order, until its own fit; then the allocation waits for the space to settle,
//   never backing off. At world size 1 nothing crosses ranks, and the coordinator uses the arena's
//   momentary state (try_allocate) for both, which keeps more gathered when memory allows;
// - a read that fails fails its whole bucket at world size > 1 (its collective is not issued, so
//   the other ranks fail naming this rank within the timeout), rather than issue a collective
//   with part of it missing.
//
// Buckets (zero_optimization.allgather_bucket_size): consecutive gathers of one fetch and of one
// module, at most that many gathered elements together (a parameter larger goes alone), travel as
// one communicator::all_gather_coalesced (one message per pair of ranks), or one qwZ
// quantized_all_gather; a bucket of one parameter as one all_gather. A bucket never mixes a world
// gather with an hpZ one, nor two modules' parameters: a bucket is issued only once all its reads
// arrived, and the module a fetch waits for must not wait for the reads of modules prefetched
// behind it.
//
// Passes and hpZ (zero_hpz_partition_size > 1: comm.hpz() has more than one rank): a forward
// fetch's gathers run over the world and leave a secondary shard of each parameter in device
// memory: this rank's slice (comm.hpz().rank()) of the full parameter over the hpZ group. A
// backward fetch's gathers (and its prefetches) of a parameter that has one all-gather the
// secondary shards within comm.hpz() instead (no read of the shard from its tier, and no weight
// byte crosses nodes when the group lies within a node); one without falls back to the world
// gather. Secondary shards are dropped with the gathered parameters (drop_gathered: the homes
// changed). Their memory is the plan's hpz_secondary_bytes.
//
// qwZ (zero_quantized_weights): world gathers are quantized_all_gather (int8 codes and scales in one
// message, dequantized on arrival, so every rank holds the same values); the hpZ gather inside the
// group stays unquantized: the secondary shards already hold the dequantized forward values, and
// quantizing them again would add a second rounding error to backward's weights only to save
// bytes on the fast intra-node links (ZeRO++ keeps the secondary partition in full precision too).
//
// Back-pressure: when the arena is full, a prefetch backs off (the parameter is gathered at its
// own fetch instead), and a demand fetch waits: it frees parameters gathered ahead that no open
// fetch holds, waits for reads in flight, and then for other callers' releases.
// When every open fetch was opened on the calling thread, no other caller's release can come, and
// that wait would be for ever: it is a memory_error naming the module, the arena and what holds
// it (the fetch is closed again). A module larger than the whole arena is a memory_error naming
// the sizes and the keys to change.
//
// Held blocks: a wait pins its module's blocks, and the arena's compaction never moves a pinned
// block, so a held block with free space below it would split the arena (4 KiB free on either side
// of it leave no room for 8 KiB). A wait whose module, pinned where it lies, would leave no span free
// of pins for the largest parameter not gathered compacts first (when that makes the span), so the
// module is pinned as low as the blocks pinned before it allow. Compacting whenever the free space is
// in pieces, as prefetching leaves it, or whenever no piece held the largest parameter, stalled every
// fetch behind the arena's copies (GPT-2's tied embedding: nearly every wait). A prefetch takes a
// hole or backs off; a demand fetch that finds no hole compacts (the arena's allocate). Two cases remain
// where a single caller gets the memory_error above instead of room: holds released out of order,
// and a module of several parameters whose pieces each hold its largest parameter but not all of
// them; with other callers, their releases end the wait.
//
// Thread-safety: every member may be called from any thread; one lock guards the state, and no
// call waits on a read, a write or the device while holding it.

#include <cstdint>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include "zoe/allocators/arena.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/engine/coordinator/prefetch_policy.hpp"
#include "zoe/engine/swap/parameter_swapper.hpp"
#include "zoe/engine/tiers/footprint_plan.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"

namespace zoe::engine {

class coordinator;

/// Which pass a fetch is for: a backward fetch gathers from the hpZ secondary shards (above).
enum class fetch_pass : std::uint8_t { forward = 0, backward = 1 };

struct coordinator_options {
  std::uint64_t arena_bytes = 0;  ///< capacity of the gathered-parameter arena (footprint_plan::arena_bytes)
  prefetch_limits limits;         ///< the stage3_* limits
  /// Gathered elements per coalesced all-gather (zero_optimization.allgather_bucket_size); 0 gives
  /// every parameter its own.
  std::uint64_t allgather_bucket_numel = 500'000'000;
  /// qwZ (zero_quantized_weights): world gathers quantized. Needs quantized_scratch_bytes.
  bool quantized_weights = false;
  /// Device bytes lent to the quantized gathers (footprint_plan::qwz_scratch_bytes): a bucket also
  /// closes before it would need more; usage_error at construction with qwZ when smaller than the
  /// largest parameter's.
  std::uint64_t quantized_scratch_bytes = 0;
  /// Device bytes of the hpZ secondary shards (footprint_plan::hpz_secondary_bytes); allocated
  /// only when comm.hpz() has more than one rank (usage_error then when smaller than they need).
  std::uint64_t hpz_secondary_bytes = 0;
  /// The rank-independent choices (above) at world size 1 too (tests); always on at world size > 1.
  bool rank_independent_order = false;
};

/// The coordinator's options for `config` with `plan` (the arena, the scratch and the secondary
/// shards sized by the plan). Never throws.
[[nodiscard]] coordinator_options coordinator_options_of(const engine_config& config, const footprint_plan& plan);

struct coordinator_stats {
  std::uint64_t fetches = 0;            ///< fetch() calls
  std::uint64_t gathers = 0;            ///< parameters gathered on demand
  std::uint64_t prefetches = 0;         ///< parameters gathered ahead
  std::uint64_t prefetch_backoffs = 0;  ///< prefetches dropped: the arena was full or the read could not start
  std::uint64_t evictions = 0;          ///< parameters gathered ahead and freed to make room
  std::uint64_t arena_waits = 0;        ///< demand fetches that waited for arena space
  std::uint64_t failed_gathers = 0;
  std::uint64_t collectives = 0;      ///< all-gathers issued (one per bucket)
  std::uint64_t hpz_gathers = 0;      ///< parameters gathered from the hpZ secondary shards
  double wait_seconds = 0;            ///< time callers spent in fetch_handle waits
  std::uint64_t peak_live_numel = 0;  ///< most gathered elements the policy counted live
  allocators::arena_stats arena;
};

namespace detail {
struct fetch_state {
  coordinator* owner = nullptr;
  module_id module = 0;
  std::thread::id opened_on;  ///< the thread that called fetch()
  bool pinned = false;        ///< its wait pinned the module's blocks (its release unpins them)
  bool released = false;      ///< the release that ends this fetch came
};
}  // namespace detail

/// One fetch of one module. Copyable handle; valid until the module's release.
class fetch_handle {
 public:
  fetch_handle() = default;
  explicit fetch_handle(std::shared_ptr<detail::fetch_state> s) noexcept : state_(std::move(s)) {}

  /// Blocks until every parameter of the module is gathered and the gathers are done on the device.
  /// Throws the failure of a read
  /// (io_error or corruption_error naming the parameter, path and offset); usage_error once the module was released.
  void wait() const;
  /// Blocks only until the gathers are queued, then makes the work queued on `stream` after this
  /// call wait for them (stream order). Throws as wait().
  void wait(stream_view stream) const;
  [[nodiscard]] module_id module() const;

 private:
  std::shared_ptr<detail::fetch_state> state_;
};

class coordinator {
 public:
  /// Makes the arena (options.arena_bytes of device memory: memory_error when the device refuses)
  /// and the policy. Everything passed must outlive the coordinator.
  coordinator(tier_manager& tiers, parameter_swapper& swapper, communicator& comm, device& dev,
              coordinator_options options);
  /// Waits for the reads and gathers in flight. Never throws.
  ~coordinator();
  coordinator(const coordinator&) = delete;
  coordinator& operator=(const coordinator&) = delete;

  /// Opens a step (a forward and backward pass, or with step_kind::inference forward fetches the
  /// prefetch trace does not see: prefetch_policy.hpp). usage_error if one is open.
  void begin_step(step_kind kind = step_kind::training);
  /// Starts gathering `module`'s parameters and, following the trace, those ahead of it. Returns
  /// at once unless the arena is full (see back-pressure). usage_error naming the module when no
  /// step is open or it is unknown; memory_error when the module cannot fit the arena at all
  /// (nothing is started then). If a read cannot even start (the swapper refuses it), the fetch
  /// is open all the same and needs its release; a memory_error leaves no fetch open (see
  /// Back-pressure). `pass`: see Passes and hpZ above.
  [[nodiscard]] fetch_handle fetch(module_id module, fetch_pass pass = fetch_pass::forward);
  /// The module is done with: frees what the policy says. The work queued on `stream` so far may
  /// still use it: its memory is reused after that work. usage_error naming the module when it
  /// has no open fetch.
  void release(module_id module, stream_view stream = {});
  /// Closes the step: frees what was gathered ahead and not used.
  void end_step();

  /// Frees every gathered parameter, persistent ones too, so that each is gathered again from its
  /// home at its next fetch: the engine calls it between steps (after end_step), once the optimizer
  /// step has rewritten the homes. The hpZ secondary shards go too (the next forward fetch leaves
  /// new ones). usage_error while a fetch is open (naming its module) or a prefetch is still reading
  /// (a step is open); nothing is freed then.
  void drop_gathered();

  /// The device address of gathered parameter `p` (stable while its module's fetch is waited
  /// and not released). usage_error naming the parameter when it is not gathered.
  [[nodiscard]] void* address(parameter_id p) const;
  /// Bytes of the full parameter `p` (its padded elements at its working type). Never throws for
  /// a parameter of the layout.
  [[nodiscard]] std::uint64_t full_bytes(parameter_id p) const;
  [[nodiscard]] coordinator_stats stats() const;
  [[nodiscard]] const prefetch_policy& policy() const noexcept;
  [[nodiscard]] const allocators::arena& arena() const noexcept;

 private:
  friend class fetch_handle;
  struct impl;
  void wait_fetch(detail::fetch_state& state, const stream_view* stream);
  std::unique_ptr<impl> impl_;
};

}  // namespace zoe::engine
