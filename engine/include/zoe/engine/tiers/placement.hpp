#pragma once
// Which tier holds each state of each shard of this rank.
//
// Precedence, per state (first that applies wins; engine/CONFIG.md says the same):
//  1. zoe.placement.<state> {device, host, nvme}: fractions of that state's bytes per tier. They
//     override everything below, at every stage.
//  2. The working copy follows zero_optimization.offload_param, at stage 3 only (below stage 3
//     offload_param is ignored, as DeepSpeed ignores it, and the working copy is on the device):
//       none -> device;  cpu -> host;
//       nvme -> nvme, except that max_in_cpu elements stay in host memory. As in DeepSpeed
//               (stage3.py, _create_param_groups_fp16_flat_cpu_memory): the shards are cut into
//               sub-groups of sub_group_size elements in layout order (a sub-group closes once it
//               holds sub_group_size elements or more); whole sub-groups stay in host memory while
//               the running count of their shard elements is <= max_in_cpu; the first sub-group
//               that does not fit, and every one after it, goes to nvme. (DeepSpeed also never
//               swaps a partition under max(1 MiB, aio.block_size), swappable_tensor(); zoe does,
//               since its swap store holds extents of any multiple of 4 KiB.)
//  3. gradient, master, exp_avg and exp_avg_sq follow zero_optimization.offload_optimizer at
//     stages 1-3 (at stage 0 no ZeRO optimizer moves them, in DeepSpeed either: on the device):
//       none -> device;
//       cpu  -> host; with `ratio` below 1, as DeepSpeed's partial offload (stage3.py,
//               subgroup_to_device): of the n sub-groups, in order, the first int((1 - ratio) * n)
//               stay on the device and the rest go to host memory (a count of sub-groups, not of
//               bytes);
//       nvme -> master, exp_avg and exp_avg_sq on nvme; the gradient in host memory.
//  4. Without either block every state is on the device.
// An fp32 parameter has no separate working copy (the master is it): its working state has no
// bytes, and where() reports the master's tier for it; where rule 1 or 2 wanted the working copy
// elsewhere, a warning names both keys (the working copy's key does nothing for it).
//
// A state of one shard lies whole in one tier: a fraction is met by giving shards, in layout order,
// to the device until its share of the state's bytes is reached, then to the host, then to nvme (a
// shard goes to the first tier whose cumulative share has not been reached where the shard starts),
// so each tier's bytes are exact to within one shard.
//
// Host memory is pinned when the block that governs the state says pin_memory (offload_param for
// the working copy, offload_optimizer for the others; DeepSpeed's default when the block is
// absent), pageable otherwise. NVMe staging buffers are always pinned (see footprint_plan.hpp).

#include <array>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "zoe/engine/config/config.hpp"
#include "zoe/engine/model/layout.hpp"

namespace zoe::engine {

/// Every state of a shard, in state_kind order (to loop over them).
inline constexpr std::array<state_kind, state_kind_count> all_states = {
    state_kind::working, state_kind::gradient, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq};

enum class tier : std::uint8_t { device = 0, host = 1, nvme = 2 };
inline constexpr std::size_t tier_count = 3;
/// "device", "host", "nvme". Never throws.
[[nodiscard]] std::string_view tier_name(tier t) noexcept;

/// Element type of a state: the working copy has the parameter's dtype; the gradient (accumulated
/// over micro-batches in fp32, optim/gradient_path.hpp), the master and the moments are fp32.
/// Never throws.
[[nodiscard]] kernels::dtype state_dtype(const parameter_layout& p, state_kind s) noexcept;
/// Bytes of one state of `p`'s shard (shard_numel elements; 0 for the working copy of an fp32
/// parameter, whose working copy is the master; 0 for every state of a frozen parameter but its
/// value: the 16-bit working copy, or an fp32 one's master). Never throws.
[[nodiscard]] std::uint64_t state_bytes(const parameter_layout& p, state_kind s) noexcept;

/// The swap store's folders: offload_param.nvme_path (at stage 3), offload_optimizer.nvme_path (at 1-3),
/// then zoe.swap.extra_paths, each once, in that order. Never throws beyond allocation.
[[nodiscard]] std::vector<std::filesystem::path> swap_paths(const engine_config& config);

/// One sub-group of the optimizer step: parameters [first, last) in layout order.
struct sub_group {
  parameter_id first = 0;
  parameter_id last = 0;
  std::uint64_t shard_numel = 0;  ///< elements of this rank's shards in it
};
/// The sub-groups DeepSpeed cuts for zero_optimization.sub_group_size: parameters in layout order,
/// a sub-group closing once it holds `sub_group_size` shard elements or more (the last one may hold
/// fewer). Never throws beyond allocation.
[[nodiscard]] std::vector<sub_group> sub_groups(const model_layout& layout, std::uint64_t sub_group_size);

/// The tier of every (parameter, state). Immutable once built; thread-safe to read.
class placement {
 public:
  /// Throws config_error naming the key when the config asks for something the layout cannot
  /// honour: zoe.placement fractions outside [0, 1] or not summing to 1, or a state placed on nvme
  /// when no nvme path is configured (offload_*.nvme_path, zoe.swap.extra_paths).
  placement(const model_layout& layout, const engine_config& config);

  /// usage_error for a parameter the layout does not have.
  [[nodiscard]] tier where(parameter_id p, state_kind s) const;
  /// Whether state `s`'s host homes are pinned (see above). Never throws.
  [[nodiscard]] bool host_pinned(state_kind s) const noexcept { return pinned_[static_cast<std::size_t>(s)]; }
  /// The config keys that decided where state `s` lies (the keys to change to move it); empty
  /// never: a state left on the device by default names the key that would move it. Never throws.
  [[nodiscard]] std::span<const std::string> keys(state_kind s) const noexcept {
    return keys_[static_cast<std::size_t>(s)];
  }
  /// Bytes of state `s` of all shards placed in tier `t`.
  [[nodiscard]] std::uint64_t bytes(state_kind s, tier t) const noexcept;
  /// Bytes of every state placed in tier `t`.
  [[nodiscard]] std::uint64_t bytes(tier t) const noexcept;
  [[nodiscard]] std::size_t parameter_count() const noexcept { return tiers_.size() / state_kind_count; }

 private:
  std::vector<tier> tiers_;  // parameter-major: tiers_[p * state_kind_count + s]
  std::uint64_t bytes_[state_kind_count][tier_count] = {};
  bool pinned_[state_kind_count] = {};
  std::vector<std::string> keys_[state_kind_count];
};

}  // namespace zoe::engine
