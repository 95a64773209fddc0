#pragma once
// Which tier holds each state of each shard of this rank. Follows offload_param, offload_optimizer
// (its ratio) and max_in_cpu as DeepSpeed reads them, and zoe.placement's per-state fractions
// beyond them; the precedence is documented in engine/config/README.md and tested.
//
// A state of one shard lies whole in one tier: a fraction is met by assigning shards in layout order
// until the tier's share of the state's bytes is reached (so it is exact to within one shard).

#include <cstdint>
#include <string_view>
#include <vector>

#include "zoe/engine/config/config.hpp"
#include "zoe/engine/model/layout.hpp"

namespace zoe::engine {

enum class tier : std::uint8_t { device = 0, host = 1, nvme = 2 };
inline constexpr std::size_t tier_count = 3;
/// "device", "host", "nvme". Never throws.
[[nodiscard]] std::string_view tier_name(tier t) noexcept;

/// Element type of a state: the working copy has the parameter's dtype, the gradient too, the
/// master and the moments are fp32. Never throws.
[[nodiscard]] kernels::dtype state_dtype(const parameter_layout& p, state_kind s) noexcept;
/// Bytes of one state of `p`'s shard (shard_numel elements; 0 for the working copy of an fp32
/// parameter, whose working copy is the master). Never throws.
[[nodiscard]] std::uint64_t state_bytes(const parameter_layout& p, state_kind s) noexcept;

/// The tier of every (parameter, state). Immutable once built; thread-safe to read.
class placement {
 public:
  /// Throws config_error naming the key when the config asks for something the layout cannot
  /// honour (nvme without nvme_path is caught by the config already).
  placement(const model_layout& layout, const engine_config& config);

  [[nodiscard]] tier where(parameter_id p, state_kind s) const;
  /// Bytes of state `s` of all shards placed in tier `t`.
  [[nodiscard]] std::uint64_t bytes(state_kind s, tier t) const noexcept;
  /// Bytes of every state placed in tier `t`.
  [[nodiscard]] std::uint64_t bytes(tier t) const noexcept;

 private:
  std::vector<tier> tiers_;  // parameter-major: tiers_[p * state_kind_count + s]
  std::uint64_t bytes_[state_kind_count][tier_count] = {};
};

}  // namespace zoe::engine
