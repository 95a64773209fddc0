#pragma once
// The resolved configuration: DeepSpeed's keys with DeepSpeed's defaults, plus zoe's own block.
// Plain values only; engine/config/parse.hpp turns a JSON document into one (with diagnostics).
// Sizes count elements where DeepSpeed counts elements (buffer_size, max_in_cpu, sub_group_size,
// the bucket sizes and the stage3_* limits) and bytes where it counts bytes (aio.block_size).

#include <array>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zoe::engine {

/// Where offload_param / offload_optimizer put their states ("none", "cpu", "nvme").
enum class offload_device : std::uint8_t { none = 0, cpu = 1, nvme = 2 };

/// "none", "cpu" or "nvme". Never throws.
[[nodiscard]] std::string_view offload_device_name(offload_device d) noexcept;

/// zero_optimization.offload_param (DeepSpeedZeroOffloadParamConfig). Honoured at stage 3 only.
struct offload_param_config {
  offload_device device = offload_device::none;
  std::optional<std::filesystem::path> nvme_path;
  std::uint64_t buffer_count = 5;           ///< pinned swap buffers for parameters
  std::uint64_t buffer_size = 100'000'000;  ///< elements per buffer
  /// With device nvme: working-copy shard elements (per rank) kept for good in pinned host memory,
  /// filled in layout order a whole sub-group at a time; the rest live on NVMe. Unused otherwise.
  std::uint64_t max_in_cpu = 1'000'000'000;
  bool pin_memory = true;  ///< DeepSpeed's default since it made pinned offload the default
};

/// zero_optimization.offload_optimizer (DeepSpeedZeroOffloadOptimizerConfig).
struct offload_optimizer_config {
  offload_device device = offload_device::none;
  std::optional<std::filesystem::path> nvme_path;
  std::uint64_t buffer_count = 4;
  bool pin_memory = true;
  bool pipeline_read = false;
  bool pipeline_write = false;
  bool fast_init = false;
  double ratio =
      1.0;  ///< fraction of the optimizer states offloaded (and stepped on the CPU), in [0, 1]; < 1 needs stage 3
};

/// zero_optimization (DeepSpeedZeroConfig). Field names are DeepSpeed's JSON names without the
/// stage3_ prefix (the JSON keys carry it: stage3_prefetch_bucket_size, ...); the JSON keys are
/// documented in engine/CONFIG.md.
struct zero_config {
  int stage = 0;  ///< 0..3
  bool contiguous_gradients = true;
  bool reduce_scatter = true;
  std::uint64_t reduce_bucket_size = 500'000'000;
  std::uint64_t allgather_bucket_size = 500'000'000;
  bool overlap_comm = false;                          ///< unset in the file: true at stage 3, as DeepSpeed resolves it
  std::optional<offload_param_config> offload_param;  ///< nullopt: no offload_param block
  std::optional<offload_optimizer_config> offload_optimizer;  ///< nullopt: no offload_optimizer block
  std::uint64_t sub_group_size = 1'000'000'000;
  std::uint64_t prefetch_bucket_size = 50'000'000;
  std::uint64_t param_persistence_threshold = 100'000;
  std::uint64_t model_persistence_threshold = std::numeric_limits<std::int64_t>::max();  // sys.maxsize
  std::uint64_t max_live_parameters = 1'000'000'000;
  std::uint64_t max_reuse_distance = 1'000'000'000;
  bool gather_16bit_weights_on_model_save = false;  ///< stage3_gather_16bit_weights_on_model_save
  std::uint64_t zero_hpz_partition_size = 1;
  bool zero_quantized_weights = false;
  bool zero_quantized_nontrainable_weights = false;
  bool zero_quantized_gradients = false;
};

/// aio (DeepSpeed's async I/O block).
struct aio_config {
  std::uint64_t block_size = 1'048'576;  ///< bytes
  std::uint64_t queue_depth = 8;
  std::uint64_t intra_op_parallelism = 1;  ///< also read from the older thread_count, with a warning
  bool single_submit = false;
  bool overlap_events = true;
  bool use_gds = false;
};

/// fp16 (mixed precision with loss scaling).
struct fp16_config {
  bool enabled = false;
  bool auto_cast = false;
  double loss_scale = 0;  ///< 0: dynamic; >= 0
  std::int64_t initial_scale_power = 16;
  std::int64_t loss_scale_window = 1000;  ///< > 0 when dynamic
  std::int64_t hysteresis = 2;
  bool consecutive_hysteresis = false;
  std::int64_t min_loss_scale = 1;  ///< an integer in DeepSpeed; > 0 when dynamic
};

struct bf16_config {
  bool enabled = false;
};

/// optimizer {type, params}. "Adam" means AdamW unless adam_w_mode is false, as in DeepSpeed.
struct optimizer_config {
  std::string type = "Adam";
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 0;
  bool adam_w_mode = true;
  bool bias_correction = true;
};

/// One parameter group's settings at a step (PyTorch's param_groups: lr, weight_decay, betas and
/// eps), as the step applies them to the parameters of that group (parameter_spec::group).
struct group_hyper {
  double lr = 0;
  double weight_decay = 0;
  std::array<double, 2> betas = optimizer_config{}.betas;
  double eps = optimizer_config{}.eps;
  friend bool operator==(const group_hyper&, const group_hyper&) = default;
};

