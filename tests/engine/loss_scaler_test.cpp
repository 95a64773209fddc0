// The loss scale step by step. Each table was produced by running DeepSpeed's
// DynamicLossScaler.update_scale (deepspeed/runtime/fp16/loss_scaler.py) on the same settings and
// overflow sequence; a row is the state after that step's update.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "zoe/core/error.hpp"
#include "zoe/engine/optim/loss_scaler.hpp"

namespace zoe::engine {
namespace {

using ::testing::HasSubstr;

struct row {
  bool overflow;
  double scale;
  std::int64_t cur_hysteresis;
  std::int64_t last_overflow_iter;
};

fp16_config dynamic_fp16(std::int64_t power, std::int64_t window, std::int64_t hysteresis, bool consecutive,
                         std::int64_t min_scale) {
  fp16_config c;
  c.enabled = true;
  c.initial_scale_power = power;
  c.loss_scale_window = window;
  c.hysteresis = hysteresis;
  c.consecutive_hysteresis = consecutive;
  c.min_loss_scale = min_scale;
  return c;
}

void expect_table(loss_scaler& scaler, const std::vector<row>& table) {
  std::int64_t steps = scaler.optimizer_steps();
  for (std::size_t i = 0; i < table.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i));
    const std::int64_t iter_before = scaler.state().cur_iter;
    EXPECT_EQ(scaler.update(table[i].overflow), table[i].overflow);
    if (!table[i].overflow) ++steps;
    EXPECT_EQ(scaler.scale(), table[i].scale);
    EXPECT_EQ(scaler.state().cur_hysteresis, table[i].cur_hysteresis);
    EXPECT_EQ(scaler.state().last_overflow_iter, table[i].last_overflow_iter);
    EXPECT_EQ(scaler.state().cur_iter, iter_before + 1);
    EXPECT_EQ(scaler.optimizer_steps(), steps);
  }
}

TEST(loss_scaler, starts_at_two_to_the_initial_power_with_full_hysteresis) {
  const loss_scaler scaler(dynamic_fp16(16, 1000, 2, false, 1));
  EXPECT_TRUE(scaler.dynamic());
  EXPECT_EQ(scaler.scale(), 65536.0);
  EXPECT_EQ(scaler.state(), (loss_scaler_state{65536.0, 0, -1, 2, 0}));
}

// Hysteresis 2 absorbs the first overflow, the second halves; after loss_scale_window clean steps
// the scale doubles and hysteresis is refilled; it is not refilled by a lone clean step.
TEST(loss_scaler, overflow_uses_hysteresis_then_halves_and_window_doubles) {
  loss_scaler scaler(dynamic_fp16(4, 3, 2, false, 1));
  expect_table(scaler, {{true, 16, 1, 0},
                        {true, 8, 1, 1},
                        {false, 8, 1, 1},
                        {false, 8, 1, 1},
                        {false, 8, 1, 1},
                        {false, 16, 2, 1},
                        {false, 16, 2, 1},
                        {false, 16, 2, 1},
                        {false, 32, 2, 1},
                        {true, 32, 1, 9},
                        {false, 32, 1, 9},
                        {true, 16, 1, 11},
                        {true, 8, 1, 12}});
}

TEST(loss_scaler, clean_run_doubles_every_window) {
  loss_scaler scaler(dynamic_fp16(2, 2, 2, false, 1));
  expect_table(scaler, {{false, 4, 2, -1},
                        {false, 4, 2, -1},
                        {false, 8, 2, -1},
                        {false, 8, 2, -1},
                        {false, 16, 2, -1},
                        {false, 16, 2, -1}});
}

TEST(loss_scaler, consecutive_hysteresis_refills_on_every_clean_step) {
  loss_scaler scaler(dynamic_fp16(4, 2, 3, true, 1));
  expect_table(scaler, {{true, 16, 2, 0},
                        {true, 16, 1, 1},
                        {false, 16, 3, 1},
                        {true, 16, 2, 3},
                        {true, 16, 1, 4},
                        {true, 8, 1, 5},
                        {false, 8, 3, 5},
                        {false, 8, 3, 5},
                        {false, 16, 3, 5}});
}

TEST(loss_scaler, without_consecutive_hysteresis_a_clean_step_does_not_refill) {
  loss_scaler scaler(dynamic_fp16(4, 2, 3, false, 1));
  expect_table(scaler, {{true, 16, 2, 0},
                        {true, 16, 1, 1},
                        {false, 16, 1, 1},
                        {true, 8, 1, 3},
                        {true, 4, 1, 4},
                        {true, 2, 1, 5},
                        {false, 2, 1, 5},
                        {false, 2, 1, 5},
                        {false, 4, 3, 5}});
}

// The scale stops at min_loss_scale (even when halving would pass it), and one more overflow there
// is an error that names the key and leaves the state as it was, as DeepSpeed raises.
TEST(loss_scaler, floor_at_min_loss_scale_then_overflow_there_throws) {
  loss_scaler scaler(dynamic_fp16(4, 1000, 1, false, 3));
  expect_table(scaler, {{true, 8, 1, 0}, {true, 4, 1, 1}, {true, 3, 1, 2}});
  const loss_scaler_state before = scaler.state();
  try {
    scaler.update(true);
    FAIL() << "an overflow at the floor must throw";
  } catch (const loss_scale_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("fp16.min_loss_scale 3"));
  }
  EXPECT_EQ(scaler.state(), before);
  EXPECT_FALSE(scaler.update(false));  // a clean step still goes on from there
  EXPECT_EQ(scaler.scale(), 3.0);
}

