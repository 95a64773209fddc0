#pragma once
// The loss scale of a training run, with DeepSpeed's semantics (runtime/fp16/loss_scaler.py:
// DynamicLossScaler for fp16 with loss_scale 0, LossScaler otherwise).
//
// Per step the caller scales the loss by scale(), learns from the reduced gradients whether any is
// inf/NaN, and calls update(overflow) once, before the first sub-group is updated. update() returns
// whether the step must be skipped: exactly when `overflow` is true, in every mode (as ZeRO-3 skips
// the step on overflow whatever the dtype). A skipped step does not advance optimizer_steps(), the
// count that Adam's bias correction uses.
//
// Dynamic scaling (fp16.enabled, fp16.loss_scale 0), starting at 2^initial_scale_power:
//  - overflow with cur_hysteresis > 1: cur_hysteresis drops by one, the scale stays;
//  - overflow otherwise: the scale halves, never below min_loss_scale; an overflow while the scale
//    already equals min_loss_scale throws loss_scale_error (DeepSpeed raises there too), leaving
//    the state untouched;
//  - a clean step with consecutive_hysteresis refills cur_hysteresis to hysteresis;
//  - after loss_scale_window clean steps since the last overflow, the scale doubles (and, without
//    consecutive_hysteresis, cur_hysteresis is refilled), and again every window after that, up to
//    2^127: the largest power of two a float holds, since the scale multiplies a float loss and its
//    reciprocal reaches the Adam kernel as a float. (DeepSpeed has no ceiling: its scale would
//    reach inf, which halving leaves inf, and every later step would be skipped.)
// Static (fp16 with loss_scale > 0): that scale, never changed. fp16 disabled (bf16, fp32): 1.

#include <cstdint>
#include <string>

#include "zoe/core/error.hpp"
#include "zoe/engine/config/config.hpp"

namespace zoe::engine {

/// An overflow with the dynamic scale already at fp16.min_loss_scale: training cannot go on.
class loss_scale_error : public error {
 public:
  explicit loss_scale_error(const std::string& m) : error(error_category::usage, m) {}
};

/// What a checkpoint keeps of the scaler; field names follow DeepSpeed's attributes.
struct loss_scaler_state {
  double scale = 1;                      ///< cur_scale
  std::int64_t cur_iter = 0;             ///< update() calls so far, skipped steps included
  std::int64_t last_overflow_iter = -1;  ///< cur_iter of the last overflow; -1: none yet
  std::int64_t cur_hysteresis = 1;       ///< an overflow halves the scale when this is 1
  std::int64_t optimizer_steps = 0;      ///< steps not skipped: the bias-correction step count

  friend bool operator==(const loss_scaler_state&, const loss_scaler_state&) = default;
};

class loss_scaler {
 public:
  /// Throws config_error naming the fp16 key when enabled settings cannot work, as the config
  /// reader refuses them: a loss_scale neither 0 nor in [2^-126, 2^127], an initial_scale_power
  /// outside [0, 127]; with dynamic scaling, loss_scale_window, hysteresis or min_loss_scale below 1,
  /// or min_loss_scale above 2^initial_scale_power.
  explicit loss_scaler(const fp16_config& config);

  [[nodiscard]] double scale() const noexcept { return state_.scale; }
  [[nodiscard]] bool dynamic() const noexcept { return dynamic_; }
  [[nodiscard]] std::int64_t optimizer_steps() const noexcept { return state_.optimizer_steps; }

  /// Records one step's overflow flag; returns true when the step must be skipped (== overflow).
  bool update(bool overflow);

  [[nodiscard]] const loss_scaler_state& state() const noexcept { return state_; }
  /// Takes a saved state. Throws usage_error naming the field that cannot come from this
  /// configuration (a scale that is not finite and > 0, a dynamic scale outside
  /// [fp16.min_loss_scale, 2^127], counters out of order, cur_hysteresis outside [1, fp16.hysteresis]). A static or
  /// disabled scaler keeps its configured scale: the scale is a setting there, not learned state.
  void restore(const loss_scaler_state& saved);

 private:
  bool dynamic_ = false;
  std::int64_t window_ = 1;
  std::int64_t hysteresis_ = 1;
  bool consecutive_hysteresis_ = false;
  double min_scale_ = 1;
  loss_scaler_state state_;
};

}  // namespace zoe::engine
