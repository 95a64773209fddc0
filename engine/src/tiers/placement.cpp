// Placement: the tier of every state of every shard, by the precedence placement.hpp documents.
#include "zoe/engine/tiers/placement.hpp"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "zoe/core/check.hpp"
#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine {
namespace {

constexpr std::size_t index(state_kind s) noexcept { return static_cast<std::size_t>(s); }
constexpr std::size_t index(tier t) noexcept { return static_cast<std::size_t>(t); }

/// How one state is placed: fractions per tier, or (max_in_cpu) one tier per parameter; and the
/// keys that decided it (or would move it), for messages and the plan.
struct state_rule {
  std::optional<tier_fractions> fractions;
  std::vector<tier> per_parameter;
  std::vector<std::string> keys;
};

bool offload_param_applies(const engine_config& config) {
  return config.zero.stage == 3 && config.zero.offload_param.has_value();
}

// Stage 0 has no ZeRO optimizer to move the optimizer states (DeepSpeed documents offload_optimizer
// for stages 1-3; the config reader drops the block at stage 0 with a warning).
bool offload_optimizer_applies(const engine_config& config) {
  return config.zero.stage >= 1 && config.zero.offload_optimizer.has_value();
}

tier_fractions all_in(tier t) {
  return {.device = t == tier::device ? 1.0 : 0.0,
          .host = t == tier::host ? 1.0 : 0.0,
          .nvme = t == tier::nvme ? 1.0 : 0.0};
}

void validate_fractions(const tier_fractions& f, state_kind s) {
  const std::string key = str("zoe.placement.", state_kind_name(s));
  for (const auto& [name, value] : {std::pair{"device", f.device}, {"host", f.host}, {"nvme", f.nvme}}) {
    ZOE_CHECK(std::isfinite(value) && value >= 0.0 && value <= 1.0, config_error, key, ".", name, " is ", value,
              ": a fraction must lie in [0, 1]");
  }
  const double sum = f.device + f.host + f.nvme;
  ZOE_CHECK(std::abs(sum - 1.0) <= 1e-9, config_error, key, ": the fractions device ", f.device, ", host ", f.host,
            ", nvme ", f.nvme, " sum to ", sum, "; they must sum to 1");
}

// max_in_cpu with offload_param nvme: whole sub-groups stay in host memory while their running
// count fits, and the first that does not fit ends it (DeepSpeed's flat buffer is filled in order).
std::vector<tier> working_with_max_in_cpu(const model_layout& layout, const engine_config& config) {
  std::vector<tier> out(layout.parameters().size(), tier::nvme);
  const std::uint64_t max_in_cpu = config.zero.offload_param->max_in_cpu;
  std::uint64_t kept = 0;
  for (const sub_group& g : sub_groups(layout, config.zero.sub_group_size)) {
    if (g.shard_numel > max_in_cpu - kept) break;
    kept += g.shard_numel;
    std::fill(out.begin() + g.first, out.begin() + g.last, tier::host);
  }
  return out;
}

// offload_optimizer.ratio below 1: of the n sub-groups, in order, the first int((1 - ratio) * n)
// stay on the device and the rest go to host memory (stage3.py, subgroup_to_device): DeepSpeed
// counts sub-groups, not bytes.
std::vector<tier> optimizer_with_ratio(const model_layout& layout, const engine_config& config) {
  std::vector<tier> out(layout.parameters().size(), tier::host);
  const std::vector<sub_group> groups = sub_groups(layout, config.zero.sub_group_size);
  const double on_device = (1.0 - config.zero.offload_optimizer->ratio) * static_cast<double>(groups.size());
  const auto first_offloaded = static_cast<std::size_t>(on_device);  // Python's int(): toward zero
  for (std::size_t i = 0; i < first_offloaded && i < groups.size(); ++i) {
    std::fill(out.begin() + groups[i].first, out.begin() + groups[i].last, tier::device);
  }
  return out;
}

state_rule rule_for(const model_layout& layout, const engine_config& config, state_kind s) {
  if (const auto& f = config.zoe.placement[index(s)]) {
    validate_fractions(*f, s);
    return {.fractions = *f, .per_parameter = {}, .keys = {str("zoe.placement.", state_kind_name(s))}};
  }
  const auto in = [](tier t, std::vector<std::string> keys) {
    return state_rule{.fractions = all_in(t), .per_parameter = {}, .keys = std::move(keys)};
  };
  if (s == state_kind::working) {
    const std::string device_key = "zero_optimization.offload_param.device";
    if (!offload_param_applies(config)) {
      return in(tier::device, config.zero.stage == 3 ? std::vector{device_key}
                                                     : std::vector<std::string>{"zero_optimization.stage", device_key});
    }
    switch (config.zero.offload_param->device) {
      case offload_device::none: return in(tier::device, {device_key});
      case offload_device::cpu: return in(tier::host, {device_key});
      case offload_device::nvme:
        return {.fractions = std::nullopt,
                .per_parameter = working_with_max_in_cpu(layout, config),
                .keys = {device_key, "zero_optimization.offload_param.max_in_cpu"}};
    }
  }
  const std::string device_key = "zero_optimization.offload_optimizer.device";
  if (config.zero.stage == 0) return in(tier::device, {"zero_optimization.stage", device_key});
  if (!config.zero.offload_optimizer) return in(tier::device, {device_key});
  const offload_optimizer_config& opt = *config.zero.offload_optimizer;
  switch (opt.device) {
    case offload_device::none: return in(tier::device, {device_key});
    case offload_device::cpu:
      if (opt.ratio >= 1.0) return in(tier::host, {device_key});
      return {.fractions = std::nullopt,
              .per_parameter = optimizer_with_ratio(layout, config),
              .keys = {device_key, "zero_optimization.offload_optimizer.ratio", "zero_optimization.sub_group_size"}};
    case offload_device::nvme: return in(s == state_kind::gradient ? tier::host : tier::nvme, {device_key});
  }
  return in(tier::device, {device_key});
}

// Shards in layout order fill the device's share, then the host's, then nvme: a shard goes to the
// first tier whose cumulative share lies beyond the bytes placed before it.
std::vector<tier> assign_fractions(const model_layout& layout, state_kind s, const tier_fractions& f) {
  std::uint64_t total = 0;
  for (const parameter_layout& p : layout.parameters()) total += state_bytes(p, s);
  const auto share = [total](double fraction) {
    return static_cast<std::uint64_t>(std::llround(fraction * static_cast<double>(total)));
  };
  // Exact ends where a tier's share is 0 or the rest is: rounding must not move a shard there.
  const std::uint64_t device_end = f.device == 0.0 ? 0 : (f.host == 0.0 && f.nvme == 0.0 ? total : share(f.device));
  const std::uint64_t host_end = f.nvme == 0.0 ? total : std::max(device_end, share(f.device + f.host));
  std::vector<tier> out;
  out.reserve(layout.parameters().size());
  if (total == 0) {
    // No bytes to share (the working copies of fp32 parameters): the tier the fractions name first.
    out.assign(layout.parameters().size(), f.device > 0.0 ? tier::device : f.host > 0.0 ? tier::host : tier::nvme);
    return out;
  }
  std::uint64_t before = 0;
  for (const parameter_layout& p : layout.parameters()) {
    out.push_back(before < device_end ? tier::device : before < host_end ? tier::host : tier::nvme);
    before += state_bytes(p, s);
  }
  return out;
}

bool pinned_for(const engine_config& config, state_kind s) {
  if (s == state_kind::working) {
    return offload_param_applies(config) ? config.zero.offload_param->pin_memory : offload_param_config{}.pin_memory;
  }
  return offload_optimizer_applies(config) ? config.zero.offload_optimizer->pin_memory
                                           : offload_optimizer_config{}.pin_memory;
}

}  // namespace

