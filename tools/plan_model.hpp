#pragma once
// The model zoe-plan lays out for --params N --layers L: L equal layers, each one module of a
// weight and a bias, in the working type the config trains in.

#include <cstdint>
#include <string>

#include "zoe/engine/config/config.hpp"
#include "zoe/engine/model/layout.hpp"

namespace zoe::plan {

/// The working type of `config`: bf16 when bf16.enabled, fp16 when fp16.enabled, else fp32 (as
/// DeepSpeed trains without either block). Never throws.
[[nodiscard]] kernels::dtype working_dtype(const engine::engine_config& config) noexcept;

/// `layers` modules "layer<i>", each of a bias of floor(sqrt(n)) elements ("layer<i>.bias") and a
/// weight of the rest ("layer<i>.weight"), where n = params / layers and the last layer also takes
/// params % layers; laid out as `options` says (engine::stage_layout of the config on the
/// --world-size ranks). Throws usage_error naming the flag when params < 2 * layers (a layer needs
/// a weight and a bias), layers or the ranks are 0.
[[nodiscard]] engine::model_layout layered_model(std::uint64_t params, std::uint64_t layers,
                                                 const engine::layout_options& options, kernels::dtype dtype);

/// "N parameters in L layers of fp16 (a weight and a bias each), world size W", and, where every
/// rank holds the states whole (stage 0), ", every rank holding every state whole (stage 0: a full
/// replica each)". Never throws beyond allocation.
[[nodiscard]] std::string describe_model(std::uint64_t params, std::uint64_t layers,
                                         const engine::layout_options& options, kernels::dtype dtype);

}  // namespace zoe::plan
