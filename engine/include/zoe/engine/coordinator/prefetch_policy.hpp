#pragma once
// The decisions of ZeRO-3's trace-based prefetch, apart from the I/O that carries them out: which
// parameters to gather when a module is fetched, which to gather ahead of need, and which to free
// when a module is released. The coordinator executes what it returns (fetch over the tiers, gather
// through the communicator into the arena, free) and tells it what happened; nothing here touches
// memory, a device or a file, so every rule is tested on its own.
//
// The rules (DeepSpeed's PartitionedParameterCoordinator, with the differences noted):
// - Trace. The first step records the order of module fetches. At its end that order becomes the
//   trace; each later step that follows it prefetches along it. A fetch that departs from the trace
//   (another module than the trace has at that position, or more fetches than it holds) invalidates
//   it with one info line naming both modules, and the step goes on recording from there: the new
//   trace is the part of the old one this step matched, then what it fetches next. (DeepSpeed drops
//   the trace and records only the step after.) A step that ends early, a prefix of the trace such
//   as a forward-only step, keeps the trace.
// - Prefetch. After each fetch of a step that follows the trace, the parameters next in the trace
//   that are released are gathered ahead, in trace order, as long as each fits both limits:
//     ahead_numel() + its elements <= stage3_prefetch_bucket_size, and
//     live_numel()  + its elements <= stage3_max_live_parameters.
//   The first that does not fit stops the walk (order is kept; it resumes at the next fetch).
//   When nothing is ahead, a parameter larger than the bucket is prefetched alone (a bucket of 0
//   still prefetches nothing), as DeepSpeed admits a parameter while less than the bucket is being
//   prefetched; otherwise a weight larger than the bucket would stop every prefetch behind it.
//   So ahead_numel() is at most the bucket, or the one parameter that was larger.
//   "Ahead" counts the parameters prefetched whose use has not come yet; DeepSpeed bounds only the
//   elements issued per fetch by the bucket, so its in-flight elements can grow to the live limit.
//   Parameters the walk passes that are already gathered are not gathered again, and stay gathered
//   at least until that later use (DeepSpeed's fix for uses skipped by the prefetcher).
// - Release. Releasing a module frees its parameters, except persistent ones, ones a later use was
//   already prefetched for (above), and, while following the trace, ones whose module comes again
//   within stage3_max_reuse_distance: the elements of the modules fetched in between (counted per
//   fetch, as DeepSpeed counts them) are fewer than stage3_max_reuse_distance. While recording,
//   every non-persistent parameter is freed at release.
// - Persistence. Parameters of at most stage3_param_persistence_threshold elements stay gathered
//   for good once gathered, chosen in parameter id order while their total stays within
//   stage3_model_persistence_threshold (a parameter that would exceed it is skipped and later
//   smaller ones still count, as in DeepSpeed). These two thresholds compare real elements
//   (parameter_layout::numel), as DeepSpeed's ds_numel does.
// - Inference steps (begin_step(step_kind::inference): forward passes outside training, whose order
//   need not be training's) neither follow, record nor depart from the trace: their fetches gather
//   their own parameters only (no prefetch), their releases free every non-persistent parameter
//   (as while recording), and the trace and whether it is recording are as before at their end, so
//   the training steps around them prefetch exactly as without them.
// - Demand fetches are never bounded: a module's own parameters are always gathered when it is
//   fetched (the arena's back-pressure bounds memory); the limits bound only what runs ahead.
//
// Elements. Every count here except the persistence thresholds is in gathered elements: a
// parameter's padded_numel(world_size), the size of the full parameter a gather writes into the
// arena, so live_numel() times the element size is the arena bytes the gathered parameters hold.
//
// Statuses. Each parameter is released, in flight or gathered, in the policy's view:
// - A parameter named in fetch_decision::gather or ::prefetch is in flight from the moment on_fetch
//   returns (the caller must gather it, or report on_freed if it cannot);
// - on_gathered() marks a gather complete (optional where the caller only orders work on streams:
//   in flight and gathered count alike as live);
// - a parameter named by on_release() or end_step() is released from the moment the call returns
//   (the caller frees it); on_freed() reports a parameter the caller dropped on its own.
//
// Thread-safety: none; one coordinator drives a policy under its own lock. The layout must outlive
// the policy.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>
#include <vector>

