#include "zoe/engine/optim/loss_scaler.hpp"

#include <algorithm>
#include <cmath>

#include "config/float_ranges.hpp"
#include "zoe/core/check.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine {

namespace {

// DeepSpeed's scale_factor: every change of the dynamic scale is a factor of two.
constexpr double scale_factor = 2.0;

}  // namespace

loss_scaler::loss_scaler(const fp16_config& config) {
  if (!config.enabled) return;  // bf16 or fp32: DeepSpeed's LossScaler(1.0)
  // The reader runs the same check; a config built in code meets it here.
  if (const auto problem = detail::find_fp16_problem(config)) {
    throw config_error(str("fp16.", problem->key, ": ", problem->message));
  }
  if (config.loss_scale > 0) {
    state_.scale = config.loss_scale;
    return;
  }
  dynamic_ = true;
  window_ = config.loss_scale_window;
  hysteresis_ = config.hysteresis;
  consecutive_hysteresis_ = config.consecutive_hysteresis;
  min_scale_ = static_cast<double>(config.min_loss_scale);
  state_.scale = std::ldexp(1.0, static_cast<int>(config.initial_scale_power));
  state_.cur_hysteresis = hysteresis_;
}

bool loss_scaler::update(bool overflow) {
  if (dynamic_) {
    if (overflow) {
      if (hysteresis_ == 1 || state_.cur_hysteresis == 1) {
        // Checked before anything changes, so the caller sees the state of the failed step.
        ZOE_CHECK(state_.scale != min_scale_, loss_scale_error, "gradient overflow with the loss scale already at ",
                  "fp16.min_loss_scale ", min_scale_, " (step ", state_.cur_iter, "): it cannot be lowered further");
        state_.scale = std::max(state_.scale / scale_factor, min_scale_);
      } else {
        --state_.cur_hysteresis;
      }
      state_.last_overflow_iter = state_.cur_iter;
    } else {
      if (consecutive_hysteresis_) state_.cur_hysteresis = hysteresis_;
      // Clean steps since the last overflow, this one excluded: DeepSpeed's stable_interval.
      const std::int64_t stable_interval = state_.cur_iter - state_.last_overflow_iter - 1;
      if (stable_interval > 0 && stable_interval % window_ == 0) {
        if (!consecutive_hysteresis_) state_.cur_hysteresis = hysteresis_;
        state_.scale = std::min(state_.scale * scale_factor, detail::max_loss_scale);
      }
    }
  }
  ++state_.cur_iter;
  if (!overflow) ++state_.optimizer_steps;
  return overflow;
}

void loss_scaler::restore(const loss_scaler_state& saved) {
  ZOE_EXPECTS(std::isfinite(saved.scale) && saved.scale > 0, "loss scaler state: scale must be finite and > 0, got ",
              saved.scale);
  ZOE_EXPECTS(saved.cur_iter >= 0, "loss scaler state: cur_iter must be >= 0, got ", saved.cur_iter);
  ZOE_EXPECTS(saved.last_overflow_iter >= -1 && saved.last_overflow_iter < saved.cur_iter,
              "loss scaler state: last_overflow_iter must be in [-1, cur_iter ", saved.cur_iter, "), got ",
              saved.last_overflow_iter);
  ZOE_EXPECTS(saved.optimizer_steps >= 0 && saved.optimizer_steps <= saved.cur_iter,
              "loss scaler state: optimizer_steps must be in [0, cur_iter ", saved.cur_iter, "], got ",
              saved.optimizer_steps);
  if (dynamic_) {
    ZOE_EXPECTS(saved.cur_hysteresis >= 1 && saved.cur_hysteresis <= hysteresis_,
                "loss scaler state: cur_hysteresis must be in [1, fp16.hysteresis ", hysteresis_, "], got ",
                saved.cur_hysteresis);
    ZOE_EXPECTS(saved.scale >= min_scale_, "loss scaler state: scale ", saved.scale, " is below fp16.min_loss_scale ",
                min_scale_);
    ZOE_EXPECTS(saved.scale <= detail::max_loss_scale, "loss scaler state: scale ", saved.scale,
                " is above the dynamic loss scale's ceiling 2^127 (", detail::max_loss_scale, ")");
    state_ = saved;
    return;
  }
  const double configured = state_.scale;
  state_ = saved;
  state_.scale = configured;
  state_.cur_hysteresis = 1;
}

}  // namespace zoe::engine