std::string_view tier_name(tier t) noexcept {
  switch (t) {
    case tier::device: return "device";
    case tier::host: return "host";
    case tier::nvme: return "nvme";
  }
  return "unknown";
}

kernels::dtype state_dtype(const parameter_layout& p, state_kind s) noexcept {
  // The gradient is accumulated in fp32 over the micro-batches (issue 11): only the working copy
  // has the parameter's dtype.
  return s == state_kind::working ? p.dtype : kernels::dtype::fp32;
}

std::uint64_t state_bytes(const parameter_layout& p, state_kind s) noexcept {
  if (s == state_kind::working && p.dtype == kernels::dtype::fp32) return 0;
  // A frozen parameter keeps its value alone: the working copy (a 16-bit one), or the fp32 master
  // that is its working copy.
  if (p.frozen && s != state_kind::working && !(s == state_kind::master && p.dtype == kernels::dtype::fp32)) return 0;
  return p.shard_numel * kernels::dtype_size(state_dtype(p, s));
}

std::vector<std::filesystem::path> swap_paths(const engine_config& config) {
  std::vector<std::filesystem::path> out;
  const auto add = [&out](const std::filesystem::path& p) {
    if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
  };
  if (offload_param_applies(config) && config.zero.offload_param->nvme_path) add(*config.zero.offload_param->nvme_path);
  if (offload_optimizer_applies(config) && config.zero.offload_optimizer->nvme_path) {
    add(*config.zero.offload_optimizer->nvme_path);
  }
  for (const auto& p : config.zoe.extra_swap_paths) add(p);
  return out;
}

