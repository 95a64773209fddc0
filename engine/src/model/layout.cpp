// The registry of parameters and its padded partition layout (see layout.hpp).
#include "zoe/engine/model/layout.hpp"

#include <algorithm>
#include <limits>
#include <numeric>
#include <unordered_set>

#include "zoe/core/check.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"

namespace zoe::engine {
namespace {

constexpr std::uint64_t max_u64 = std::numeric_limits<std::uint64_t>::max();

std::string describe(const std::string& module, const std::string& parameter) {
  return str("module '", module, "', parameter '", parameter, "'");
}

// a * b, or a usage_error naming `what` when it does not fit 64 bits.
std::uint64_t checked_mul(std::uint64_t a, std::uint64_t b, const std::string& what) {
  if (a != 0 && b > max_u64 / a) throw usage_error(str(what, ": ", a, " * ", b, " elements overflow 64 bits"));
  return a * b;
}
std::uint64_t checked_add(std::uint64_t a, std::uint64_t b, const std::string& what) {
  if (b > max_u64 - a) throw usage_error(str(what, ": ", a, " + ", b, " elements overflow 64 bits"));
  return a + b;
}

void validate(const layout_options& o) {
  ZOE_EXPECTS(o.world_size > 0, "layout_options.world_size must be at least 1, got 0");
  // Replicated shards are stage 0's whole states; stages that partition hold one shard per rank.
  ZOE_EXPECTS(o.replicas > 0 && (o.replicas == 1 || o.world_size == 1),
              "layout_options.replicas must be at least 1, and 1 unless world_size is 1; got replicas ", o.replicas,
              " with world_size ", o.world_size);
  // The bounds keep the granule (at most alignment_bytes * quant_block elements) within 64 bits.
  ZOE_EXPECTS(is_pow2(o.alignment_bytes) && o.alignment_bytes <= (1ULL << 30),
              "layout_options.alignment_bytes must be a power of two up to 1 GiB, got ", o.alignment_bytes);
  ZOE_EXPECTS(o.quant_block > 0 && o.quant_block % 8 == 0 && o.quant_block <= (1ULL << 32),
              "layout_options.quant_block must be a positive multiple of 8 elements up to 2^32, got ", o.quant_block);
}

}  // namespace

std::uint64_t parameter_layout::real_numel(std::size_t rank) const noexcept {
  if (shard_numel == 0 || rank > numel / shard_numel) return 0;
  // rank * shard_numel <= numel here, so neither the product nor the difference wraps.
  return std::min<std::uint64_t>(shard_numel, numel - rank * shard_numel);
}

model_layout::model_layout(std::vector<module_spec> modules, layout_options options) : options_(options) {
  validate(options_);
  ZOE_EXPECTS(modules.size() <= std::numeric_limits<module_id>::max(), "a layout holds at most ",
              std::numeric_limits<module_id>::max(), " modules, got ", modules.size());
  std::unordered_set<std::string> module_names;
  modules_.reserve(modules.size());
  for (auto& spec : modules) {
    ZOE_EXPECTS(!spec.name.empty(), "module ", modules_.size(), " has an empty name");
    ZOE_EXPECTS(module_names.insert(spec.name).second, "module '", spec.name, "' is named twice");
    module_layout m;
    m.id = static_cast<module_id>(modules_.size());
    m.name = std::move(spec.name);
    std::unordered_set<std::string> parameter_names;
    for (auto& p : spec.parameters) {
      ZOE_EXPECTS(!p.name.empty(), "module '", m.name, "': parameter ", m.parameters.size(), " has an empty name");
      ZOE_EXPECTS(parameter_names.insert(p.name).second, describe(m.name, p.name), " is named twice in its module");
      ZOE_EXPECTS(parameters_.size() < std::numeric_limits<parameter_id>::max(), "a layout holds at most ",
                  std::numeric_limits<parameter_id>::max(), " parameters; ", describe(m.name, p.name), " is one more");
      const std::string what = describe(m.name, p.name);
      ZOE_EXPECTS(p.group <= max_parameter_group, what, ": group ", p.group, " is above ", max_parameter_group,
                  ", the largest parameter group");
      std::uint64_t numel = 1;
      for (std::size_t d = 0; d < p.shape.size(); ++d) {
        ZOE_EXPECTS(p.shape[d] > 0, what, " has a zero dimension (dimension ", d, " of ", p.shape.size(), ")");
        numel = checked_mul(numel, p.shape[d], what);
      }
      const std::uint64_t g = granule(p.dtype);
      // Per rank, rounded up to whole granules; the padded parameter must still fit 64 bits.
      const std::uint64_t per_rank = numel / options_.world_size + (numel % options_.world_size != 0 ? 1 : 0);
      const std::uint64_t granules = per_rank / g + (per_rank % g != 0 ? 1 : 0);
      const std::uint64_t shard = checked_mul(granules, g, what);
      (void)checked_mul(shard, options_.world_size, what);
      // Each state is counted in bytes downstream: the fp32 master of the padded parameter must fit.
      (void)checked_mul(checked_mul(shard, options_.world_size, what), 4, what);

      parameter_layout pl;
      pl.id = static_cast<parameter_id>(parameters_.size());
      pl.module = m.id;
      pl.name = std::move(p.name);
      pl.shape = std::move(p.shape);
      pl.dtype = p.dtype;
      pl.frozen = p.frozen;
      pl.group = p.group;
      group_count_ = std::max<std::size_t>(group_count_, std::size_t{p.group} + 1);
      pl.numel = numel;
      pl.shard_numel = shard;
      m.parameters.push_back(pl.id);
      if (!pl.frozen) m.trainable.push_back(pl.id);
      m.numel = checked_add(m.numel, numel, what);
      m.shard_numel = checked_add(m.shard_numel, shard, what);
      total_numel_ = checked_add(total_numel_, numel, what);
      total_shard_numel_ = checked_add(total_shard_numel_, shard, what);
      parameters_.push_back(std::move(pl));
    }
    modules_.push_back(std::move(m));
  }
}

const module_layout& model_layout::module(module_id id) const {
  ZOE_EXPECTS(id < modules_.size(), "unknown module id ", id, " (the layout has ", modules_.size(), " modules)");
  return modules_[id];
}

const parameter_layout& model_layout::parameter(parameter_id id) const {
  ZOE_EXPECTS(id < parameters_.size(), "unknown parameter id ", id, " (the layout has ", parameters_.size(),
              " parameters)");
  return parameters_[id];
}

std::uint64_t model_layout::granule(kernels::dtype working) const noexcept {
  // The narrowest state is the working copy (and the gradient, of the same type); a count that
  // aligns it aligns the fp32 states too, as they are at least as wide.
  const std::uint64_t size = kernels::dtype_size(working);
  const std::uint64_t per_alignment =
      options_.alignment_bytes / std::gcd<std::uint64_t>(options_.alignment_bytes, size);
  return std::lcm<std::uint64_t>(per_alignment, options_.quant_block);
}

}  // namespace zoe::engine