#include "zoe/engine/config/config.hpp"
#include "zoe/engine/model/layout.hpp"

namespace zoe::engine {

/// A gathered parameter's status, as the policy tracks it.
enum class gather_status : std::uint8_t { released = 0, in_flight = 1, gathered = 2 };
/// "released", "in flight", "gathered". Never throws.
[[nodiscard]] std::string_view gather_status_name(gather_status s) noexcept;

/// What to do when a module is fetched. Every parameter named is in flight when on_fetch returns.
struct fetch_decision {
  /// The fetched module's parameters that were released: gather them now. Its other parameters are
  /// in flight or gathered already; the module may run once all of them have arrived.
  std::vector<parameter_id> gather;
  /// Parameters of modules ahead in the trace, in trace order: gather them now, wait later.
  std::vector<parameter_id> prefetch;
};

/// What a step is for: training (its fetches follow or record the trace) or inference (above).
enum class step_kind : std::uint8_t { training = 0, inference = 1 };

/// The prefetch limits of zero_optimization (stage3_* keys), in elements.
struct prefetch_limits {
  std::uint64_t prefetch_bucket_size = 50'000'000;
  std::uint64_t max_live_parameters = 1'000'000'000;
  std::uint64_t max_reuse_distance = 1'000'000'000;
  std::uint64_t param_persistence_threshold = 100'000;
  std::uint64_t model_persistence_threshold = std::numeric_limits<std::int64_t>::max();
  /// The stage3_* values of `zero`. Never throws.
  [[nodiscard]] static prefetch_limits from(const zero_config& zero) noexcept;
};

class prefetch_policy {
 public:
  /// Chooses the persistent parameters. Never fails for a valid layout (a limit of 0 disables what
  /// it bounds: no prefetch, no reuse, no persistence).
  prefetch_policy(const model_layout& layout, const prefetch_limits& limits);
  prefetch_policy(const model_layout& layout, const zero_config& zero)
      : prefetch_policy(layout, prefetch_limits::from(zero)) {}

  // ---- a step ----------------------------------------------------------------------------------
  /// Starts a step (a forward and backward pass; with step_kind::inference, fetches the trace does
  /// not see). usage_error if a step is open.
  void begin_step(step_kind kind = step_kind::training);
  /// The caller fetches `module`: what to gather now for it and ahead of it. usage_error, naming
  /// the module, when no step is open or the module is unknown. May invalidate the trace (above).
  [[nodiscard]] fetch_decision on_fetch(module_id module);
  /// The caller is done with `module` (after its forward or backward): the parameters of it to
  /// free now, each then released. usage_error naming the module when it has no fetch in this step
  /// that was not released yet (fetching a module twice needs two releases).
  [[nodiscard]] std::vector<parameter_id> on_release(module_id module);
  /// Ends the step: the non-persistent parameters still gathered or in flight (prefetched for uses
  /// that did not come, kept for a reuse that did not come), each then released, for the caller
  /// to free. A recording step's order becomes the trace. usage_error if no step is open, or if a
  /// fetched module was not released.
  [[nodiscard]] std::vector<parameter_id> end_step();

  // ---- notifications -----------------------------------------------------------------------------
  /// A gather the policy ordered has completed. usage_error naming the parameter unless in flight.
  void on_gathered(parameter_id parameter);
  /// The caller freed (or failed to gather) `parameter` without being told to: it is released, and
  /// gathered again at its next fetch, persistent or not. usage_error naming it if released.
  void on_freed(parameter_id parameter);

