// The footprint plan: every byte the states, the swap buffers, the arena and the swap store need.
#include "zoe/engine/tiers/footprint_plan.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>
#include <string>

#include "step_pieces.hpp"
#include "zoe/core/check.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"
#include "zoe/kernels/cuda.hpp"

namespace zoe::engine {
namespace {

// Element counts from the config times element sizes: a count near UINT64_MAX means "no limit".
std::uint64_t saturating_mul(std::uint64_t a, std::uint64_t b) noexcept {
  return b != 0 && a > std::numeric_limits<std::uint64_t>::max() / b ? std::numeric_limits<std::uint64_t>::max()
                                                                     : a * b;
}

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) noexcept {
  return a > std::numeric_limits<std::uint64_t>::max() - b ? std::numeric_limits<std::uint64_t>::max() : a + b;
}

// Bounds the swap buffer knobs so their byte counts cannot overflow (2^48 elements is 1 PiB of fp32).
constexpr std::uint64_t max_buffer_elements = std::uint64_t{1} << 48;

// O_DIRECT wants buffers, lengths and offsets in whole 4 KiB pages (the swap store's granularity).
constexpr std::uint64_t page = 4096;

std::string pin_key(state_kind s) {
  return s == state_kind::working ? "zero_optimization.offload_param.pin_memory"
                                  : "zero_optimization.offload_optimizer.pin_memory";
}

class plan_builder {
 public:
  explicit plan_builder(footprint_plan& plan) : plan_(plan) {}

  void add(std::string what, memory_kind memory, std::uint64_t bytes, std::vector<std::string> keys,
           std::optional<plan_pool> pool = std::nullopt) {
    if (bytes == 0) return;
    plan_.items.push_back(
        {.what = std::move(what), .memory = memory, .bytes = bytes, .keys = std::move(keys), .pool = std::move(pool)});
    total(memory) = saturating_add(total(memory), bytes);
  }

 private:
  std::uint64_t& total(memory_kind memory) {
    switch (memory) {
      case memory_kind::device: return plan_.device_bytes;
      case memory_kind::pinned: return plan_.pinned_bytes;
      case memory_kind::pageable: return plan_.pageable_bytes;
      case memory_kind::nvme: return plan_.nvme_bytes;
    }
    return plan_.device_bytes;
  }

