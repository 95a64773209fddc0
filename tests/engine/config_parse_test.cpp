// Reading documents: defaults, syntax, types and ranges; every error names its key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <string_view>

#include "config_test_support.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine {
namespace {

using ::testing::AllOf;
using testing::config_error_of;
using testing::entry_of;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(config_defaults, empty_document_takes_deepspeeds_defaults) {
  const loaded_config c = parse_config("{}");
  EXPECT_EQ(c.config.zero.stage, 0);
  EXPECT_FALSE(c.config.zero.overlap_comm);
  EXPECT_EQ(c.config.zero.reduce_bucket_size, 500'000'000u);
  EXPECT_EQ(c.config.zero.sub_group_size, 1'000'000'000u);
  EXPECT_EQ(c.config.zero.prefetch_bucket_size, 50'000'000u);
  EXPECT_EQ(c.config.zero.param_persistence_threshold, 100'000u);
  EXPECT_EQ(c.config.zero.model_persistence_threshold,
            static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()));
  EXPECT_FALSE(c.config.zero.offload_param.has_value());
  EXPECT_FALSE(c.config.zero.offload_optimizer.has_value());
  EXPECT_FALSE(c.config.optimizer.has_value());
  EXPECT_EQ(c.config.aio.block_size, 1'048'576u);
  EXPECT_EQ(c.config.aio.queue_depth, 8u);
  EXPECT_DOUBLE_EQ(c.config.gradient_clipping, 1.0);
  EXPECT_EQ(c.config.gradient_accumulation_steps, 1u);
  EXPECT_TRUE(c.warnings.empty());
  for (const config_entry& e : c.entries) EXPECT_EQ(e.source, config_source::default_value) << e.key;
  // Absent offload blocks list DeepSpeed's defaults, pinned memory included.
  ASSERT_NE(entry_of(c, "zero_optimization.offload_param.pin_memory"), nullptr);
  EXPECT_EQ(entry_of(c, "zero_optimization.offload_param.pin_memory")->value, "true");
  EXPECT_EQ(entry_of(c, "zero_optimization.offload_optimizer.pin_memory")->value, "true");
  EXPECT_EQ(entry_of(c, "zero_optimization.offload_param.max_in_cpu")->value, "1000000000");
  EXPECT_EQ(entry_of(c, "zero_optimization.offload_param.nvme_path")->value, "null");
  EXPECT_EQ(entry_of(c, "zoe.placement.exp_avg_sq")->value, "null");
}

TEST(config_defaults, overlap_comm_follows_the_stage_unless_given) {
  EXPECT_TRUE(parse_config(R"({"zero_optimization": {"stage": 3}})").config.zero.overlap_comm);
  EXPECT_FALSE(parse_config(R"({"zero_optimization": {"stage": 2}})").config.zero.overlap_comm);
  EXPECT_FALSE(parse_config(R"({"zero_optimization": {"stage": 3, "overlap_comm": false}})").config.zero.overlap_comm);
}

TEST(config_defaults, entries_name_the_source_of_each_value) {
  const loaded_config c = parse_config(R"({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}})");
  EXPECT_EQ(entry_of(c, "zero_optimization.stage")->source, config_source::file);
  EXPECT_EQ(entry_of(c, "zero_optimization.stage")->value, "3");
  EXPECT_EQ(entry_of(c, "zero_optimization.reduce_bucket_size")->source, config_source::auto_value);
  EXPECT_EQ(entry_of(c, "zero_optimization.sub_group_size")->source, config_source::default_value);
}

TEST(config_syntax, a_syntax_error_names_line_column_and_key) {
  const std::string message = config_error_of("{\n  \"zero_optimization\": {\n    \"stage\": 3,,\n  }\n}");
  EXPECT_THAT(message, AllOf(HasSubstr("<config>:3:16"), HasSubstr("zero_optimization")));
}

TEST(config_syntax, a_duplicate_key_is_an_error_naming_it) {
  EXPECT_THAT(config_error_of(R"({"zero_optimization": {"stage": 1, "stage": 3}})"),
              HasSubstr("zero_optimization.stage: duplicate key"));
  EXPECT_THAT(config_error_of(R"({"aio": {}, "aio": {}})"), HasSubstr("aio: duplicate key"));
}

TEST(config_syntax, the_same_key_in_different_objects_is_not_a_duplicate) {
  const loaded_config c = parse_config(
      R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"}}})");
  EXPECT_EQ(c.config.zero.offload_param->device, offload_device::cpu);
  EXPECT_EQ(c.config.zero.offload_optimizer->device, offload_device::cpu);
}

TEST(config_syntax, nan_and_infinity_are_errors_naming_the_key) {
  EXPECT_THAT(config_error_of(R"({"gradient_clipping": NaN})"),
              AllOf(HasSubstr("gradient_clipping"), HasSubstr("NaN")));
  EXPECT_THAT(config_error_of(R"({"fp16": {"loss_scale": Infinity}})"),
              AllOf(HasSubstr("fp16.loss_scale"), HasSubstr("Infinity")));
  EXPECT_THAT(config_error_of(R"({"fp16": {"loss_scale": -Infinity}})"),
              AllOf(HasSubstr("fp16.loss_scale"), HasSubstr("-Infinity")));
}

TEST(config_syntax, a_number_beyond_double_is_out_of_range) {
  EXPECT_THAT(config_error_of(R"({"zero_optimization": {"sub_group_size": 1e400}})"),
              AllOf(HasSubstr("zero_optimization.sub_group_size"), HasSubstr("out of range")));
}

TEST(config_syntax, a_deeply_nested_value_is_an_error_naming_its_key) {
  // Copying or printing a tree recurses once per level: a hostile file must not overflow the stack,
  // under a key zoe ignores, an unknown key, or one whose type is wrong.
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  for (const std::string key : {"steps_per_print", "steps_pre_print", "gradient_clipping"}) {
    EXPECT_THAT(config_error_of(str("{\"", key, "\": ", deep, "}")),
                AllOf(HasSubstr(str(key, "[0][0]")), HasSubstr("nested deeper than")));
  }
  EXPECT_THAT(config_error_of(str(R"({"zoe": {"placement": {"master": )", deep, "}}}")),
              HasSubstr("zoe.placement.master[0]"));
  // A real configuration is a few levels deep; 32 levels still load.
  const loaded_config c = parse_config(str(R"({"steps_per_print": )", std::string(32, '['), std::string(32, ']'), "}"));
  EXPECT_THAT(c.warnings, IsEmpty());
}

TEST(config_syntax, the_document_must_be_an_object) {
  EXPECT_THAT(config_error_of("[1, 2]"), HasSubstr("expected an object"));
}

TEST(config_types, integral_floats_are_integers) {
  const loaded_config c = parse_config(R"({"zero_optimization": {"sub_group_size": 1e9, "stage": 3.0}})");
  EXPECT_EQ(c.config.zero.sub_group_size, 1'000'000'000u);
  EXPECT_EQ(c.config.zero.stage, 3);
}

TEST(config_types, a_fraction_where_an_integer_belongs_is_an_error) {
  EXPECT_THAT(config_error_of(R"({"zero_optimization": {"sub_group_size": 1.5}})"),
              AllOf(HasSubstr("zero_optimization.sub_group_size"), HasSubstr("not integral")));
}

TEST(config_types, integers_out_of_their_range_name_key_and_range) {
  EXPECT_THAT(config_error_of(R"({"zero_optimization": {"stage3_max_live_parameters": -1}})"),
              AllOf(HasSubstr("zero_optimization.stage3_max_live_parameters"), HasSubstr("[0, ")));
  EXPECT_THAT(config_error_of(R"({"zero_optimization": {"stage3_max_reuse_distance": 1e20}})"),
              AllOf(HasSubstr("zero_optimization.stage3_max_reuse_distance"), HasSubstr("out of range")));
  EXPECT_THAT(config_error_of(R"({"zero_optimization": {"stage": 4}})"),
              AllOf(HasSubstr("zero_optimization.stage"), HasSubstr("[0, 3]")));
  EXPECT_THAT(config_error_of(R"({"gradient_accumulation_steps": 0})"),
              AllOf(HasSubstr("gradient_accumulation_steps"), HasSubstr("[1, ")));
  EXPECT_THAT(config_error_of(R"({"aio": {"queue_depth": 0}})"), HasSubstr("aio.queue_depth"));
}

TEST(config_types, a_string_where_a_number_belongs_is_an_error) {
  EXPECT_THAT(config_error_of(R"({"zero_optimization": {"reduce_bucket_size": "500000000"}})"),
              AllOf(HasSubstr("zero_optimization.reduce_bucket_size"), HasSubstr("(a string)")));
  EXPECT_THAT(config_error_of(R"({"aio": {"single_submit": 1}})"),
              AllOf(HasSubstr("aio.single_submit"), HasSubstr("true or false")));
  EXPECT_THAT(config_error_of(R"({"zero_optimization": {"offload_param": []}})"),
              AllOf(HasSubstr("zero_optimization.offload_param"), HasSubstr("expected an object")));
}

TEST(config_types, an_unknown_device_names_the_allowed_ones) {
  EXPECT_THAT(config_error_of(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "ssd"}}})"),
              AllOf(HasSubstr("zero_optimization.offload_param.device"), HasSubstr("none, cpu, nvme")));
}

