#pragma once
// The optimizer step: Adam / AdamW over every shard of this rank, run where the states live, as a
// pipeline. Each shard is cut into pieces of a fixed element count (one aio.block_size chunk of
// its narrowest state on nvme: the 16-bit working copy, or the fp32 states when nothing narrower
// is on nvme), so every NVMe write covers whole chunks of its extent; pieces are visited
// sub-group by sub-group in layout order. For a piece with any state on NVMe, the reads of the
// pieces ahead run in front of Adam, the writes of the pieces behind run after it, as deep as the
// optimizer's fixed pinned memory allows (footprint_plan::optimizer_buffer_count x
// optimizer_buffer_bytes, cut into slots of one piece of one fp32 state; a piece takes one slot per
// state on nvme or in device memory; pipeline_read / pipeline_write false turn the read-ahead /
// write-behind off: no read starts before the previous piece's Adam is done, and no Adam starts
// before the previous piece's writes are known good). The reads and writes are pieces of the rank's
// mover (swap/mover.hpp; reads as prefetch, writes as write-behind, speculation's reads as
// write-behind too, behind backward's fetches) in the step's own slots; the calling thread runs Adam
// (with adam_threads). The new 16-bit working copy goes to
// its home (device, host or NVMe) in the same pass: nothing reads the masters twice.
//
// A step either happens whole or not at all:
//  - an NVMe state the step rewrites (master, exp_avg, exp_avg_sq, and the working copy on nvme)
//    is written to its shadow extent (tier_manager::shadow), and the shadows become the homes
//    (tier_manager::commit_shadow) only once every write of the step is known good;
//  - a state in memory that belongs to a shard with anything on NVMe, or split between device and
//    host memory (other than ZeRO-Offload's layout, below), is copied to the undo log (pageable
//    host memory, footprint_plan::optimizer_undo_bytes) before Adam changes it, for the calls that
//    step such a shard (I/O, device copies, syncs) can fail after it changed (a part in device
//    memory of such a shard is staged through a slot or the scratch: copied in, stepped there,
//    copied back);
//  - shards with nothing on NVMe are stepped after every piece with anything on NVMe: first the
//    split ones (logged), then those whose rewritten device states are written in place on the
//    device, unlogged: every state in device memory (the device's kernel, launch_kernel), or only
//    the working copy there (Adam in place on the host states, the new working copy copied to the
//    device through the scratch); then, once nothing can fail any more, those all in host memory,
//    in place with no copy.
// The one exception to all-or-nothing: a device failure (a refused launch, copy or sync) while the
// step writes those unlogged shards. Undoing them would cost host memory and a device-to-host copy
// of every device-resident state each step (or a second Adam over the offloaded ones), against a
// failure that loses what lives on the device anyway (CUDA's errors there are sticky). Such a
// failure is rethrown, and every later run of this step is refused with a device_error naming it
// (make a new engine and load a checkpoint), so nothing is ever stepped twice.
// While it runs, the step holds every state of every shard in flight (tier_manager::begin_move
// with move_kind::rewrite; the gradient with move_kind::read), so nothing else moves one meanwhile.
// Any other failed read, write or device call therefore leaves every master, moment, gradient and working
// copy as it was before the step (resident, dirty as before): the undo log is copied back, the
// shadows are dropped, and the error (io_error or corruption_error naming the state, the parameter,
// the path and the offset; what the device throws) is rethrown. Retrying
// the step gives the bits an undisturbed step gives. A write's source slot is not reused until its
// completion is known good.
//
// Speculation (the step inside backward): speculate(p, adam) steps one shard as the step would,
// ahead of it, once its gradient is final, into space no committed state uses: the new values of
// its NVMe states go to their shadow extents, those of its host states to pending memory
// (options.pending_bytes, footprint_plan::optimizer_pending_bytes); no committed state changes.
// The engine speculates with the settings the step takes when nothing overflowed and clipping
// leaves the gradients as they are (clip coefficient 1), which the global norm and the overflow
// check confirm only when backward has ended. run() then commits every speculated shard whose Adam
// settings equal its own for that shard, bit for bit (the shadows become the homes with the rest
// of the step's, the pending bytes are copied into the host homes once nothing can fail), steps
// the others as above, and drops what it did not commit; drop_speculation() drops it all (an
// overflow skips the step). Adam's arithmetic on a shard does not depend on where the shard lies,
// so the states a commit leaves are bit-identical to the ones the step would have computed.
// Only shards with no state in device memory are speculated (detail::speculates: their commit is
// a switch of extents and host copies, which cannot fail), and only as far as the pending memory
// reaches; the rest step in run() as before. A run that fails leaves the speculation in place
// (nothing committed changed), so a retry commits it; a stage run drops it (its writes reuse the
// shadows).
//
// Bounded shadows (zoe.swap.shadows "bounded": the plan gives no NVMe state a shadow extent, so the
// swap files hold each state once): the NVMe states are written in place, piece by piece, with no
// undo. A whole step that fails after Adam changed a piece cannot go back: it records how far it got
// (which pieces are written, which are stepped with their new bytes kept in their slots, the only
// copy, until written) and part_done() is true; the next run(), which must have the same settings
// (usage_error naming a parameter otherwise), rolls forward from there: it writes the kept pieces,
// steps the rest, and leaves the bits an undisturbed step gives. The states must not be read or
// written meanwhile (the engine refuses to; the gradients stay until the step is done);
// abandon_part_done() forgets it (a checkpoint load overwrites every state). A failure before any
// piece changed leaves every state as it was, as with full shadows. A device copy that fails after
// Adam changed a piece's device part leaves it torn: every later run is refused. Speculation
// writes only shadow extents, so without them shards with a state on nvme step after backward.
//
// The gradient states are only read: the step leaves them as they are. The gradient's type is
// state_dtype(p, gradient) (fp32, fp16 or bf16: the kernel takes each).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "zoe/allocators/pinned_host_resource.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/swap/mover.hpp"
#include "zoe/engine/tiers/footprint_plan.hpp"
#include "zoe/engine/tiers/tier_manager.hpp"
#include "zoe/io/swap_store.hpp"
#include "zoe/kernels/adam.hpp"

