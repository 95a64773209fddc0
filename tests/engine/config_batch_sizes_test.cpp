// DeepSpeed's batch arithmetic (resolve_batch_sizes): the key not written derived for the world
// size as runtime/config.py derives it, and a triple that does not multiply out refused naming the
// keys and their values.
#include <cstdint>
#include <optional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "zoe/core/error.hpp"
#include "zoe/engine/config/batch_sizes.hpp"
#include "zoe/engine/config/parse.hpp"

namespace zoe::engine {
namespace {

using ::testing::HasSubstr;

engine_config resolved(const std::string& text, std::size_t world) {
  engine_config c = parse_config(text).config;
  resolve_batch_sizes(c, world);
  return c;
}

std::string error_of(const std::string& text, std::size_t world) {
  try {
    (void)resolved(text, world);
  } catch (const config_error& e) {
    return e.what();
  }
  ADD_FAILURE() << text << " at world size " << world << " was not refused";
  return {};
}

void expect_sizes(const engine_config& c, std::uint64_t batch, std::uint64_t micro, std::uint64_t steps) {
  EXPECT_EQ(c.batch.train_batch_size, batch);
  EXPECT_EQ(c.batch.train_micro_batch_size_per_gpu, micro);
  EXPECT_EQ(c.batch.gradient_accumulation_steps, steps);
  EXPECT_EQ(c.gradient_accumulation_steps, steps);
}

TEST(config_batch_sizes, the_keys_are_read_as_written) {
  const engine_config c = parse_config(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})").config;
  EXPECT_EQ(c.batch.train_batch_size, 32u);
  EXPECT_EQ(c.batch.train_micro_batch_size_per_gpu, 4u);
  EXPECT_FALSE(c.batch.gradient_accumulation_steps.has_value());
  EXPECT_EQ(parse_config(R"({"gradient_accumulation_steps": 1})").config.batch.gradient_accumulation_steps, 1u);
  EXPECT_THAT(error_of(R"({"train_batch_size": 0})", 1), HasSubstr("train_batch_size"));
  EXPECT_THAT(error_of(R"({"train_micro_batch_size_per_gpu": "auto"})", 1),
              HasSubstr("train_micro_batch_size_per_gpu"));
}

TEST(config_batch_sizes, the_missing_one_is_derived_for_the_world_size) {
  // train_batch_size and the micro-batch: the steps.
  expect_sizes(resolved(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})", 1), 32, 4, 8);
  expect_sizes(resolved(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})", 2), 32, 4, 4);
  // train_batch_size and the steps: the micro-batch.
  expect_sizes(resolved(R"({"train_batch_size": 24, "gradient_accumulation_steps": 3})", 2), 24, 4, 3);
  // The micro-batch and the steps: train_batch_size.
  expect_sizes(resolved(R"({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 5})", 3), 30, 2, 5);
  // train_batch_size alone: 1 step of train_batch_size / world size.
  expect_sizes(resolved(R"({"train_batch_size": 16})", 4), 16, 4, 1);
  // The micro-batch alone: 1 step.
  expect_sizes(resolved(R"({"train_micro_batch_size_per_gpu": 8})", 2), 16, 8, 1);
  // All three, consistent.
  expect_sizes(
      resolved(R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4})", 2),
      16, 2, 4);
}

TEST(config_batch_sizes, without_a_batch_size_the_steps_are_as_written) {
  // DeepSpeed refuses a configuration with neither batch size; zoe runs the steps written, or 1.
  const engine_config none = resolved("{}", 4);
  EXPECT_EQ(none.gradient_accumulation_steps, 1u);
  EXPECT_FALSE(none.batch.train_batch_size.has_value());
  EXPECT_EQ(resolved(R"({"gradient_accumulation_steps": 6})", 2).gradient_accumulation_steps, 6u);
  // A program's own configuration keeps the steps it set.
  engine_config set;
  set.gradient_accumulation_steps = 3;
  resolve_batch_sizes(set, 2);
  EXPECT_EQ(set.gradient_accumulation_steps, 3u);
}

TEST(config_batch_sizes, resolving_again_for_the_same_world_changes_nothing) {
  engine_config c = resolved(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4})", 2);
  resolve_batch_sizes(c, 2);
  expect_sizes(c, 32, 4, 4);
  EXPECT_THROW(resolve_batch_sizes(c, 3), config_error);
}

TEST(config_batch_sizes, a_triple_that_does_not_multiply_out_is_refused_naming_each_value) {
  EXPECT_THAT(
      error_of(R"({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2})", 2),
      HasSubstr("train_batch_size 32 is not train_micro_batch_size_per_gpu 4 x gradient_accumulation_steps 2 x "
                "world size 2 = 16"));
  // A derived value rounded down says so.
  EXPECT_THAT(error_of(R"({"train_batch_size": 30, "train_micro_batch_size_per_gpu": 4})", 1),
              HasSubstr("gradient_accumulation_steps derived as train_batch_size / train_micro_batch_size_per_gpu / "
                        "world size = 30 / 4 / 1 rounded down"));
  EXPECT_THAT(error_of(R"({"train_batch_size": 30, "gradient_accumulation_steps": 4})", 2),
              HasSubstr("train_micro_batch_size_per_gpu derived as"));
  EXPECT_THAT(error_of(R"({"train_batch_size": 6})", 4), HasSubstr("train_batch_size 6 is not"));
  // A derived 0.
  EXPECT_THAT(error_of(R"({"train_batch_size": 4, "train_micro_batch_size_per_gpu": 8})", 1),
              HasSubstr("gradient_accumulation_steps 0 must both be > 0"));
  EXPECT_THAT(error_of(R"({"train_batch_size": 2})", 4), HasSubstr("train_micro_batch_size_per_gpu 0"));
  // A product past 2^64 - 1.
  EXPECT_THAT(
      error_of(R"({"train_micro_batch_size_per_gpu": 4294967296, "gradient_accumulation_steps": 4294967296})", 2),
      HasSubstr("past 2^64 - 1"));
}

}  // namespace
}  // namespace zoe::engine