TEST(config_checks, fp16_and_bf16_together_are_refused) {
  EXPECT_THAT(config_error_of(R"({"fp16": {"enabled": true}, "bf16": {"enabled": true}})"),
              AllOf(HasSubstr("fp16.enabled"), HasSubstr("bf16.enabled")));
}

TEST(config_checks, nvme_without_nvme_path_is_refused) {
  EXPECT_THAT(config_error_of(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme"}}})"),
              AllOf(HasSubstr("zero_optimization.offload_optimizer.nvme_path"), HasSubstr("device is nvme")));
  EXPECT_THAT(config_error_of(R"({"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}})"),
              HasSubstr("zero_optimization.offload_param.nvme_path"));
}

TEST(config_checks, ratio_must_lie_in_0_1_and_below_1_needs_stage_3) {
  EXPECT_THAT(config_error_of(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"ratio": 1.5}}})"),
              AllOf(HasSubstr("zero_optimization.offload_optimizer.ratio"), HasSubstr("[0, 1]")));
  EXPECT_THAT(config_error_of(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"ratio": 0.5}}})"),
              AllOf(HasSubstr("zero_optimization.offload_optimizer.ratio"), HasSubstr("stage 3")));
  const loaded_config c =
      parse_config(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})");
  EXPECT_DOUBLE_EQ(c.config.zero.offload_optimizer->ratio, 0.3);
}

