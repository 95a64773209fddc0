#pragma once
// The footprint plan: before anything is allocated, the device, pinned-host, pageable-host and NVMe
// bytes this configuration and model need (states per tier, the parameter and optimizer swap
// buffers, the gathered-parameter arena, the swap store), item by item, and the check against this
// machine. The engine allocates exactly what the plan lists; pinned bytes in use never exceed
// plan.pinned_bytes and device bytes never exceed the device budget.
//
// pin_memory: it decides whether the host homes of states are pinned or pageable (placement.hpp).
// The swap buffers that stage NVMe reads and writes are pinned whatever it says: O_DIRECT needs
// aligned memory and the device copies need locked memory to run at full speed, and they are few
// and of constant size (buffer_count of them), so pin_memory false costs no speed there. They are
// counted in pinned_bytes, which is what RLIMIT_MEMLOCK must cover.

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "zoe/core/device.hpp"
#include "zoe/engine/config/config.hpp"
#include "zoe/engine/model/layout.hpp"
#include "zoe/engine/tiers/placement.hpp"

namespace zoe::engine {

enum class memory_kind : std::uint8_t { device = 0, pinned = 1, pageable = 2, nvme = 3 };
inline constexpr std::size_t memory_kind_count = 4;
/// "device", "pinned host", "pageable host", "nvme". Never throws.
[[nodiscard]] std::string_view memory_kind_name(memory_kind m) noexcept;

/// The memory a home in tier `t` takes: host memory is pinned or pageable. Never throws.
[[nodiscard]] memory_kind memory_of(tier t, bool pinned) noexcept;

/// A pool of pinned slots of the rank's mover (swap/mover.hpp names it "mover.<key>"), cut from
/// its plan item's memory: slot_bytes x slot_count is at most the item's bytes.
struct plan_pool {
  std::string key;  ///< "params"
  std::uint64_t slot_bytes = 0;
  std::uint64_t slot_count = 0;
};

/// One line of the plan: what, how many bytes of which memory, and the config keys that size it.
struct plan_item {
  std::string what;  ///< "exp_avg_sq on nvme", "parameter swap buffers", "gathered-parameter arena"
  memory_kind memory = memory_kind::device;
  std::uint64_t bytes = 0;
  std::vector<std::string> keys;  ///< full key paths ("zero_optimization.offload_param.buffer_size")
  /// Set when the item's memory is a pool of the mover: the engine makes the mover's pools from
  /// these items, and from nothing else.
  std::optional<plan_pool> pool;
};

struct footprint_plan {
  std::vector<plan_item> items;  ///< their bytes sum to the totals below, per memory
  std::uint64_t device_bytes = 0;
  std::uint64_t pinned_bytes = 0;
  std::uint64_t pageable_bytes = 0;
  std::uint64_t nvme_bytes = 0;  ///< swap store capacity over every nvme path (what swap_store_options::capacity gets)
  /// Bytes of the states' homes in each memory (indexed by memory_kind; nvme before the store's
  /// rounding). The tier manager allocates exactly these.
  std::array<std::uint64_t, memory_kind_count> state_bytes{};
  /// The sizes the engine allocates with (also listed among the items).
  std::uint64_t arena_bytes = 0;             ///< device arena for gathered parameters
  std::uint64_t param_buffer_count = 0;      ///< pinned swap buffers for parameters (0 without nvme)
  std::uint64_t param_buffer_bytes = 0;      ///< bytes per parameter swap buffer (4 KiB multiple, >= one chunk)
  std::uint64_t optimizer_buffer_count = 0;  ///< pinned swap buffers of the optimizer step (0 without nvme)
  std::uint64_t optimizer_buffer_bytes = 0;  ///< bytes per optimizer swap buffer (4 KiB multiple)
  /// Pageable host bytes of the optimizer step's undo log: the in-memory states the step rewrites
  /// in shards that also have a state on nvme or in device memory (optimizer_step.hpp).
  std::uint64_t optimizer_undo_bytes = 0;
  /// Pageable host bytes of the speculative step's pending memory (optimizer_step.hpp): the new
  /// values of the host-resident states of shards stepped inside backward, held until step()
  /// commits them, and the fp32 masters backward's fetches hand the speculation (each until it is
  /// read). zoe.optimizer_pending_bytes, at most what every shard that can be speculated needs; 0
  /// with zoe.optimizer_in_backward off.
  std::uint64_t optimizer_pending_bytes = 0;
  /// Device buckets the gradients of backward are written into (gradient_path.hpp): 2 with
  /// overlap_comm, else 1, each of reduce_bucket_size elements but never smaller than the largest
  /// module's gradients.
  std::uint64_t gradient_bucket_count = 0;
  std::uint64_t gradient_bucket_bytes = 0;
  /// Pinned staging buffers of the gradients whose state is not on the device (0 without): the
  /// reduced gradient's copy from the device, and the read-modify-writes of those on nvme. Each
  /// holds whole aio.block_size chunks and whole 64 Ki-element chunks of fp32 (or the largest such
  /// shard whole).
  std::uint64_t gradient_buffer_count = 0;
  std::uint64_t gradient_buffer_bytes = 0;
  /// Activation checkpoints (zoe.activations, activation_store.hpp): the pinned host share, the
  /// device share for prefetched ones, the swap store bytes for those that overflow the host share
  /// (0 when nothing is configured, or when no swap folder is), and the pinned staging memory their
  /// NVMe reads and writes pass through (whole aio.block_size chunks; 0 without NVMe bytes).
  std::uint64_t activation_host_bytes = 0;
  std::uint64_t activation_prefetch_bytes = 0;
  std::uint64_t activation_nvme_bytes = 0;
  std::uint64_t activation_staging_bytes = 0;
  /// ZeRO++ (engine/coordinator/coordinator.hpp, optim/gradient_path.hpp), device memory, 0 when off:
  /// hpZ's secondary shards (zero_hpz_partition_size > 1 dividing the world size > 1): each
  /// parameter's slice over the hpZ group (hpz_secondary_shard_bytes, blocks aligned to
  /// arena_alignment), kept from the forward gather for backward's;
  std::uint64_t hpz_secondary_bytes = 0;
  /// qwZ's scratch (zero_quantized_weights): one bucket's quantized messages from every rank; the
  /// largest parameter's alone, or a bucket of allgather_bucket_size gathered elements (at most the
  /// whole model's), whichever is more;
  std::uint64_t qwz_scratch_bytes = 0;
  /// qgZ's scratch (zero_quantized_gradients): the largest parameter's quantized reduce-scatter on
  /// any topology of the world and any device (an upper bound on the host device and on one node).
  std::uint64_t qgz_scratch_bytes = 0;
  /// Stage 1's local gradient accumulation (accumulates_gradients_locally; optim/local_accumulation.hpp):
  /// every parameter's whole (padded) gradient in fp32 on this rank, not 1/N of it, in device memory
  /// for the parameters whose gradient state is on the device and pageable host memory for the rest
  /// (device blocks aligned to arena_alignment). 0 when stage 1 does not accumulate locally.
  std::uint64_t local_gradient_device_bytes = 0;
  std::uint64_t local_gradient_host_bytes = 0;
  /// The swap store: its folders (striped) and its block_size (aio.block_size), which the
  /// capacity's rounding assumes. Empty paths when nothing is on nvme.
  std::vector<std::filesystem::path> swap_paths;
  /// Whether the tier manager gives every NVMe state the step rewrites a shadow extent
  /// (zoe.swap.shadows "full"; "bounded": none, listed and counted nowhere).
  bool shadow_extents = true;
  std::uint64_t swap_block_size = 0;
};

/// Alignment of every block of the gathered-parameter arena (allocators::arena_options' default).
inline constexpr std::uint64_t arena_alignment = 256;

/// fp32 bytes of one chunk of kernels::sum_of_squares' fixed order (64 Ki elements): a piece of a
/// gradient the gradient path stages covers whole ones (gradient_path.hpp).
inline constexpr std::uint64_t gradient_sum_chunk_bytes = std::uint64_t{65536} * 4;
/// The gradient path's pinned staging buffers (footprint_plan.cpp says why four).
inline constexpr std::uint64_t gradient_buffer_count = 4;
/// Device bytes of the gradient path's norm scratch for one parameter whose gradient lives on a
/// CUDA device (gradient_path.cpp): the sum of squares' workspace for its shard of `shard_numel`
/// elements, then the fp64 result and the uint32 inf/NaN flag (16 bytes). Never throws.
[[nodiscard]] std::uint64_t gradient_norm_scratch_bytes(std::uint64_t shard_numel) noexcept;

/// Bytes of `p`'s hpZ secondary shard on a world of `world` ranks with hpZ groups of `hpz` ranks
/// (dividing `world`): its full (padded) parameter at its working type over `hpz`. Never throws.
[[nodiscard]] std::uint64_t hpz_secondary_shard_bytes(const parameter_layout& p, std::size_t world,
                                                      std::size_t hpz) noexcept;

/// How `config`'s stage lays the states out on `world_size` ranks: stage 0 (plain data parallelism,
/// nothing partitioned) in one shard that every rank holds whole (world_size 1, replicas
/// world_size), so each rank keeps a full replica of the parameters, gradients and optimizer
/// states, steps every element and all-reduces the gradients; stages 1-3 in one shard per rank
/// (world_size world_size, replicas 1). make_footprint_plan expects its layout laid out so. Never
/// throws.
[[nodiscard]] layout_options stage_layout(const engine_config& config, std::size_t world_size) noexcept;

/// Whether a step's micro-batches accumulate each rank's whole gradient locally and reduce it once, at
/// the step's last micro-batch (ZeRO stages 0 and 1 as DeepSpeed runs them: engine.py's
/// allreduce_gradients reduces only at is_gradient_accumulation_boundary when gradients are not
/// partitioned): stage 0 or 1, more than one rank, more than one micro-batch per step. Stages 2
/// and 3 reduce-scatter every micro-batch and keep only their partition. Never throws.
[[nodiscard]] bool accumulates_gradients_locally(const engine_config& config, std::size_t world_size) noexcept;

/// Throws config_error naming the key when `config` cannot run on `world_size` ranks: stage 0 on
/// more than one with zero_optimization.zero_quantized_gradients (its all-reduce is not quantized)
/// or zero_optimization.zero_hpz_partition_size above 1 (every rank holds whole parameters: nothing
/// to gather). make_footprint_plan checks it; the engine also checks it before it makes its worlds.
void check_stage_fits_world(const engine_config& config, std::size_t world_size);

/// The parameters that stay gathered for good. Below stage 3 that is every parameter: stages 0-2
/// replicate the 16-bit parameters on every rank (DeepSpeed's stage_1_and_2.py keeps the whole
/// model and all-gathers the owners' updated partitions after the step). At stage 3, as DeepSpeed
/// marks them (parameter_offload.py, mark_persistent_parameters): in layout order, a parameter of at most
/// stage3_param_persistence_threshold elements persists unless it would take the persistent
/// elements past stage3_model_persistence_threshold (then it is skipped, and smaller ones after
/// it may still persist). Never throws beyond allocation.
[[nodiscard]] std::vector<parameter_id> persistent_parameters(const model_layout& layout, const zero_config& zero);

/// Computes the plan. Throws config_error naming the keys when the configuration cannot work for
/// this layout at all (buffer_count 0 with states on nvme; check_stage_fits_world on the layout's
/// ranks). Every item is one rank's: at stage 0 whole states, a full replica on every rank. A
/// parameter swap buffer is made at least as large as the largest working shard on nvme or one
/// aio.block_size chunk, whichever is smaller (the swapper moves larger shards in whole chunks);
/// usage_error when `where` was built for another layout, or the layout is not laid out as
/// stage_layout lays out config's stage on the layout's ranks.
[[nodiscard]] footprint_plan make_footprint_plan(const model_layout& layout, const engine_config& config,
                                                 const placement& where);

/// One swap path as this machine has it.
struct swap_disk {
  std::filesystem::path path;
  std::optional<std::uint64_t> free;  ///< free bytes; nullopt when the path does not exist here (unknown)
  /// The filesystem holding it (stat's st_dev), so that paths on one filesystem are checked
  /// against its free space together; nullopt when unknown (then the path counts alone).
  std::optional<std::uint64_t> filesystem;
};

/// What this machine offers, measured once (tests pass their own).
struct machine_limits {
  std::uint64_t device_budget = 0;   ///< bytes the device hands out
  std::uint64_t memlock_limit = 0;   ///< RLIMIT_MEMLOCK (UINT64_MAX when unlimited or CAP_IPC_LOCK)
  std::uint64_t host_available = 0;  ///< MemAvailable
  /// Each swap path, its free bytes and its filesystem.
  std::vector<swap_disk> disk_free;
};

/// Measures this machine for `config`: the budget of the device select_device() would open for
/// zoe.device (the host device's resolved budget, or the CUDA device's), RLIMIT_MEMLOCK,
/// MemAvailable, and the free bytes under each of swap_paths(config). Throws what select_device
/// throws (config_error for a bad zoe.device.kind or ZOE_DEVICE_BUDGET).
[[nodiscard]] machine_limits measure_machine(const engine_config& config);
/// Measures this machine for `config` with the device the engine was given (its budget and its
/// kind, which decides whether RLIMIT_MEMLOCK binds) instead of the one select_device() would open.
/// Never throws beyond allocation.
[[nodiscard]] machine_limits measure_machine(const engine_config& config, const device& dev);

/// Why the plan does not fit, one line per shortfall naming the bytes needed and available and
/// the keys to change; empty when it fits. Swap paths on one filesystem need their shares of the
/// store from its free space together. A swap path whose free space is unknown is no shortfall
/// (the swap store refuses a missing path when the engine starts). Never throws beyond allocation.
[[nodiscard]] std::vector<std::string> plan_shortfalls(const footprint_plan& plan, const machine_limits& limits);

/// Throws config_error listing plan_shortfalls() when there is any.
void check_plan_fits(const footprint_plan& plan, const machine_limits& limits);

}  // namespace zoe::engine