namespace zoe::engine {

struct optimizer_step_options {
  std::uint64_t sub_group_size = 1'000'000'000;  ///< zero_optimization.sub_group_size (elements)
  std::size_t buffer_count = 0;                  ///< footprint_plan::optimizer_buffer_count
  std::size_t buffer_bytes = 0;                  ///< footprint_plan::optimizer_buffer_bytes
  std::uint64_t undo_bytes = 0;                  ///< footprint_plan::optimizer_undo_bytes
  bool pipeline_read = true;                     ///< offload_optimizer.pipeline_read
  bool pipeline_write = true;                    ///< offload_optimizer.pipeline_write
  /// Pageable bytes of speculation's pending memory (footprint_plan::optimizer_pending_bytes).
  std::uint64_t pending_bytes = 0;
  /// Threads Adam may use (the mover's I/O thread works for the step): 0, TBB's default.
  kernels::thread_budget adam_threads;
};

/// What one step did, for benchmarks and statistics. Times are wall-clock seconds of this step.
struct optimizer_step_stats {
  double seconds = 0;               ///< the whole step
  double adam_seconds = 0;          ///< time Adam ran (summed over pieces)
  double read_wait_seconds = 0;     ///< time Adam waited for a read
  double write_wait_seconds = 0;    ///< time spent waiting for writes (for a slot, at the end, or pipeline_write false)
  std::uint64_t bytes_read = 0;     ///< from NVMe
  std::uint64_t bytes_written = 0;  ///< to NVMe
  std::uint64_t bytes_stepped = 0;  ///< bytes Adam read and wrote (all states, every tier)
  std::uint64_t pieces = 0;
  std::size_t max_pieces_in_flight = 0;  ///< deepest the pipeline went
  std::uint64_t undo_bytes = 0;          ///< copied to the undo log
  std::uint64_t pinned_bytes = 0;        ///< the step's pinned slots
};

/// Every run's figures summed since the optimizer step was made (statistics): the whole steps and
/// the stage runs alike, as each moved its bytes; a failed run counts what it did before it failed.
struct optimizer_step_totals {
  std::uint64_t steps = 0;       ///< run() calls (and run_stages() with every stage) that completed
  std::uint64_t stage_runs = 0;  ///< run_stages() calls with a stage off
  std::uint64_t failed_runs = 0;
  double seconds = 0;
  double adam_seconds = 0;
  double read_wait_seconds = 0;
  double write_wait_seconds = 0;
  std::uint64_t bytes_read = 0;     ///< from NVMe
  std::uint64_t bytes_written = 0;  ///< to NVMe
  std::uint64_t bytes_stepped = 0;
};

/// What speculation did since the optimizer step was made (statistics). Its reads, writes and Adam
/// time also count in the figures of the step that follows it (last(), last_step() and the totals),
/// or in the totals alone when it is dropped without a step (drop_speculation()).
struct speculation_totals {
  std::uint64_t speculated = 0;     ///< shards stepped speculatively
  std::uint64_t committed = 0;      ///< of them, committed by run()
  std::uint64_t dropped = 0;        ///< of them, dropped (an overflow, clipping, other settings, a stage run)
  std::uint64_t declined = 0;       ///< speculate() calls that stepped nothing (device states, no pending room, a
                                    ///< state busy, a failed read or write)
  std::uint64_t forgone = 0;        ///< shards not speculated, the step being known to clip or skip (forgo())
  std::uint64_t bytes_read = 0;     ///< from NVMe
  std::uint64_t bytes_written = 0;  ///< to NVMe (the shadow extents)
  std::uint64_t fetched_bytes = 0;  ///< masters taken from backward's fetch instead of read from NVMe (by the
                                    ///< speculation, or by run() for a shard not speculated)
};

/// Which stages of the step run_stages() runs.
struct step_stages {
  bool read = true;   ///< the NVMe reads of every piece into its slots
  bool adam = true;   ///< Adam over every piece
  bool write = true;  ///< the NVMe writes of every piece's slots to the shadow extents
};

/// Not thread-safe: one thread runs steps (the mover's I/O thread works for it). Everything
/// passed must outlive it. No move of any state may be in flight while a step runs (the engine
/// runs the step between a step's backward and the next forward).
class optimizer_step {
 public:
  /// Cuts the pinned memory into slots (from `pinned`, when any state is on nvme); its reads and
  /// writes go through `movers` (the rank's mover; null when nothing is on nvme). Throws memory_error when the memory
  /// is refused, config_error naming offload_optimizer.buffer_count when the slots cannot hold one piece's states,
  /// usage_error when options.undo_bytes is less than the undo log needs (the plan was made for another placement). The
  /// undo log and the scratch memory (the pageable bytes they need, which the plan lists) are taken here too.
  optimizer_step(tier_manager& tiers, device& dev, allocators::pinned_host_resource& pinned, mover* movers,
                 optimizer_step_options options);
  ~optimizer_step();
  optimizer_step(const optimizer_step&) = delete;
  optimizer_step& operator=(const optimizer_step&) = delete;