  footprint_plan& plan_;
};

void add_states(plan_builder& out, footprint_plan& plan, const placement& where) {
  for (const state_kind s : all_states) {
    for (const tier t : {tier::device, tier::host, tier::nvme}) {
      const std::uint64_t bytes = where.bytes(s, t);
      const memory_kind memory = memory_of(t, where.host_pinned(s));
      plan.state_bytes[static_cast<std::size_t>(memory)] += bytes;
      if (t == tier::nvme) continue;  // listed with the swap store, which holds them
      std::vector<std::string> keys(where.keys(s).begin(), where.keys(s).end());
      if (t == tier::host) keys.push_back(pin_key(s));
      out.add(str(state_kind_name(s), " in ", memory_kind_name(memory), " memory"), memory, bytes, std::move(keys));
    }
  }
}

// Whether the optimizer step rewrites state `s` of `p` on nvme, and so the tier manager gives it a
// second (shadow) extent of the same size (tier_manager.hpp): master, exp_avg, exp_avg_sq, and the
// working copy when it has bytes (an fp32 parameter's working copy is its master).
bool has_shadow_extent(const parameter_layout& p, state_kind s, const placement& where, const footprint_plan& plan) {
  return plan.shadow_extents && s != state_kind::gradient && state_bytes(p, s) > 0 &&
         where.where(p.id, s) == tier::nvme;
}

// The optimizer step's shadow extents, listed on their own; the swap store's capacity counts them
// with the homes (add_swap_store).
void add_shadow_extents(plan_builder& out, const footprint_plan& plan, const model_layout& layout,
                        const placement& where) {
  for (const state_kind s : all_states) {
    std::uint64_t bytes = 0;
    for (const parameter_layout& p : layout.parameters()) {
      if (has_shadow_extent(p, s, where, plan)) bytes += state_bytes(p, s);
    }
    std::vector<std::string> keys(where.keys(s).begin(), where.keys(s).end());
    keys.emplace_back("zoe.swap.shadows");
    out.add(str("optimizer step shadow extents of ", state_kind_name(s)), memory_kind::nvme, bytes, std::move(keys));
  }
}

// The optimizer step's undo log (optimizer_step.hpp): pageable host memory for the states in
// memory (device or host) that the step rewrites (working, master, exp_avg, exp_avg_sq) of every
// parameter with a state on nvme or split between device and host memory (detail::logs_undo),
// copied before Adam changes them so a failed read, write or device call can put them back; and the
// step's scratch memory, which stages the shards split between device and host memory.
void add_optimizer_undo_log(plan_builder& out, footprint_plan& plan, const model_layout& layout,
                            const placement& where) {
  const std::array rewritten = {state_kind::working, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq};
  const detail::tier_of tier_of = [&where](parameter_id p, state_kind s) { return where.where(p, s); };
  std::uint64_t bytes = 0;
  std::vector<bool> involved(state_kind_count, false);
  for (const parameter_layout& p : layout.parameters()) {
    for (const state_kind s : rewritten) {
      if (!detail::logs_undo(p, s, tier_of)) continue;
      bytes += state_bytes(p, s);
      involved[static_cast<std::size_t>(s)] = true;
    }
  }
  plan.optimizer_undo_bytes = bytes;
  std::vector<std::string> keys;
  for (const state_kind s : all_states) {
    if (!involved[static_cast<std::size_t>(s)]) continue;
    keys.insert(keys.end(), where.keys(s).begin(), where.keys(s).end());
  }
  out.add("optimizer step undo log (in-memory states of shards with a state on nvme or split between device and host)",
          memory_kind::pageable, bytes, std::move(keys));
  // The step cuts its pieces as the swap store's chunk says, or by the default without a store.
  const std::uint64_t chunk = plan.nvme_bytes > 0 ? plan.swap_block_size : detail::default_piece_chunk;
  const std::uint64_t scratch =
      detail::scratch_bytes(layout, tier_of, detail::make_piece_geometry(layout, tier_of, chunk));
  std::vector<std::string> scratch_keys;
  for (const state_kind s : all_states)
    scratch_keys.insert(scratch_keys.end(), where.keys(s).begin(), where.keys(s).end());
  out.add("optimizer step scratch (staging of shards split between device and host memory)", memory_kind::pageable,
          scratch, std::move(scratch_keys));
}

// The speculative step's pending memory (optimizer_step.hpp): the host-resident states it rewrites
// in every shard it may speculate, and the fp32 masters backward's fetches hand it (each freed once
// read, so far less is in use at once), up to zoe.optimizer_pending_bytes.
void add_optimizer_pending(plan_builder& out, footprint_plan& plan, const model_layout& layout,
                           const engine_config& config, const placement& where) {
  if (!config.zoe.optimizer_in_backward) return;
  const detail::tier_of tier_of = [&where](parameter_id p, state_kind s) { return where.where(p, s); };
  std::uint64_t wanted = 0;
  for (const parameter_layout& p : layout.parameters()) {
    if (!detail::speculates(p, tier_of)) continue;
    // Without shadow extents a shard with a state on nvme has nowhere to put its new values.
    if (!plan.shadow_extents && detail::has_nvme_state(p, tier_of)) continue;
    wanted = saturating_add(wanted, detail::pending_bytes(p, tier_of) + detail::fetched_master_bytes(p, tier_of));
  }
  plan.optimizer_pending_bytes = std::min(wanted, config.zoe.optimizer_pending_bytes);
  out.add(
      "optimizer step pending memory (new host states of shards stepped inside backward until step() commits "
      "them, and the fp32 masters backward's fetches hand it)",
      memory_kind::pageable, plan.optimizer_pending_bytes,
      {"zoe.optimizer_in_backward", "zoe.optimizer_pending_bytes"});
}

// The swap store's capacity for these states and the optimizer step's shadow extents (every extent
// the tier manager takes). The store rounds every extent to 4 KiB and starts
// one of block_size or more on a block_size boundary; the tier manager takes the large extents
// first, so they lie end to end, each within its size rounded up to block_size, and the small ones
// then fit in the gaps or after them. Their sum, rounded up to whole stripes (block_size on every
// path) as the store rounds its capacity, is therefore always enough.
void add_swap_store(plan_builder& out, footprint_plan& plan, const model_layout& layout, const engine_config& config,
                    const placement& where) {
  plan.swap_block_size = config.aio.block_size;
  const std::uint64_t activations = config.zoe.activations.nvme_bytes;
  if (plan.state_bytes[static_cast<std::size_t>(memory_kind::nvme)] == 0 && activations == 0) return;
  plan.swap_paths = swap_paths(config);
  const std::uint64_t block = config.aio.block_size;
  ZOE_CHECK(!plan.swap_paths.empty(), config_error, "zoe.activations.nvme_bytes is ", activations,
            " but no swap folder is configured: set zero_optimization.offload_param.nvme_path, "
            "zero_optimization.offload_optimizer.nvme_path or zoe.swap.extra_paths, or set zoe.activations.nvme_bytes "
            "to 0");
  std::uint64_t extents = 0;
  for (const parameter_layout& p : layout.parameters()) {
    for (const state_kind s : all_states) {
      const std::uint64_t bytes = state_bytes(p, s);
      if (bytes == 0 || where.where(p.id, s) != tier::nvme) continue;
      const std::uint64_t rounded = bytes >= block ? round_up(bytes, block) : round_up(bytes, page);
      extents += has_shadow_extent(p, s, where, plan) ? 2 * rounded : rounded;
    }
  }
  // The activations' share counts whole chunks, so each of their extents' rounding is inside it.
  plan.activation_nvme_bytes = round_up(activations, block);
  const std::uint64_t capacity = round_up(extents + plan.activation_nvme_bytes, block * plan.swap_paths.size());
  for (const state_kind s : all_states) {
    std::vector<std::string> keys(where.keys(s).begin(), where.keys(s).end());
    out.add(str(state_kind_name(s), " on nvme"), memory_kind::nvme, where.bytes(s, tier::nvme), std::move(keys));
  }
  const std::uint64_t before = plan.nvme_bytes;
  add_shadow_extents(out, plan, layout, where);
  const std::uint64_t shadows = plan.nvme_bytes - before;
  out.add("activation checkpoints on nvme", memory_kind::nvme, plan.activation_nvme_bytes,
          {"zoe.activations.nvme_bytes", "aio.block_size"});
  out.add(
      "swap store rounding (extents to 4 KiB or aio.block_size, the whole to stripes)", memory_kind::nvme,
      capacity - plan.state_bytes[static_cast<std::size_t>(memory_kind::nvme)] - shadows - plan.activation_nvme_bytes,
      {"aio.block_size", "zero_optimization.offload_param.nvme_path", "zoe.swap.extra_paths"});
}

// Parameters on nvme come to the device through constant-size pinned buffers, as DeepSpeed's
// parameter swapper does: buffer_count of buffer_size elements of the working type. A shard larger
// than a buffer moves in pieces of whole aio.block_size chunks (a piece inside a chunk would read
// and verify the chunk whole), so a buffer is made at least as large as the largest shard or one
// chunk, whichever is smaller; the plan lists the size it settled on. That memory is the mover's
// pool "params", cut into slots of one chunk: a shard streams through them chunk by chunk, so the
// memory keeps as many chunks in flight as it holds instead of one shard per buffer (or one slot
// per buffer when a buffer is smaller than a chunk).
void add_param_buffers(plan_builder& out, footprint_plan& plan, const model_layout& layout, const engine_config& config,
                       const placement& where) {
  std::uint64_t largest_shard = 0;
  std::uint64_t element = 0;
  bool any = false;
  for (const parameter_layout& p : layout.parameters()) {
    if (where.where(p.id, state_kind::working) != tier::nvme) continue;
    any = true;
    element = std::max<std::uint64_t>(element, kernels::dtype_size(p.dtype));
    largest_shard = std::max<std::uint64_t>(largest_shard, p.shard_numel * kernels::dtype_size(p.dtype));
  }
  if (!any) return;
  const offload_param_config block = config.zero.offload_param.value_or(offload_param_config{});
  ZOE_CHECK(block.buffer_count > 0, config_error,
            "zero_optimization.offload_param.buffer_count is 0, but parameters are on nvme: they need at least one "
            "swap buffer");
  ZOE_CHECK(block.buffer_size <= max_buffer_elements && block.buffer_count <= max_buffer_elements, config_error,
            "zero_optimization.offload_param.buffer_count ", block.buffer_count, " and buffer_size ", block.buffer_size,
            " must each be at most ", max_buffer_elements);
  const std::uint64_t chunk = std::min<std::uint64_t>(round_up(largest_shard, page), config.aio.block_size);
  plan.param_buffer_count = block.buffer_count;
  plan.param_buffer_bytes = std::max(round_up(block.buffer_size * element, page), chunk);
  const std::uint64_t bytes = saturating_mul(plan.param_buffer_count, plan.param_buffer_bytes);
  const std::uint64_t slot = std::min<std::uint64_t>(plan.param_buffer_bytes, config.aio.block_size);
  out.add("parameter swap buffers", memory_kind::pinned, bytes,
          {"zero_optimization.offload_param.buffer_count", "zero_optimization.offload_param.buffer_size"},
          plan_pool{.key = "params", .slot_bytes = slot, .slot_count = bytes / slot});
}

// The optimizer step streams its states on nvme (master, moments, the working copy, and the
// gradient where zoe.placement sends it there) through buffer_count pinned buffers of the largest
// sub-group in fp32, as DeepSpeed's optimizer swapper sizes them; the gradient is fp32
// too. The step cuts that memory into slots of one piece of an fp32 state
// (tiers/step_pieces.hpp), one per state on nvme (or in device memory) of a piece: the buffers are
// made large enough for one piece's slots whatever the sub-group size.
void add_optimizer_buffers(plan_builder& out, footprint_plan& plan, const model_layout& layout,
                           const engine_config& config, const placement& where) {
  const detail::piece_geometry geometry = detail::make_piece_geometry(
      layout, [&where](parameter_id p, state_kind s) { return where.where(p, s); }, config.aio.block_size);
  if (geometry.slots_per_piece == 0) return;
  std::uint64_t largest = 0;
  for (const sub_group& g : sub_groups(layout, config.zero.sub_group_size)) largest = std::max(largest, g.shard_numel);
  const offload_optimizer_config block = config.zero.offload_optimizer.value_or(offload_optimizer_config{});
  ZOE_CHECK(block.buffer_count > 0, config_error,
            "zero_optimization.offload_optimizer.buffer_count is 0, but states the optimizer step rewrites are on "
            "nvme: they need at least one swap buffer");
  ZOE_CHECK(block.buffer_count <= max_buffer_elements, config_error,
            "zero_optimization.offload_optimizer.buffer_count ", block.buffer_count, " must be at most ",
            max_buffer_elements);
  const std::uint64_t slots_per_buffer = (geometry.slots_per_piece + block.buffer_count - 1) / block.buffer_count;
  plan.optimizer_buffer_count = block.buffer_count;
  plan.optimizer_buffer_bytes = std::max(round_up(largest * kernels::dtype_size(kernels::dtype::fp32), page),
                                         slots_per_buffer * geometry.slot_bytes);
  out.add("optimizer swap buffers", memory_kind::pinned,
          saturating_mul(plan.optimizer_buffer_count, plan.optimizer_buffer_bytes),
          {"zero_optimization.offload_optimizer.buffer_count", "zero_optimization.sub_group_size", "aio.block_size"});
}

// The device arena holds gathered (full, padded) parameters. Its size:
//  - the largest module, without its persistent parameters: fetching a module gathers all of it at
//    once, so no arena smaller can run the model;
//  - plus what prefetch fetches ahead: stage3_prefetch_bucket_size elements, and one more parameter
//    because a fetch takes whole parameters, so the last may pass the bucket's edge;
//  - the two together bounded by stage3_max_live_parameters (but never below the largest module),
//    which is DeepSpeed's cap on gathered elements, and by all non-persistent parameters at once;
//    parameters kept for reuse (stage3_max_reuse_distance) live inside this window: the
//    coordinator releases them, or waits, when the arena is full;
//  - plus every persistent parameter, gathered for good.
// Each block rounds to the arena's alignment. Elements convert to bytes at the widest working type.
void add_arena(plan_builder& out, footprint_plan& plan, const model_layout& layout, const engine_config& config) {
  const std::size_t world = layout.options().world_size;
  const auto gathered = [world](const parameter_layout& p) {
    return align_up(p.padded_numel(world) * kernels::dtype_size(p.dtype), arena_alignment);
  };
  std::vector<bool> persistent(layout.parameters().size(), false);
  std::uint64_t persistent_bytes = 0;
  for (const parameter_id id : persistent_parameters(layout, config.zero)) {
    persistent[id] = true;
    persistent_bytes += gathered(layout.parameter(id));
  }
  std::uint64_t largest_module = 0;
  std::uint64_t largest_parameter = 0;
  std::uint64_t all_fetched = 0;
  std::uint64_t element = 0;
  for (const module_layout& m : layout.modules()) {
    std::uint64_t bytes = 0;
    for (const parameter_id id : m.trainable) {  // a frozen parameter is lent no gradient memory
      const parameter_layout& p = layout.parameter(id);
      element = std::max<std::uint64_t>(element, kernels::dtype_size(p.dtype));
      if (persistent[id]) continue;
      bytes += gathered(p);
      largest_parameter = std::max(largest_parameter, gathered(p));
    }
    largest_module = std::max(largest_module, bytes);
    all_fetched += bytes;
  }
  // The limits count elements: their bytes round up to the arena's alignment, as every gathered
  // block does (a limit such as two layers and the biases would otherwise give a capacity the arena
  // refuses), saturating like the product.
  const auto aligned_bytes = [element](std::uint64_t elements) {
    const std::uint64_t bytes = saturating_mul(elements, element);
    return bytes > std::numeric_limits<std::uint64_t>::max() - arena_alignment ? bytes
                                                                               : round_up(bytes, arena_alignment);
  };
  const std::uint64_t ahead = aligned_bytes(config.zero.prefetch_bucket_size);
  const std::uint64_t live_cap = std::max(largest_module, aligned_bytes(config.zero.max_live_parameters));
  const std::uint64_t window =
      std::max(largest_module,
               std::min({largest_module + std::min(ahead, all_fetched) + largest_parameter, live_cap, all_fetched}));
  out.add("gathered-parameter arena: largest module and prefetch", memory_kind::device, window,
          {"zero_optimization.stage3_prefetch_bucket_size", "zero_optimization.stage3_max_live_parameters"});
  if (config.zero.stage < 3) {
    out.add("16-bit parameters, replicated whole on every rank (stages 0-2)", memory_kind::device, persistent_bytes,
            {"zero_optimization.stage"});
  } else {
    out.add("gathered-parameter arena: persistent parameters", memory_kind::device, persistent_bytes,
            {"zero_optimization.stage3_param_persistence_threshold",
             "zero_optimization.stage3_model_persistence_threshold"});
  }
  plan.arena_bytes = window + persistent_bytes;
}

// The gradient buckets of backward (optim/gradient_path.hpp): reduce_bucket_size elements of the
// widest working dtype each, as DeepSpeed sizes its reduction bucket, but never smaller than the
// largest module's padded gradients (a module is lent its memory whole) and never larger than the
// whole model's (a bigger bucket would never fill). A second bucket with overlap_comm, so backward
// fills one while the other is reduced and accumulated.
void add_gradient_buckets(plan_builder& out, footprint_plan& plan, const model_layout& layout,
                          const engine_config& config) {
  const std::size_t ranks = layout.options().world_size;
  std::uint64_t element = 0;
  std::uint64_t largest_module = 0;
  std::uint64_t model = 0;
  for (const module_layout& m : layout.modules()) {
    std::uint64_t bytes = 0;
    for (const parameter_id id : m.trainable) {  // a frozen parameter is lent no gradient memory
      const parameter_layout& p = layout.parameter(id);
      element = std::max<std::uint64_t>(element, kernels::dtype_size(p.dtype));
      bytes = saturating_add(bytes, saturating_mul(p.padded_numel(ranks), kernels::dtype_size(p.dtype)));
    }
    largest_module = std::max(largest_module, bytes);
    model = saturating_add(model, bytes);
  }
  if (model == 0) return;
  plan.gradient_bucket_count = config.zero.overlap_comm ? 2 : 1;
  plan.gradient_bucket_bytes =
      std::clamp(saturating_mul(config.zero.reduce_bucket_size, element), largest_module, model);
  out.add("gradient buckets", memory_kind::device,
          saturating_mul(plan.gradient_bucket_count, plan.gradient_bucket_bytes),
          {"zero_optimization.reduce_bucket_size", "zero_optimization.overlap_comm"});
}

// Gradients whose state is not on the device come to the host through pinned staging buffers:
// the reduced gradient is copied into one, then added to the host home, or to a piece of an nvme
// home read into a second one and written back. A piece is one buffer of fp32 elements: it must
// cover whole aio.block_size chunks (a write does) and whole 64 Ki-element chunks of the sum of
// squares (so the norm of a shard done in pieces is the whole shard's, gradient_path.hpp), so a
// buffer is the least common multiple of both, or the largest such shard when that is smaller
// (one piece then covers any shard). Four buffers: a piece holds two (its copy from the device and
// its read-modify-write), and two pieces in flight let one piece's write overlap the next one's
// read and accumulation; more would not make one I/O thread faster.
void add_gradient_buffers(plan_builder& out, footprint_plan& plan, const model_layout& layout,
                          const engine_config& config, const placement& where) {
  std::uint64_t largest_shard = 0;
  for (const parameter_layout& p : layout.parameters()) {
    if (where.where(p.id, state_kind::gradient) == tier::device) continue;
    largest_shard = std::max(largest_shard, state_bytes(p, state_kind::gradient));
  }
  if (largest_shard == 0) return;
  const std::uint64_t piece = std::lcm(std::uint64_t{config.aio.block_size}, gradient_sum_chunk_bytes);
  plan.gradient_buffer_count = gradient_buffer_count;
  plan.gradient_buffer_bytes = std::min(piece, round_up(largest_shard, page));
  out.add("gradient staging buffers", memory_kind::pinned,
          saturating_mul(plan.gradient_buffer_count, plan.gradient_buffer_bytes),
          {"zoe.placement.gradient", "zero_optimization.offload_optimizer.device", "aio.block_size"});
}

// On a CUDA device the gradient path keeps each device-home gradient's sum of squares and
// inf/NaN flag on the device until the step's last micro-batch ends (gradient_summary.cpp), in one
// allocation (rounded as the device rounds one). Listed for every device: the host device's path
// takes none, so there it is an upper bound.
void add_gradient_norm_scratch(plan_builder& out, const model_layout& layout, const placement& where) {
  std::uint64_t bytes = 0;
  for (const parameter_layout& p : layout.parameters()) {
    if (!p.frozen && where.where(p.id, state_kind::gradient) == tier::device) {
      bytes += gradient_norm_scratch_bytes(p.shard_numel);
    }
  }
  out.add("gradient norm scratch (the device homes' sums of squares, on a GPU)", memory_kind::device,
          round_up(bytes, arena_alignment), {"zoe.placement.gradient"});
}

// Stages 0 and 1's local accumulation (optim/local_accumulation.hpp): each parameter's whole padded
// gradient in fp32, beside its gradient state (1/N at stage 1, whole at stage 0), which receives
// the reduction at the step's last micro-batch. On the device where the gradient state is on the
// device, else in pageable host memory (only the CPU touches it there; the copies pass through the
// gradient staging buffers), also for a gradient state on nvme: a read-modify-write of the whole
// gradient per micro-batch would cost N times stage 2's traffic.
void add_local_gradient_accumulation(plan_builder& out, footprint_plan& plan, const model_layout& layout,
                                     const engine_config& config, const placement& where) {
  if (!accumulates_gradients_locally(config, layout.ranks())) return;
  const std::size_t world = layout.options().world_size;
  for (const parameter_layout& p : layout.parameters()) {
    if (p.frozen) continue;  // takes no gradient
    const std::uint64_t bytes = p.padded_numel(world) * kernels::dtype_size(kernels::dtype::fp32);
    if (where.where(p.id, state_kind::gradient) == tier::device) {
      plan.local_gradient_device_bytes += align_up(bytes, arena_alignment);
    } else {
      plan.local_gradient_host_bytes += bytes;
    }
  }
  const std::vector<std::string> keys = {"zero_optimization.stage", "gradient_accumulation_steps",
                                         "zoe.placement.gradient", "zero_optimization.offload_optimizer.device"};
  const std::string what = str("stage-", config.zero.stage, " gradient accumulation, whole on every rank, in ");
  out.add(what + "device memory", memory_kind::device, plan.local_gradient_device_bytes, keys);
  out.add(what + "pageable host memory", memory_kind::pageable, plan.local_gradient_host_bytes, keys);
}

// Activation checkpoints (activation_store.hpp): a pinned host share, a device share that
// prefetched activations hold ahead of their load, and, with NVMe bytes (add_swap_store counts them
// in the store), pinned staging memory their reads and writes pass through piece by piece: 1 MiB
// of whole aio.block_size chunks (one chunk when chunks are larger), never more than the NVMe share.
void add_activations(plan_builder& out, footprint_plan& plan, const engine_config& config) {
  const activation_settings& a = config.zoe.activations;
  plan.activation_host_bytes = a.host_bytes;
  plan.activation_prefetch_bytes = a.prefetch_bytes;
  out.add("activation checkpoints: pinned host share", memory_kind::pinned, a.host_bytes,
          {"zoe.activations.host_bytes"});
  out.add("activation checkpoints: prefetch share", memory_kind::device, a.prefetch_bytes,
          {"zoe.activations.prefetch_bytes"});
  if (plan.activation_nvme_bytes == 0) return;
  const std::uint64_t block = config.aio.block_size;
  plan.activation_staging_bytes =
      std::min(round_up(std::max<std::uint64_t>(MiB, block), block), plan.activation_nvme_bytes);
  out.add("activation checkpoints: NVMe staging memory", memory_kind::pinned, plan.activation_staging_bytes,
          {"zoe.activations.nvme_bytes", "aio.block_size"});
}

// ZeRO++'s device memory (footprint_plan.hpp says what each holds).
void add_zero_plus_plus(plan_builder& out, footprint_plan& plan, const model_layout& layout,
                        const engine_config& config) {
  const std::size_t world = layout.options().world_size;
  const std::uint64_t hpz = config.zero.zero_hpz_partition_size;
  if (world > 1 && hpz > 1 && world % hpz == 0) {
    for (const parameter_layout& p : layout.parameters()) {
      plan.hpz_secondary_bytes += align_up(hpz_secondary_shard_bytes(p, world, hpz), arena_alignment);
    }
    out.add("hpZ secondary shards", memory_kind::device, plan.hpz_secondary_bytes,
            {"zero_optimization.zero_hpz_partition_size"});
  }
  if (config.zero.zero_quantized_weights) {
    std::uint64_t model = 0;
    for (const parameter_layout& p : layout.parameters()) {
      plan.qwz_scratch_bytes =
          std::max<std::uint64_t>(plan.qwz_scratch_bytes, quantized_all_gather_scratch(world, p.shard_numel));
      model = saturating_add(model, p.padded_numel(world));
    }
    const std::uint64_t bucket = std::min(config.zero.allgather_bucket_size, model);
    plan.qwz_scratch_bytes = std::max<std::uint64_t>(
        plan.qwz_scratch_bytes,
        quantized_all_gather_scratch(world, static_cast<std::size_t>((bucket + world - 1) / world)));
    out.add("qwZ quantized gather scratch", memory_kind::device, plan.qwz_scratch_bytes,
            {"zero_optimization.zero_quantized_weights", "zero_optimization.allgather_bucket_size"});
  }
  if (config.zero.zero_quantized_gradients) {
    // One node of `world` ranks needs the most workspace (max(nodes, ranks per node) inputs), a
    // CUDA device more than the host's (none): the bound for any launch.
    for (const parameter_layout& p : layout.parameters()) {
      plan.qgz_scratch_bytes = std::max<std::uint64_t>(
          plan.qgz_scratch_bytes,
          quantized_reduce_scatter_scratch(kernels::topology{.nodes = 1, .ranks_per_node = world}, p.shard_numel,
                                           device_kind::cuda));
    }
    out.add("qgZ quantized reduce-scatter scratch", memory_kind::device, plan.qgz_scratch_bytes,
            {"zero_optimization.zero_quantized_gradients"});
  }
}

}  // namespace