TEST(config_checks, offload_param_below_stage_3_is_ignored_with_a_warning) {
  const loaded_config c = parse_config(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}})");
  EXPECT_FALSE(c.config.zero.offload_param.has_value());
  const config_diagnostic* w = testing::warning_about(c, "zero_optimization.offload_param");
  ASSERT_NE(w, nullptr);
  EXPECT_THAT(w->message, AllOf(HasSubstr("ignored below stage 3"), HasSubstr("zero_optimization.stage is 2")));
}

// DeepSpeed has no ZeRO optimizer at stage 0 to move the optimizer states (it documents
// offload_optimizer for stages 1-3): zoe keeps them on the device there, and says so.
TEST(config_checks, offload_optimizer_at_stage_0_is_ignored_with_a_warning) {
  const loaded_config c =
      parse_config(R"({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu", "ratio": 0.5}}})");
  EXPECT_FALSE(c.config.zero.offload_optimizer.has_value());
  const config_diagnostic* w = testing::warning_about(c, "zero_optimization.offload_optimizer");
  ASSERT_NE(w, nullptr);
  EXPECT_THAT(w->message, AllOf(HasSubstr("ignored at stage 0"), HasSubstr("zero_optimization.stage 1")));
  EXPECT_TRUE(parse_config(R"({"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu"}}})")
                  .config.zero.offload_optimizer.has_value());
}