// The scale multiplies a float loss and its reciprocal reaches the Adam kernel as a float: it
// stops doubling at 2^127, the largest power of two a float holds. Unbounded, it would reach +inf,
// where halving leaves it and every later step is skipped.
TEST(loss_scaler, doubling_stops_at_the_largest_float_power_of_two) {
  constexpr double ceiling = 0x1p127;
  loss_scaler scaler(dynamic_fp16(126, 1, 2, false, 1));
  expect_table(scaler, {{false, 0x1p126, 2, -1},
                        {false, ceiling, 2, -1},
                        {false, ceiling, 2, -1},
                        {false, ceiling, 2, -1},
                        {true, ceiling, 1, 4},
                        {true, 0x1p126, 1, 5},
                        {false, 0x1p126, 1, 5},
                        {false, ceiling, 2, 5}});
}

TEST(loss_scaler, static_scale_never_changes_but_overflow_still_skips) {
  fp16_config c;
  c.enabled = true;
  c.loss_scale = 128;
  loss_scaler scaler(c);
  EXPECT_FALSE(scaler.dynamic());
  for (const bool overflow : {true, true, true, false, false, true, false}) {
    EXPECT_EQ(scaler.update(overflow), overflow);
    EXPECT_EQ(scaler.scale(), 128.0);
  }
  EXPECT_EQ(scaler.optimizer_steps(), 3);
  EXPECT_EQ(scaler.state().cur_iter, 7);
}

TEST(loss_scaler, fp16_disabled_scales_by_one_and_skips_only_what_the_caller_flags) {
  loss_scaler scaler(fp16_config{});
  EXPECT_FALSE(scaler.dynamic());
  EXPECT_EQ(scaler.scale(), 1.0);
  EXPECT_FALSE(scaler.update(false));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 1.0);
  EXPECT_EQ(scaler.optimizer_steps(), 1);
}

TEST(loss_scaler, settings_that_cannot_work_are_refused_naming_the_key) {
  const auto message = [](const fp16_config& c) {
    try {
      loss_scaler{c};
    } catch (const config_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message(dynamic_fp16(16, 0, 2, false, 1)), HasSubstr("fp16.loss_scale_window: must be >= 1"));
  EXPECT_THAT(message(dynamic_fp16(16, 1000, 0, false, 1)), HasSubstr("fp16.hysteresis: must be >= 1"));
  EXPECT_THAT(message(dynamic_fp16(16, 1000, 2, false, 0)), HasSubstr("fp16.min_loss_scale: must be >= 1"));
  EXPECT_THAT(message(dynamic_fp16(1024, 1000, 2, false, 1)), HasSubstr("fp16.initial_scale_power"));
  EXPECT_THAT(message(dynamic_fp16(128, 1000, 2, false, 1)), HasSubstr("fp16.initial_scale_power"));
  EXPECT_THAT(message(dynamic_fp16(2, 1000, 2, false, 8)), HasSubstr("fp16.min_loss_scale"));
  fp16_config negative;
  negative.enabled = true;
  negative.loss_scale = -1;
  EXPECT_THAT(message(negative), HasSubstr("fp16.loss_scale"));
  fp16_config beyond_float = negative;
  beyond_float.loss_scale = 1e39;
  EXPECT_THAT(message(beyond_float), HasSubstr("fp16.loss_scale"));
}

// A scaler restored from a saved state goes on exactly as the one it was saved from.
TEST(loss_scaler, state_round_trip_continues_identically) {
  const fp16_config c = dynamic_fp16(8, 3, 2, false, 1);
  loss_scaler original(c);
  for (const bool overflow : {true, true, false, false, true}) original.update(overflow);
  loss_scaler restored(c);
  restored.restore(original.state());
  EXPECT_EQ(restored.state(), original.state());
  for (const bool overflow : {false, false, false, false, true, true, false, false, false, false}) {
    EXPECT_EQ(restored.update(overflow), original.update(overflow));
    EXPECT_EQ(restored.state(), original.state());
  }
}

TEST(loss_scaler, static_restore_keeps_the_configured_scale_and_takes_the_counters) {
  fp16_config c;
  c.enabled = true;
  c.loss_scale = 64;
  loss_scaler scaler(c);
  scaler.restore({1024, 10, 4, 1, 9});
  EXPECT_EQ(scaler.scale(), 64.0);
  EXPECT_EQ(scaler.state().cur_iter, 10);
  EXPECT_EQ(scaler.optimizer_steps(), 9);
}

TEST(loss_scaler, restore_refuses_a_state_naming_the_field) {
  loss_scaler scaler(dynamic_fp16(8, 3, 2, false, 4));
  const loss_scaler_state before = scaler.state();
  const auto message = [&scaler](const loss_scaler_state& s) {
    try {
      scaler.restore(s);
    } catch (const usage_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_THAT(message({std::numeric_limits<double>::infinity(), 0, -1, 2, 0}), HasSubstr("scale must be finite"));
  EXPECT_THAT(message({2, 0, -1, 2, 0}), HasSubstr("below fp16.min_loss_scale"));
  EXPECT_THAT(message({0x1p128, 0, -1, 2, 0}), HasSubstr("above the dynamic loss scale's ceiling"));
  EXPECT_THAT(message({8, -1, -1, 2, 0}), HasSubstr("cur_iter must be >= 0"));
  EXPECT_THAT(message({8, 3, 3, 2, 0}), HasSubstr("last_overflow_iter"));
  EXPECT_THAT(message({8, 3, -1, 2, 4}), HasSubstr("optimizer_steps"));
  EXPECT_THAT(message({8, 3, -1, 3, 3}), HasSubstr("cur_hysteresis must be in [1, fp16.hysteresis 2]"));
  EXPECT_THAT(message({8, 3, -1, 0, 3}), HasSubstr("cur_hysteresis"));
  EXPECT_EQ(scaler.state(), before);
}

}  // namespace
}  // namespace zoe::engine
