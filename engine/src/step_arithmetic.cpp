// The arithmetic between the gradient path and the optimizer (see step_arithmetic.hpp).
#include "step_arithmetic.hpp"

#include <cmath>

namespace zoe::engine::detail {

double averaged_norm(const gradient_summary& g, std::size_t micro_batches) noexcept {
  return std::sqrt(g.sum_of_squares) / static_cast<double>(micro_batches);
}

prepared_step prepare_step(const engine_config& config, const optimizer_config& adam_settings,
                           const gradient_summary& g, double loss_scale, double lr, std::int64_t step) noexcept {
  const std::size_t k = config.gradient_accumulation_steps;
  prepared_step out;
  // The gradient is divided by `combined`: the loss scale, times the clip factor when clipping.
  double combined = loss_scale;
  const double max_norm = config.gradient_clipping;
  if (max_norm > 0) {
    const double c = (averaged_norm(g, k) / loss_scale + 1e-6) / max_norm;
    if (c > 1) {
      combined = c * loss_scale;
      out.clip = 1 / c;
    }
  }
  out.adam = kernels::adam_config{.lr = static_cast<float>(lr),
                                  .beta1 = static_cast<float>(adam_settings.betas[0]),
                                  .beta2 = static_cast<float>(adam_settings.betas[1]),
                                  .eps = static_cast<float>(adam_settings.eps),
                                  .weight_decay = static_cast<float>(adam_settings.weight_decay),
                                  .adamw = adam_settings.adam_w_mode,
                                  .bias_correction = adam_settings.bias_correction,
                                  .step = step,
                                  .grad_scale = static_cast<float>(1 / (static_cast<double>(k) * combined))};
  return out;
}

bool surely_clipped(const engine_config& config, double partial, double loss_scale) noexcept {
  if (!(config.gradient_clipping > 0) || !(partial >= 0)) return false;
  // `partial` may have been added in another order than summary()'s: a bound below it, by far more
  // than fp64 rounding can move a sum of non-negative terms.
  const gradient_summary lower{.sum_of_squares = partial * (1 - 1e-9), .overflow = false};
  const float clipped = prepare_step(config, optimizer_config{}, lower, loss_scale, 0, 1).adam.grad_scale;
  // The speculation's: a summary of sum 0 (engine.cpp, arm_speculation).
  const float ahead = prepare_step(config, optimizer_config{}, gradient_summary{}, loss_scale, 0, 1).adam.grad_scale;
  // grad_scale falls as the sum grows (float rounding keeps the order): the step's is at most `clipped`.
  return clipped < ahead;
}

}  // namespace zoe::engine::detail