std::uint64_t hpz_secondary_shard_bytes(const parameter_layout& p, std::size_t world, std::size_t hpz) noexcept {
  return hpz == 0 ? 0 : p.padded_numel(world) * kernels::dtype_size(p.dtype) / hpz;
}

std::uint64_t gradient_norm_scratch_bytes(std::uint64_t shard_numel) noexcept {
  return round_up(kernels::cuda::sum_of_squares_workspace(static_cast<std::size_t>(shard_numel)), 8) + 16;
}

memory_kind memory_of(tier t, bool pinned) noexcept {
  switch (t) {
    case tier::device: return memory_kind::device;
    case tier::host: return pinned ? memory_kind::pinned : memory_kind::pageable;
    case tier::nvme: return memory_kind::nvme;
  }
  return memory_kind::device;
}

std::string_view memory_kind_name(memory_kind m) noexcept {
  switch (m) {
    case memory_kind::device: return "device";
    case memory_kind::pinned: return "pinned host";
    case memory_kind::pageable: return "pageable host";
    case memory_kind::nvme: return "nvme";
  }
  return "unknown";
}

layout_options stage_layout(const engine_config& config, std::size_t world_size) noexcept {
  layout_options out;
  if (config.zero.stage == 0) {
    out.replicas = world_size;
  } else {
    out.world_size = world_size;
  }
  return out;
}

