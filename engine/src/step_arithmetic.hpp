#pragma once
// The arithmetic of a step that sits between the gradient path and the optimizer: the gradients
// summed over k micro-batches are averaged, unscaled by the loss scale and clipped to
// gradient_clipping by their global norm, all folded into Adam's grad_scale. step() uses it for the
// step it takes, measure_stages() for the optimizer stages it times over the same gradients.

#include <cstddef>
#include <cstdint>

#include "zoe/engine/config/config.hpp"
#include "zoe/engine/optim/gradient_path.hpp"
#include "zoe/kernels/adam.hpp"

namespace zoe::engine::detail {

/// The Adam settings of one step and what clipping did.
struct prepared_step {
  kernels::adam_config adam;
  double clip = 1;  ///< what clipping multiplied the unscaled gradients by (1: not clipped)
};

/// The global L2 norm of the gradients `g` summed over `micro_batches`, averaged (still loss-scaled).
[[nodiscard]] double averaged_norm(const gradient_summary& g, std::size_t micro_batches) noexcept;

/// Step number `step` (bias correction's count, from 1) with learning rate `lr` over the gradients
/// `g` of config.gradient_accumulation_steps micro-batches accumulated at loss scale `loss_scale` (DeepSpeed's
/// unscale_and_clip_grads, stage 3). Never throws; Adam checks the settings when it runs.
[[nodiscard]] prepared_step prepare_step(const engine_config& config, const optimizer_config& adam_settings,
                                         const gradient_summary& g, double loss_scale, double lr,
                                         std::int64_t step) noexcept;

/// Whether gradients of config.gradient_accumulation_steps micro-batches at loss scale `loss_scale`
/// whose sum of squares is at least `partial` (some of the step's parameters, added in any order)
/// are certainly clipped: prepare_step's grad_scale is then below the one of a sum of 0 whatever the
/// other parameters add, so a shard stepped with clip coefficient 1 (the speculation) would be
/// dropped. False without gradient_clipping, and when `partial` is not a number.
[[nodiscard]] bool surely_clipped(const engine_config& config, double partial, double loss_scale) noexcept;

}  // namespace zoe::engine::detail