TEST(config_checks, dynamic_loss_scaling_needs_a_positive_window_and_minimum) {
  EXPECT_THAT(config_error_of(R"({"fp16": {"enabled": true, "loss_scale_window": 0}})"),
              HasSubstr("fp16.loss_scale_window"));
  EXPECT_THAT(config_error_of(R"({"fp16": {"enabled": true, "min_loss_scale": 0}})"), HasSubstr("fp16.min_loss_scale"));
  // A static scale does not use them, as in DeepSpeed.
  const loaded_config c = parse_config(R"({"fp16": {"enabled": true, "loss_scale": 128, "loss_scale_window": 0}})");
  EXPECT_DOUBLE_EQ(c.config.fp16.loss_scale, 128);
  EXPECT_THAT(config_error_of(R"({"fp16": {"loss_scale": -1}})"), HasSubstr("fp16.loss_scale"));
  EXPECT_THAT(config_error_of(R"({"fp16": {"min_loss_scale": 0.5}})"),
              AllOf(HasSubstr("fp16.min_loss_scale"), HasSubstr("not integral")));
}

// Every loss-scale key is checked when the document is read, naming the key: the scale reaches
// the kernels and the caller's loss as a float, so 2^initial_scale_power and a static loss_scale
// must be finite floats (with finite reciprocals), and a dynamic scale's minimum cannot lie above
// where it starts.
TEST(config_checks, loss_scale_keys_are_checked_against_the_float_range) {
  EXPECT_THAT(config_error_of(R"({"fp16": {"enabled": true, "initial_scale_power": 128}})"),
              AllOf(HasSubstr("fp16.initial_scale_power"), HasSubstr("[0, 127]"), HasSubstr("128")));
  EXPECT_THAT(config_error_of(R"({"fp16": {"initial_scale_power": 1023}})"), HasSubstr("fp16.initial_scale_power"));
  EXPECT_THAT(config_error_of(R"({"fp16": {"initial_scale_power": -1}})"), HasSubstr("fp16.initial_scale_power"));
  EXPECT_EQ(parse_config(R"({"fp16": {"enabled": true, "initial_scale_power": 127}})").config.fp16.initial_scale_power,
            127);
  EXPECT_THAT(config_error_of(R"({"fp16": {"enabled": true, "loss_scale": 1e39}})"), HasSubstr("fp16.loss_scale"));
  EXPECT_THAT(config_error_of(R"({"fp16": {"enabled": true, "loss_scale": 1e-39}})"), HasSubstr("fp16.loss_scale"));
  EXPECT_DOUBLE_EQ(parse_config(R"({"fp16": {"enabled": true, "loss_scale": 0.5}})").config.fp16.loss_scale, 0.5);
  EXPECT_THAT(config_error_of(R"({"fp16": {"enabled": true, "hysteresis": 0}})"),
              AllOf(HasSubstr("fp16.hysteresis"), HasSubstr(">= 1")));
  EXPECT_THAT(config_error_of(R"({"fp16": {"enabled": true, "initial_scale_power": 2, "min_loss_scale": 8}})"),
              AllOf(HasSubstr("fp16.min_loss_scale"), HasSubstr("fp16.initial_scale_power")));
  // A static scale uses neither hysteresis nor the minimum, as in DeepSpeed.
  EXPECT_EQ(parse_config(R"({"fp16": {"enabled": true, "loss_scale": 4, "hysteresis": 0, "min_loss_scale": 8}})")
                .config.fp16.hysteresis,
            0);
}

TEST(config_optimizer, adam_params_are_read_and_checked) {
  const loaded_config c = parse_config(
      R"({"optimizer": {"type": "Adam", "params": {"lr": 1e-4, "betas": [0.8, 0.9], "eps": 1e-6, "weight_decay": 0.1, "adam_w_mode": false}}})");
  ASSERT_TRUE(c.config.optimizer.has_value());
  EXPECT_DOUBLE_EQ(c.config.optimizer->lr, 1e-4);
  EXPECT_DOUBLE_EQ(c.config.optimizer->betas[0], 0.8);
  EXPECT_DOUBLE_EQ(c.config.optimizer->betas[1], 0.9);
  EXPECT_DOUBLE_EQ(c.config.optimizer->eps, 1e-6);
  EXPECT_FALSE(c.config.optimizer->adam_w_mode);
  EXPECT_TRUE(c.config.optimizer->bias_correction);
}