// Stage 0's reduction is a plain all-reduce of whole gradients and its coordinator gathers nothing
// (every rank holds whole parameters), so ZeRO++'s quantized reduce-scatter and hpZ's secondary
// shards have nothing to work on: refused on several ranks rather than silently not applied
// (DeepSpeed applies neither without a ZeRO stage).
void check_stage_fits_world(const engine_config& config, std::size_t world_size) {
  if (config.zero.stage != 0 || world_size == 1) return;
  ZOE_CHECK(!config.zero.zero_quantized_gradients, config_error,
            "zero_optimization.zero_quantized_gradients needs zero_optimization.stage 1, 2 or 3 on ", world_size,
            " ranks: stage 0 all-reduces whole gradients, which qgZ does not quantize");
  ZOE_CHECK(config.zero.zero_hpz_partition_size <= 1, config_error, "zero_optimization.zero_hpz_partition_size ",
            config.zero.zero_hpz_partition_size, " needs zero_optimization.stage 1, 2 or 3 on ", world_size,
            " ranks: at stage 0 every rank holds whole parameters, so there is nothing to gather");
}

bool accumulates_gradients_locally(const engine_config& config, std::size_t world_size) noexcept {
  return config.zero.stage <= 1 && world_size > 1 && config.gradient_accumulation_steps > 1;
}

