#include "config/float_ranges.hpp"

#include <cmath>

#include "zoe/core/str.hpp"

namespace zoe::engine::detail {
namespace {

std::optional<fp16_problem> below_one(std::string_view key, std::int64_t value) {
  if (value >= 1) return std::nullopt;
  return fp16_problem{
      key, str("must be >= 1 with dynamic loss scaling (fp16.enabled true, fp16.loss_scale 0), got ", value)};
}

}  // namespace

std::optional<fp16_problem> find_fp16_problem(const fp16_config& c) {
  // Written so that NaN fails each comparison.
  if (!(c.loss_scale == 0 || (c.loss_scale >= min_static_loss_scale && c.loss_scale <= max_loss_scale))) {
    return fp16_problem{
        "loss_scale",
        str("must be 0 (dynamic loss scaling) or a static scale in [", min_static_loss_scale, ", ", max_loss_scale,
            "] (the scale and its reciprocal must be finite floats), got ", c.loss_scale)};
  }
  if (c.initial_scale_power < 0 || c.initial_scale_power > max_initial_scale_power) {
    return fp16_problem{
        "initial_scale_power",
        str("must be an integer in [0, ", max_initial_scale_power,
            "] (the dynamic scale 2^initial_scale_power must be a finite float), got ", c.initial_scale_power)};
  }
  if (!c.enabled || c.loss_scale != 0) return std::nullopt;  // a static scale uses none of the rest
  for (const auto& problem : {below_one("loss_scale_window", c.loss_scale_window),
                              below_one("hysteresis", c.hysteresis), below_one("min_loss_scale", c.min_loss_scale)}) {
    if (problem) return problem;
  }
  // Halving never goes below the minimum: a minimum above the start would raise the scale on overflow.
  const double initial = std::ldexp(1.0, static_cast<int>(c.initial_scale_power));
  if (static_cast<double>(c.min_loss_scale) > initial) {
    return fp16_problem{
        "min_loss_scale",
        str("must not exceed the initial scale 2^fp16.initial_scale_power = ", initial, ", got ", c.min_loss_scale)};
  }
  return std::nullopt;
}

}  // namespace zoe::engine::detail