TEST(config_optimizer, adamw_is_always_decoupled) {
  const loaded_config c = parse_config(R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})");
  EXPECT_TRUE(c.config.optimizer->adam_w_mode);
}

TEST(config_optimizer, bad_optimizer_values_name_their_key) {
  EXPECT_THAT(config_error_of(R"({"optimizer": {"type": "Lamb"}})"),
              AllOf(HasSubstr("optimizer.type"), HasSubstr("Adam or AdamW")));
  EXPECT_THAT(config_error_of(R"({"optimizer": {"type": "Adam", "params": {"betas": [1.0, 0.9]}}})"),
              HasSubstr("optimizer.params.betas[0]"));
  EXPECT_THAT(config_error_of(R"({"optimizer": {"type": "Adam", "params": {"betas": [0.9]}}})"),
              HasSubstr("optimizer.params.betas"));
  EXPECT_THAT(config_error_of(R"({"optimizer": {"type": "Adam", "params": {"lr": -1}}})"),
              HasSubstr("optimizer.params.lr"));
  EXPECT_THAT(config_error_of(R"({"optimizer": {"type": "Adam", "params": {"max_grad_norm": 1.0}}})"),
              AllOf(HasSubstr("optimizer.params.max_grad_norm"), HasSubstr("gradient_clipping")));
}

// The Adam kernel runs in float: a value that a double holds and a float does not (beyond its
// range, or rounding to 0 or to 1 there) would build an engine whose every step fails.
TEST(config_optimizer, adam_values_must_survive_the_cast_to_float) {
  const auto params = [](const std::string& p) {
    return config_error_of(str(R"({"optimizer": {"type": "Adam", "params": {)", p, "}}}"));
  };
  EXPECT_THAT(params(R"("eps": 0)"), AllOf(HasSubstr("optimizer.params.eps"), HasSubstr("float")));
  EXPECT_THAT(params(R"("eps": 1e-46)"), HasSubstr("optimizer.params.eps"));
  EXPECT_THAT(params(R"("eps": 1e39)"), HasSubstr("optimizer.params.eps"));
  EXPECT_THAT(params(R"("weight_decay": 1e39)"), AllOf(HasSubstr("optimizer.params.weight_decay"), HasSubstr("float")));
  EXPECT_THAT(params(R"("lr": 1e39)"), HasSubstr("optimizer.params.lr"));
  EXPECT_THAT(params(R"("betas": [0.9, 0.99999999])"),
              AllOf(HasSubstr("optimizer.params.betas[1]"), HasSubstr("float")));
  const loaded_config c = parse_config(
      R"({"optimizer": {"type": "Adam", "params": {"eps": 1.5e-45, "betas": [0, 0.99999994], "lr": 3e38}}})");
  EXPECT_DOUBLE_EQ(c.config.optimizer->eps, 1.5e-45);
  EXPECT_DOUBLE_EQ(c.config.optimizer->betas[1], 0.99999994);
}