std::vector<parameter_id> persistent_parameters(const model_layout& layout, const zero_config& zero) {
  std::vector<parameter_id> out;
  if (zero.stage < 3) {
    for (const parameter_layout& p : layout.parameters()) out.push_back(p.id);
    return out;
  }
  std::uint64_t total = 0;
  for (const parameter_layout& p : layout.parameters()) {
    if (p.numel > zero.model_persistence_threshold - std::min(total, zero.model_persistence_threshold)) continue;
    if (p.numel <= zero.param_persistence_threshold) {
      out.push_back(p.id);
      total += p.numel;
    }
  }
  return out;
}

footprint_plan make_footprint_plan(const model_layout& layout, const engine_config& config, const placement& where) {
  ZOE_EXPECTS(where.parameter_count() == layout.parameters().size(), "footprint plan: the placement has ",
              where.parameter_count(), " parameters, the layout ", layout.parameters().size());
  const layout_options staged = stage_layout(config, layout.ranks());
  ZOE_EXPECTS(layout.options().world_size == staged.world_size && layout.options().replicas == staged.replicas,
              "footprint plan: zero_optimization.stage ", config.zero.stage, " on ", layout.ranks(),
              " ranks lays states out in ", staged.world_size, " shard(s) held by ", staged.replicas,
              " rank(s) each (stage_layout), the layout in ", layout.options().world_size, " held by ",
              layout.options().replicas);
  check_stage_fits_world(config, layout.ranks());
  footprint_plan plan;
  plan.shadow_extents = config.zoe.shadows != "bounded";
  plan_builder out(plan);
  add_states(out, plan, where);
  add_swap_store(out, plan, layout, config, where);
  add_param_buffers(out, plan, layout, config, where);
  add_optimizer_buffers(out, plan, layout, config, where);
  add_gradient_buckets(out, plan, layout, config);
  add_gradient_buffers(out, plan, layout, config, where);
  add_gradient_norm_scratch(out, layout, where);
  add_local_gradient_accumulation(out, plan, layout, config, where);
  add_optimizer_undo_log(out, plan, layout, where);
  add_optimizer_pending(out, plan, layout, config, where);
  add_arena(out, plan, layout, config);
  add_activations(out, plan, config);
  add_zero_plus_plus(out, plan, layout, config);
  return plan;
}

}  // namespace zoe::engine