/// The five states of a shard, in the order the tiers list them.
enum class state_kind : std::uint8_t { working = 0, gradient = 1, master = 2, exp_avg = 3, exp_avg_sq = 4 };
inline constexpr std::size_t state_kind_count = 5;
/// "working", "gradient", "master", "exp_avg", "exp_avg_sq" (the names under zoe.placement). Never throws.
[[nodiscard]] std::string_view state_kind_name(state_kind s) noexcept;

/// A state's share of each tier (zoe.placement.<state>): fractions in [0, 1] summing to 1.
struct tier_fractions {
  double device = 0;
  double host = 0;
  double nvme = 0;
};

/// zoe.activations: the activation checkpoints' memory (engine/activations/activation_store.hpp).
/// Every share is 0 by default: activation checkpointing is opt-in, as DeepSpeed's
/// cpu_checkpointing is, and a share listed in the footprint plan costs memory (and memlock) for
/// every engine, used or not.
struct activation_settings {
  std::uint64_t host_bytes = 0;      ///< zoe.activations.host_bytes: pinned host share
  std::uint64_t nvme_bytes = 0;      ///< zoe.activations.nvme_bytes: swap store capacity for what overflows it
  std::uint64_t prefetch_bytes = 0;  ///< zoe.activations.prefetch_bytes: device share for prefetched ones
};

/// zoe.comm: how the ranks talk (engine/comm/communicator.hpp; comm_options).
struct comm_settings {
  std::string backend = "auto";  ///< zoe.comm.backend: auto | single | mpi | nccl | host
  double timeout_s = 300;        ///< zoe.comm.timeout_s: > 0; a collective waiting longer fails naming the rank
};

/// zoe's own settings (the top-level "zoe" key); see engine/CONFIG.md.
struct zoe_settings {
  std::string device_kind = "auto";            ///< zoe.device.kind: auto | host | cuda
  std::optional<std::uint64_t> device_budget;  ///< zoe.device.budget_bytes (host device budget)
  bool checksums = true;                       ///< zoe.swap.checksums
  std::string io_engine = "auto";              ///< zoe.swap.engine: auto | uring | aio | posix
  /// zoe.swap.shadows: "full" (every NVMe state the step rewrites has a shadow extent: the swap
  /// files hold those states twice, and a failed step leaves every state as it was) or "bounded"
  /// (no shadow extents: the step rewrites in place, and a step that fails midway rolls forward
  /// when retried; optimizer_step.hpp).
  std::string shadows = "full";
  std::vector<std::filesystem::path> extra_swap_paths;  ///< zoe.swap.extra_paths: striped with nvme_path
  std::string numa_policy = "local";                    ///< zoe.numa: none | local | interleave
  /// zoe.placement.<state>: overrides offload_param / offload_optimizer / max_in_cpu for that
  /// state (the precedence is documented in engine/CONFIG.md). nullopt: not given.
  std::array<std::optional<tier_fractions>, state_kind_count> placement{};
  activation_settings activations;  ///< zoe.activations
  comm_settings comm;               ///< zoe.comm
  /// zoe.optimizer_in_backward: each shard's Adam runs speculatively once its gradient is final
  /// (at the end of backward's last micro-batch), committed by step() when nothing overflowed and
  /// clipping left the gradients as they were, dropped otherwise (optimizer_step.hpp).
  bool optimizer_in_backward = true;
  /// zoe.optimizer_pending_bytes: pageable host bytes that hold the new values of speculated shards'
  /// states in host memory until the step commits them (footprint_plan::optimizer_pending_bytes);
  /// the shards that do not fit step after backward. Shards all on nvme need none.
  std::uint64_t optimizer_pending_bytes = std::uint64_t{256} << 20;
  /// zoe.ranks_per_node: ranks on one node (consecutive world ranks); 0: from MPI's shared-memory
  /// split. Lets tests run 4 ranks as 2 "nodes" of 2 on one machine.
  std::uint64_t ranks_per_node = 0;
};

/// DeepSpeed's three batch keys, train_batch_size = train_micro_batch_size_per_gpu x
/// gradient_accumulation_steps x world size, as the document wrote them (nullopt: not written);
/// resolve_batch_sizes fills in the one missing and checks the three.
struct batch_config {
  std::optional<std::uint64_t> train_batch_size;
  std::optional<std::uint64_t> train_micro_batch_size_per_gpu;
  std::optional<std::uint64_t> gradient_accumulation_steps;
};

/// Every setting zoe reads from one configuration document.
struct engine_config {
  zero_config zero;
  aio_config aio;
  fp16_config fp16;
  bf16_config bf16;
  double gradient_clipping = 1.0;  ///< DeepSpeed's default since 2026-06 (0 disables)
  /// >= 1: the micro-batches of one step. As written (default 1) until resolve_batch_sizes
  /// (batch_sizes.hpp) derives it, as DeepSpeed does, from the batch sizes and the world size.
  std::uint64_t gradient_accumulation_steps = 1;
  batch_config batch;
  std::optional<optimizer_config> optimizer;  ///< nullopt: no optimizer block
  zoe_settings zoe;
};

}  // namespace zoe::engine
