#pragma once
// What a step's float arithmetic asks of configuration values. The loss scale multiplies the
// caller's float loss, and its reciprocal reaches the Adam kernel as a float, as do lr, eps,
// weight_decay and the betas: a value that a double holds and a float does not (or one that a
// float rounds to 0, or to 1) would pass the reader and then fail, or turn inf, at every step.

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>

#include "zoe/engine/config/config.hpp"

namespace zoe::engine::detail {

/// The largest finite float, as a double.
inline constexpr double float_max = std::numeric_limits<float>::max();
/// The smallest positive float (a subnormal, 2^-149): a smaller eps is 0 as a float.
inline constexpr double float_min_positive = std::numeric_limits<float>::denorm_min();
/// The largest float below 1 (1 - 2^-24): a beta above it rounds to 1 as a float.
inline constexpr double float_below_one = 1.0 - 0x1p-24;

/// The dynamic loss scale's ceiling, 2^127: the largest power of two that a float holds.
inline constexpr double max_loss_scale = 0x1p127;
inline constexpr std::int64_t max_initial_scale_power = 127;
/// The smallest static loss scale, 2^-126 (the smallest normal float): its reciprocal is a float.
inline constexpr double min_static_loss_scale = 0x1p-126;

/// A loss-scale setting that cannot work: its key under "fp16" and why.
struct fp16_problem {
  std::string_view key;
  std::string message;
};

/// The first fp16 setting that loss scaling cannot use, nullopt when there is none: loss_scale
/// neither 0 nor in [min_static_loss_scale, max_loss_scale], initial_scale_power outside [0, 127];
/// and, with dynamic scaling only (enabled, loss_scale 0), as DeepSpeed checks them:
/// loss_scale_window, hysteresis or min_loss_scale below 1, or min_loss_scale above the initial
/// scale. Throws only std::bad_alloc.
[[nodiscard]] std::optional<fp16_problem> find_fp16_problem(const fp16_config& c);

}  // namespace zoe::engine::detail