  // ---- state -------------------------------------------------------------------------------------
  [[nodiscard]] gather_status status(parameter_id parameter) const;  ///< usage_error if unknown
  [[nodiscard]] bool persistent(parameter_id parameter) const;       ///< usage_error if unknown
  /// The persistent parameters, in id order, and their real elements (<= model threshold).
  [[nodiscard]] std::span<const parameter_id> persistent_parameters() const noexcept { return persistent_; }
  [[nodiscard]] std::uint64_t persistent_numel() const noexcept { return persistent_numel_; }
  /// Gathered elements of the parameters in flight or gathered.
  [[nodiscard]] std::uint64_t live_numel() const noexcept { return live_numel_; }
  /// Gathered elements of the parameters prefetched whose use in this step has not come yet.
  [[nodiscard]] std::uint64_t ahead_numel() const noexcept { return ahead_numel_; }
  /// True while the policy records (the first step, or a step after its order departed; also
  /// between steps when no trace is complete yet): nothing is prefetched then.
  [[nodiscard]] bool recording() const noexcept { return recording_; }
  /// True while an inference step is open.
  [[nodiscard]] bool inference() const noexcept { return inference_; }
  /// While following: the complete trace. While recording: the order recorded so far.
  [[nodiscard]] std::span<const module_id> trace() const noexcept { return trace_; }
  /// Module fetches so far in the open step (the position in the trace).
  [[nodiscard]] std::size_t position() const noexcept { return position_; }
  /// Released parameters further along the trace than the prefetch has reached, in trace order,
  /// up to `max_numel` gathered elements: what to stage (read their shards from NVMe into pinned
  /// buffers) before their gather. Empty while recording or in an inference step. Does not change
  /// any status.
  [[nodiscard]] std::vector<parameter_id> lookahead(std::uint64_t max_numel) const;

 private:
  struct param_state {
    gather_status status = gather_status::released;
    bool persistent = false;
    bool ahead = false;           ///< prefetched, its use not reached yet
    std::size_t serve_until = 0;  ///< 1 + the last trace position its current gather was scanned for
  };
  struct trace_entry {
    parameter_id parameter = 0;
    std::size_t position = 0;  ///< trace position of the module fetch that uses it
  };

  [[nodiscard]] std::uint64_t gathered_numel(parameter_id p) const noexcept;
  [[nodiscard]] param_state& state(parameter_id p);
  [[nodiscard]] const param_state& state(parameter_id p) const;
  void require_open(std::string_view what, module_id module) const;
  void depart(module_id module);
  void complete_trace();
  void prefetch_after(std::vector<parameter_id>& out);
  [[nodiscard]] bool reused_soon(module_id module, std::size_t position) const;
  void mark_released(parameter_id p) noexcept;

  const model_layout* layout_;
  prefetch_limits limits_;
  std::vector<param_state> params_;
  std::vector<parameter_id> persistent_;
  std::uint64_t persistent_numel_ = 0;
  std::uint64_t live_numel_ = 0;
  std::uint64_t ahead_numel_ = 0;

  bool open_ = false;
  bool recording_ = true;
  bool inference_ = false;  ///< the open step is an inference step
  std::size_t position_ = 0;
  std::vector<std::uint32_t> active_;  ///< per module: fetches not released yet in this step
  std::vector<module_id> trace_;
  // Derived from a complete trace:
  std::vector<trace_entry> entries_;                   ///< parameters of the trace's fetches, in order
  std::vector<std::size_t> first_entry_;               ///< per position: its first index in entries_
  std::vector<std::uint64_t> prefix_numel_;            ///< per position: gathered elements before it
  std::vector<std::vector<std::size_t>> occurrences_;  ///< per module: its positions in the trace
  std::size_t cursor_ = 0;                             ///< next index of entries_ the prefetch walks
};

}  // namespace zoe::engine