  /// One step with `adam` (its step count, learning rate, and grad_scale = the loss scale's
  /// inverse times the clipping factor times 1/accumulation steps, folded by the caller) over every
  /// shard: master, exp_avg, exp_avg_sq and the working copy updated from the gradient. Every state
  /// must be resident (the gradient too: it is read, not changed). Throws (above) with every state
  /// as before, except after a device failure while unlogged shards were written in place, or a
  /// failure to put the undo log back: then this run and every later one throw device_error; usage_error naming the
  /// parameter and state when one is not resident or in flight, or when `adam`'s settings are invalid (checked before
  /// anything moves).
  void run(const kernels::adam_config& adam);
  /// run() with Adam settings of its own for each parameter (`adam[p]` for parameter p: the
  /// learning rate and weight decay of its group); usage_error unless there is one per parameter.
  void run(std::span<const kernels::adam_config> adam);
  /// The step with only some of its stages, to time each alone over the same data (zoe-bench
  /// optimizer). All three: exactly run(). Otherwise nothing is committed and every state is as it
  /// was before the call: the reads bring the NVMe parts into the slots; Adam runs on the slots
  /// for the NVMe parts (whatever they hold when the reads are off) and on copies of the in-memory
  /// parts (the copying is not counted in adam_seconds), in pieces as run() cuts them, shards
  /// without NVMe parts too; the writes write what the slots hold to the shadow extents. The
  /// pipeline runs as in run() (its depth, pipeline_read, pipeline_write). The same states must be
  /// resident and the same errors come (with every state as before). last() has the figures.
  void run_stages(const kernels::adam_config& adam, step_stages which);
  /// Steps shard `p` speculatively with `adam` (above): reads its committed states, writes its new
  /// values to the shadow extents and the pending memory, changes no committed state. Returns false,
  /// having stepped nothing, when `p` is frozen or already speculated, has a state in device memory,
  /// needs more pending memory than is left, or has a state that is not resident or is in flight;
  /// and when a read or write fails (logged: the step after backward then meets the failure and
  /// reports it). usage_error when `adam`'s settings are invalid. Not concurrently with run().
  bool speculate(parameter_id p, const kernels::adam_config& adam);
  /// Pending memory for the master shard of fp32 parameter `p` (its working copy), which backward's
  /// fetch brought: one span per piece of the step from the shard's first, as many as the pending
  /// memory has room for (together the shard's first bytes, in order). The caller copies the shard's
  /// bytes there, then hands the copies' completion to fetched_master_ready(), and p's speculation
  /// (or, when p is not speculated, e.g. forgone, the next whole run()) reads those
  /// pieces from it instead of its NVMe home (the parameter is read once for backward and the
  /// step), the rest from NVMe, and frees each piece once read. Empty, keeping nothing,
  /// when p's speculation would not read one (not fp32, its master not on nvme, not speculated),
  /// one is kept already, or the pending memory has no room. Thread-safe against speculate().
  [[nodiscard]] std::vector<std::span<std::byte>> keep_fetched_master(parameter_id p);
  /// The copies into what keep_fetched_master(p) returned complete with `ready`; before p's
  /// gradient is final (the speculation waits for it).
  void fetched_master_ready(parameter_id p, device_event ready);
  /// Passes shard `p` by, unspeculated, once the step is known not to take the speculation's
  /// settings (its gradients will be clipped, or it skips): no read or write that would be dropped
  /// is spent on it (the master backward's fetch kept for it stays for run()). Counted in
  /// speculation().forgone when p would have been speculated. Not concurrently with speculate() or
  /// run(). Never throws.
  void forgo(parameter_id p) noexcept;
  /// Forgets every speculated shard (its shadows and pending bytes are reused). Never throws.
  void drop_speculation() noexcept;
  /// Whether the last whole run failed midway with bounded shadows and must be retried (above).
  [[nodiscard]] bool part_done() const noexcept;
  /// Forgets a run that failed midway (the caller overwrites every state). Never throws.
  void abandon_part_done() noexcept;
  /// Shards speculated and not yet committed or dropped.
  [[nodiscard]] std::size_t speculated() const noexcept;
  [[nodiscard]] const speculation_totals& speculation() const noexcept;
  /// speculation().speculated, readable from any thread while speculate() runs on another.
  [[nodiscard]] std::uint64_t shards_stepped_ahead() const noexcept;
  /// The last run's figures (also after a failed one).
  [[nodiscard]] const optimizer_step_stats& last() const noexcept;
  /// The figures of the last step that completed whole (run(), or run_stages() with every stage):
  /// the stage runs that time a step (offload_engine::measure_stages) leave it as it was. Zero
  /// before the first.
  [[nodiscard]] const optimizer_step_stats& last_step() const noexcept;
  /// Every run's figures summed (above).
  [[nodiscard]] const optimizer_step_totals& totals() const noexcept;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace zoe::engine