std::vector<sub_group> sub_groups(const model_layout& layout, std::uint64_t sub_group_size) {
  std::vector<sub_group> out;
  sub_group current;
  for (const parameter_layout& p : layout.parameters()) {
    if (!p.frozen) current.shard_numel += p.shard_numel;  // the step passes a frozen one by
    current.last = p.id + 1;
    if (current.shard_numel >= sub_group_size) {
      out.push_back(current);
      current = {.first = current.last, .last = current.last, .shard_numel = 0};
    }
  }
  if (current.last > current.first) out.push_back(current);
  return out;
}

placement::placement(const model_layout& layout, const engine_config& config) {
  const std::size_t n = layout.parameters().size();
  tiers_.resize(n * state_kind_count, tier::device);
  const bool have_paths = !swap_paths(config).empty();
  for (const state_kind s : all_states) {
    pinned_[index(s)] = pinned_for(config, s);
    state_rule rule = rule_for(layout, config, s);
    const std::vector<tier> tiers = rule.fractions ? assign_fractions(layout, s, *rule.fractions) : rule.per_parameter;
    for (std::size_t p = 0; p < n; ++p) {
      tiers_[p * state_kind_count + index(s)] = tiers[p];
      bytes_[index(s)][index(tiers[p])] += state_bytes(layout.parameters()[p], s);
    }
    ZOE_CHECK(have_paths || bytes_[index(s)][index(tier::nvme)] == 0, config_error, rule.keys.front(), " puts ",
              state_kind_name(s), " on nvme, but no swap path is configured: give zero_optimization.offload_param",
              ".nvme_path, zero_optimization.offload_optimizer.nvme_path or zoe.swap.extra_paths");
    keys_[index(s)] = std::move(rule.keys);
  }
  // The working copy of an fp32 parameter is its master: report the master's home for it. Where
  // the working copy's rule wanted it elsewhere, that key does nothing for it: say so once.
  std::size_t overruled = 0;
  std::size_t first = 0;
  tier wanted = tier::device;
  for (std::size_t p = 0; p < n; ++p) {
    if (layout.parameters()[p].dtype != kernels::dtype::fp32) continue;
    tier& working = tiers_[p * state_kind_count + index(state_kind::working)];
    const tier master = tiers_[p * state_kind_count + index(state_kind::master)];
    if (working != master && overruled++ == 0) {
      first = p;
      wanted = working;
    }
    working = master;
  }
  if (overruled > 0) {
    log::warn(keys_[index(state_kind::working)].front(), " would put the working copy of ", overruled,
              " fp32 parameters (the first '", layout.parameters()[first].name, "') in ", tier_name(wanted),
              ", but an fp32 parameter's working copy is its fp32 master, which ",
              keys_[index(state_kind::master)].front(), " places: the first stays in ",
              tier_name(tiers_[first * state_kind_count + index(state_kind::master)]),
              " (enable bf16 or fp16 for a working copy of its own)");
  }
}

tier placement::where(parameter_id p, state_kind s) const {
  ZOE_EXPECTS(p < parameter_count(), "placement: no parameter ", p, " (the layout has ", parameter_count(), ")");
  return tiers_[static_cast<std::size_t>(p) * state_kind_count + index(s)];
}

std::uint64_t placement::bytes(state_kind s, tier t) const noexcept { return bytes_[index(s)][index(t)]; }

std::uint64_t placement::bytes(tier t) const noexcept {
  std::uint64_t sum = 0;
  for (const auto& per_state : bytes_) sum += per_state[index(t)];
  return sum;
}

}  // namespace zoe::engine
