#pragma once
// The model as the engine sees it: parameters (name, shape, dtype) grouped into modules, the unit
// of fetch and release, and the padded partition layout that cuts each parameter into one shard
// per rank. The layout is computed for any world size; nothing in it depends on this process's rank
// except the accessors that take one.
//
// Each parameter is flattened and padded to world_size * shard_numel elements, where shard_numel
// is a multiple of the layout's granule: the smallest element count that keeps every state of the
// shard 4 KiB-aligned (fp16/bf16 states: 2048 elements, fp32: 1024) and fills whole quantization
// blocks (quant_block elements). Rank r's shard holds elements [r * shard_numel, (r+1) * shard_numel)
// of the padded parameter; the real elements of the parameter end at numel, the rest is padding
// (zero in every state).
//
// Replicas: ZeRO stage 0 (plain data parallelism) partitions nothing, so its layout is one shard
// (world_size 1) that each of `replicas` ranks holds whole; stages 1-3 cut a shard per rank
// (replicas 1). Rank r holds shard shard_of(r) either way.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "zoe/kernels/dtype.hpp"

namespace zoe::engine {

using parameter_id = std::uint32_t;
using module_id = std::uint32_t;

struct parameter_spec {
  std::string name;
  std::vector<std::uint64_t> shape;             ///< empty: a scalar (one element)
  kernels::dtype dtype = kernels::dtype::fp16;  ///< the working copy's type (fp32: the master is the working copy)
  /// No gradient, no Adam moments, no fp32 master beside a 16-bit working copy (placement.hpp's
  /// state_bytes); the step and the gradient path pass it by.
  bool frozen = false;
  /// The parameter group whose learning rate and weight decay the step applies (optimizer param_groups);
  /// at most max_parameter_group.
  std::uint32_t group = 0;
};

/// The largest parameter_spec::group: the engine keeps settings for every group up to the largest,
/// so a stray value (an id passed for a group) would cost memory and a step call that takes that
/// many settings; 65536 groups is far beyond any optimizer's param_groups.
inline constexpr std::uint32_t max_parameter_group = 65535;

struct module_spec {
  std::string name;
  std::vector<parameter_spec> parameters;
};

struct layout_options {
  /// Shards each parameter is cut into (the ranks the states are partitioned over).
  std::size_t world_size = 1;
  /// Every state of a shard starts on a multiple of this many bytes (4 KiB suits O_DIRECT).
  std::size_t alignment_bytes = 4096;
  /// Elements per quantization block (qwZ/qgZ): shards hold whole blocks.
  std::size_t quant_block = 2048;
  /// Ranks holding each shard: more than 1 only with world_size 1 (stage 0 on that many ranks,
  /// every rank holding every state whole). The ranks training on the layout: world_size * replicas.
  std::size_t replicas = 1;
};

/// One parameter's place in the layout.
struct parameter_layout {
  parameter_id id = 0;
  module_id module = 0;
  std::string name;
  std::vector<std::uint64_t> shape;
  kernels::dtype dtype = kernels::dtype::fp16;
  bool frozen = false;            ///< parameter_spec::frozen
  std::uint32_t group = 0;        ///< parameter_spec::group
  std::uint64_t numel = 0;        ///< real elements
  std::uint64_t shard_numel = 0;  ///< elements per rank's shard, padding included
  /// Elements of the padded, flattened parameter: world_size * shard_numel.
  [[nodiscard]] std::uint64_t padded_numel(std::size_t world_size) const noexcept { return shard_numel * world_size; }
  /// Real (non-padding) elements in rank `rank`'s shard. Never throws.
  [[nodiscard]] std::uint64_t real_numel(std::size_t rank) const noexcept;
};

struct module_layout {
  module_id id = 0;
  std::string name;
  std::vector<parameter_id> parameters;
  /// Its parameters that are not frozen, in order: those that take gradients.
  std::vector<parameter_id> trainable;
  std::uint64_t numel = 0;        ///< real elements of its parameters
  std::uint64_t shard_numel = 0;  ///< sum of its parameters' shard_numel
};

/// The registry and its layout. Immutable once built; thread-safe to read.
class model_layout {
 public:
  /// Lays out `modules` in order; ids are positions (modules in order, parameters in order across
  /// modules). Throws usage_error naming the module or parameter for an empty name, a module name
  /// given twice, a parameter name given twice within its module (names repeat across modules, as
  /// "weight" does), a zero dimension, or element counts that overflow 64 bits (the fp32 bytes of
  /// the padded parameter included); and naming the option for a world size of 0, replicas of 0
  /// or replicas above 1 with a world size above 1, an alignment that
  /// is not a power of two up to 1 GiB, or a quant_block that is not a positive multiple of 8 up
  /// to 2^32. A module with no parameters is allowed (its fetch gathers nothing).
  model_layout(std::vector<module_spec> modules, layout_options options);

  [[nodiscard]] const layout_options& options() const noexcept { return options_; }
  /// The ranks training on the layout (world_size * replicas).
  [[nodiscard]] std::size_t ranks() const noexcept { return options_.world_size * options_.replicas; }
  /// The shard rank `rank` holds: its own at replicas 1, the only one (0) when every rank holds it
  /// whole. Never throws.
  [[nodiscard]] std::size_t shard_of(std::size_t rank) const noexcept { return rank % options_.world_size; }
  [[nodiscard]] std::span<const module_layout> modules() const noexcept { return modules_; }
  [[nodiscard]] std::span<const parameter_layout> parameters() const noexcept { return parameters_; }
  [[nodiscard]] const module_layout& module(module_id id) const;           ///< usage_error if unknown
  [[nodiscard]] const parameter_layout& parameter(parameter_id id) const;  ///< usage_error if unknown
  /// The granule (elements) that shard_numel is a multiple of for a parameter of `working` type.
  [[nodiscard]] std::uint64_t granule(kernels::dtype working) const noexcept;
  [[nodiscard]] std::uint64_t total_numel() const noexcept { return total_numel_; }
  /// The parameter groups: the largest parameter_spec::group plus 1 (1 for a model without parameters).
  [[nodiscard]] std::size_t group_count() const noexcept { return group_count_; }
  [[nodiscard]] std::uint64_t total_shard_numel() const noexcept { return total_shard_numel_; }

 private:
  layout_options options_;
  std::vector<module_layout> modules_;
  std::vector<parameter_layout> parameters_;
  std::uint64_t total_numel_ = 0;
  std::uint64_t total_shard_numel_ = 0;
  std::size_t group_count_ = 1;
};

}  // namespace zoe::engine