// The overrides (zoe_engine_desc.config_overrides) are a document of their own, read as strictly
// as the configuration, and merged over it as an RFC 7386 merge patch.
std::string overrides_error_of(std::string_view text, std::string_view overrides) {
  try {
    (void)parse_config_with_overrides(text, "base.json", overrides, "overrides");
  } catch (const config_error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a config_error for " << text << " with " << overrides;
  return {};
}

TEST(config_overrides, merge_key_by_key_and_null_removes) {
  const loaded_config c = parse_config_with_overrides(
      R"({"zero_optimization": {"stage": 3, "sub_group_size": 5}, "gradient_clipping": 0.5})", "base.json",
      R"({"zero_optimization": {"stage": 2}, "gradient_clipping": null})", "overrides");
  EXPECT_EQ(c.config.zero.stage, 2);
  EXPECT_EQ(c.config.zero.sub_group_size, 5u);
  EXPECT_DOUBLE_EQ(c.config.gradient_clipping, 1.0);
  EXPECT_EQ(entry_of(c, "gradient_clipping")->source, config_source::default_value);
}

TEST(config_overrides, each_document_is_read_strictly_and_its_errors_name_it) {
  EXPECT_THAT(overrides_error_of("{}", R"({"gradient_clipping": 1, "gradient_clipping": 2})"),
              HasSubstr("overrides: gradient_clipping: duplicate key"));
  EXPECT_THAT(overrides_error_of(R"({"aio": {}, "aio": {}})", "{}"), HasSubstr("base.json: aio: duplicate key"));
  EXPECT_THAT(overrides_error_of("{}", "{\n  \"aio\": }"), HasSubstr("overrides:2:10: in aio:"));
  EXPECT_THAT(overrides_error_of("{}", "[1]"), HasSubstr("overrides: the top level: expected an object"));
  EXPECT_THAT(overrides_error_of("[1]", "{}"), HasSubstr("base.json: the top level: expected an object"));
  std::string deep;
  for (int i = 0; i < 100; ++i) deep += R"({"a": )";
  deep += "1" + std::string(100, '}');
  EXPECT_THAT(overrides_error_of(deep, "{}"), AllOf(HasSubstr("base.json: "), HasSubstr("nested deeper than 64")));
  EXPECT_THAT(overrides_error_of("{}", deep), AllOf(HasSubstr("overrides: "), HasSubstr("nested deeper than 64")));
  // A value wrong only once merged names both documents.
  EXPECT_THAT(overrides_error_of(R"({"zero_optimization": {"stage": 3}})", R"({"zero_optimization": {"stage": 7}})"),
              HasSubstr("base.json with overrides: zero_optimization.stage"));
}

TEST(config_file, a_missing_file_names_its_path) {
  try {
    (void)load_config_file("/nonexistent/zoe/ds_config.json");
    FAIL() << "expected a config_error";
  } catch (const config_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/zoe/ds_config.json"));
  }
}

TEST(config_comm, defaults_and_given_values) {
  const loaded_config d = parse_config("{}");
  EXPECT_EQ(d.config.zoe.comm.backend, "auto");
  EXPECT_DOUBLE_EQ(d.config.zoe.comm.timeout_s, 300.0);
  EXPECT_EQ(d.config.zoe.ranks_per_node, 0u);
  const loaded_config c =
      parse_config(R"({"zoe": {"comm": {"backend": "mpi", "timeout_s": 2.5}, "ranks_per_node": 2}})");
  EXPECT_EQ(c.config.zoe.comm.backend, "mpi");
  EXPECT_DOUBLE_EQ(c.config.zoe.comm.timeout_s, 2.5);
  EXPECT_EQ(c.config.zoe.ranks_per_node, 2u);
  EXPECT_EQ(entry_of(c, "zoe.comm.backend")->source, config_source::file);
  EXPECT_EQ(entry_of(c, "zoe.ranks_per_node")->value, "2");
}

TEST(config_comm, bad_values_name_their_key) {
  EXPECT_THAT(config_error_of(R"({"zoe": {"comm": {"backend": "gloo"}}})"),
              AllOf(HasSubstr("zoe.comm.backend"), HasSubstr("auto, single, mpi, nccl")));
  EXPECT_THAT(config_error_of(R"({"zoe": {"comm": {"timeout_s": 0}}})"),
              AllOf(HasSubstr("zoe.comm.timeout_s"), HasSubstr("> 0")));
  EXPECT_THAT(config_error_of(R"({"zoe": {"comm": {"timeout_s": -1}}})"), HasSubstr("zoe.comm.timeout_s"));
  EXPECT_THAT(config_error_of(R"({"zoe": {"ranks_per_node": -2}})"), HasSubstr("zoe.ranks_per_node"));
}

}  // namespace
}  // namespace zoe::engine
