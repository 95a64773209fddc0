// Deprecated names, DeepSpeed's keys zoe ignores, unknown keys, "auto", and the zoe block.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "config_test_support.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine {
namespace {

using ::testing::AllOf;
using testing::config_error_of;
using testing::entry_of;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::warning_about;

TEST(config_deprecated, old_names_apply_with_a_warning_naming_the_current_one) {
  const loaded_config c = parse_config(R"({"zero_optimization": {"stage": 3, "prefetch_bucket_size": 2e7,
      "param_persistence_threshold": 7, "model_persistence_threshold": 8, "max_live_parameters": 9,
      "max_reuse_distance": 10, "stage3_gather_fp16_weights_on_model_save": true}})");
  EXPECT_EQ(c.config.zero.prefetch_bucket_size, 20'000'000u);
  EXPECT_EQ(c.config.zero.param_persistence_threshold, 7u);
  EXPECT_EQ(c.config.zero.model_persistence_threshold, 8u);
  EXPECT_EQ(c.config.zero.max_live_parameters, 9u);
  EXPECT_EQ(c.config.zero.max_reuse_distance, 10u);
  EXPECT_TRUE(c.config.zero.gather_16bit_weights_on_model_save);
  const config_diagnostic* w = warning_about(c, "zero_optimization.prefetch_bucket_size");
  ASSERT_NE(w, nullptr);
  EXPECT_THAT(w->message, HasSubstr("use zero_optimization.stage3_prefetch_bucket_size"));
  w = warning_about(c, "zero_optimization.stage3_gather_fp16_weights_on_model_save");
  ASSERT_NE(w, nullptr);
  EXPECT_THAT(w->message, HasSubstr("use zero_optimization.stage3_gather_16bit_weights_on_model_save"));
  // The entries carry the current names only, with the file as their source.
  EXPECT_EQ(entry_of(c, "zero_optimization.stage3_prefetch_bucket_size")->source, config_source::file);
  EXPECT_EQ(entry_of(c, "zero_optimization.prefetch_bucket_size"), nullptr);
}

TEST(config_deprecated, cpu_offload_flags_become_offload_blocks) {
  const loaded_config c =
      parse_config(R"({"zero_optimization": {"stage": 3, "cpu_offload": true, "cpu_offload_param": true}})");
  ASSERT_TRUE(c.config.zero.offload_optimizer.has_value());
  EXPECT_EQ(c.config.zero.offload_optimizer->device, offload_device::cpu);
  ASSERT_TRUE(c.config.zero.offload_param.has_value());
  EXPECT_EQ(c.config.zero.offload_param->device, offload_device::cpu);
  EXPECT_THAT(warning_about(c, "zero_optimization.cpu_offload")->message,
              HasSubstr("zero_optimization.offload_optimizer"));
  EXPECT_THAT(warning_about(c, "zero_optimization.cpu_offload_param")->message,
              HasSubstr("zero_optimization.offload_param"));
  EXPECT_EQ(entry_of(c, "zero_optimization.offload_optimizer.device")->value, "\"cpu\"");
  EXPECT_FALSE(parse_config(R"({"zero_optimization": {"cpu_offload": false}})").config.zero.offload_optimizer);
}

TEST(config_deprecated, cpu_offload_use_pin_memory_only_warns) {
  const loaded_config c = parse_config(R"({"zero_optimization": {"cpu_offload_use_pin_memory": false}})");
  EXPECT_THAT(warning_about(c, "zero_optimization.cpu_offload_use_pin_memory")->message, HasSubstr("not applied"));
  EXPECT_FALSE(c.config.zero.offload_param.has_value());
}

TEST(config_deprecated, legacy_bfloat16_is_read_as_bf16) {
  const loaded_config c = parse_config(R"({"bfloat16": {"enabled": true}})");
  EXPECT_TRUE(c.config.bf16.enabled);
  EXPECT_THAT(warning_about(c, "bfloat16")->message, HasSubstr("use bf16"));
  EXPECT_EQ(entry_of(c, "bf16.enabled")->source, config_source::file);
}

TEST(config_deprecated, legacy_boolean_zero_optimization_means_stage_1) {
  const loaded_config c = parse_config(R"({"zero_optimization": true})");
  EXPECT_EQ(c.config.zero.stage, 1);
  EXPECT_NE(warning_about(c, "zero_optimization"), nullptr);
}

TEST(config_deprecated, legacy_boolean_zero_optimization_takes_allgather_size) {
  // DeepSpeed's read_zero_config_deprecated: with the boolean form, the top-level allgather_size
  // (default 5e8) is the allgather_bucket_size; with the object form it is not read at all.
  const loaded_config legacy = parse_config(R"({"zero_optimization": true, "allgather_size": 2e8})");
  EXPECT_EQ(legacy.config.zero.allgather_bucket_size, 200'000'000u);
  EXPECT_EQ(entry_of(legacy, "zero_optimization.allgather_bucket_size")->source, config_source::file);
  EXPECT_EQ(parse_config(R"({"zero_optimization": false, "allgather_size": 2e8})").config.zero.allgather_bucket_size,
            500'000'000u);
  const loaded_config modern = parse_config(R"({"zero_optimization": {"stage": 1}, "allgather_size": 2e8})");
  EXPECT_EQ(modern.config.zero.allgather_bucket_size, 500'000'000u);
  EXPECT_TRUE(modern.warnings.empty()) << "a key DeepSpeed knows, ignored quietly";
  EXPECT_EQ(entry_of(modern, "allgather_size"), nullptr) << "not a key zoe lists";
  EXPECT_TRUE(parse_config(R"({"allgather_size": "auto"})").warnings.empty()) << "unread, so unchecked";
  EXPECT_THAT(config_error_of(R"({"zero_optimization": true, "allgather_size": -1})"),
              AllOf(HasSubstr("<config>: allgather_size: expected an integer"), HasSubstr("-1")));
}

TEST(config_deprecated, two_spellings_of_one_key_are_an_error) {
  EXPECT_THAT(
      config_error_of(R"({"zero_optimization": {"stage3_prefetch_bucket_size": 1, "prefetch_bucket_size": 2}})"),
      AllOf(HasSubstr("zero_optimization.stage3_prefetch_bucket_size"),
            HasSubstr("zero_optimization.prefetch_bucket_size"), HasSubstr("two spellings")));
  EXPECT_THAT(config_error_of(R"({"zero_optimization": {"offload_optimizer": {}, "cpu_offload": true}})"),
              AllOf(HasSubstr("zero_optimization.cpu_offload"), HasSubstr("zero_optimization.offload_optimizer")));
  EXPECT_THAT(config_error_of(R"({"bf16": {}, "bfloat16": {}})"),
              AllOf(HasSubstr("bfloat16"), HasSubstr("two spellings")));
  EXPECT_THAT(config_error_of(R"({"aio": {"thread_count": 2, "intra_op_parallelism": 4}})"),
              AllOf(HasSubstr("aio.thread_count"), HasSubstr("aio.intra_op_parallelism")));
}

TEST(config_deprecated, aio_thread_count_is_read_as_intra_op_parallelism) {
  const loaded_config c = parse_config(R"({"aio": {"thread_count": 4}})");
  EXPECT_EQ(c.config.aio.intra_op_parallelism, 4u);
  const config_diagnostic* w = warning_about(c, "aio.thread_count");
  ASSERT_NE(w, nullptr);
  EXPECT_THAT(w->message, HasSubstr("aio.intra_op_parallelism"));
}

TEST(config_known_keys, deepspeeds_keys_zoe_ignores_are_quiet) {
  const loaded_config c = parse_config(R"({"managed_gradient_accumulation": false,
      "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": "auto", "anything": 1}},
      "wandb": {"enabled": false}, "tensorboard": {"enabled": false}, "steps_per_print": 10,
      "wall_clock_breakdown": false, "activation_checkpointing": {}, "flops_profiler": {}, "comms_logger": {},
      "zero_allow_untested_optimizer": true,
      "zero_optimization": {"stage": 3, "round_robin_gradients": false, "stage3_module_granularity_threshold": 0,
                            "offload_optimizer": {"device": "cpu", "super_offload": false}},
      "bf16": {"enabled": true, "immediate_grad_update": true}, "fp16": {"fp16_master_weights_and_grads": false},
      "optimizer": {"type": "AdamW", "params": {"torch_adam": false}}})");
  EXPECT_TRUE(c.warnings.empty()) << c.warnings.front().key << ": " << c.warnings.front().message;
  EXPECT_TRUE(c.config.bf16.enabled);
}

TEST(config_unknown_keys, an_unknown_key_at_any_level_names_the_nearest_known_one) {
  struct probe {
    const char* text;
    const char* key;
    const char* nearest;
  };
  const probe probes[] = {
      {R"({"zero_optimisation": {"stage": 3}})", "zero_optimisation", "zero_optimization"},
      {R"({"zero_optimization": {"stage3_prefetch_bucket_sise": 1}})", "zero_optimization.stage3_prefetch_bucket_sise",
       "zero_optimization.stage3_prefetch_bucket_size"},
      {R"({"zero_optimization": {"offload_param": {"max_in_cpus": 1}}})", "zero_optimization.offload_param.max_in_cpus",
       "zero_optimization.offload_param.max_in_cpu"},
      {R"({"aio": {"queue_dept": 4}})", "aio.queue_dept", "aio.queue_depth"},
      {R"({"optimizer": {"params": {"weight_decy": 0.1}}})", "optimizer.params.weight_decy",
       "optimizer.params.weight_decay"},
      {R"({"zoe": {"swap": {"checksum": false}}})", "zoe.swap.checksum", "zoe.swap.checksums"},
      {R"({"zoe": {"placement": {"exp_avg_sqr": {"host": 1}}}})", "zoe.placement.exp_avg_sqr",
       "zoe.placement.exp_avg_sq"},
      // Nearest to a deprecated spelling: the current name is suggested, not one that warns again.
      {R"({"zero_optimization": {"max_live_param": 1}})", "zero_optimization.max_live_param",
       "zero_optimization.stage3_max_live_parameters"},
      {R"({"aio": {"thread_cont": 2}})", "aio.thread_cont", "aio.intra_op_parallelism"},
      {R"({"bfloat": {"enabled": true}})", "bfloat", "bf16"},
  };
  for (const probe& p : probes) {
    const loaded_config c = parse_config(p.text);
    const config_diagnostic* w = warning_about(c, p.key);
    ASSERT_NE(w, nullptr) << p.text;
    EXPECT_THAT(w->message, AllOf(HasSubstr(p.key), HasSubstr("nearest known key is " + std::string(p.nearest))))
        << p.text;
  }
}

TEST(config_unknown_keys, an_unknown_keys_value_is_not_applied) {
  const loaded_config c = parse_config(R"({"zero_optimisation": {"stage": 3}, "zoe": {"swap": {"checksum": false}}})");
  EXPECT_EQ(c.config.zero.stage, 0);
  EXPECT_TRUE(c.config.zoe.checksums);
}

TEST(config_auto, auto_under_zero_fp16_bf16_takes_deepspeeds_default_in_one_line) {
  const loaded_config c = parse_config(R"({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto", "offload_param": {"buffer_count": "auto"}},
      "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"}})");
  EXPECT_EQ(c.config.zero.reduce_bucket_size, 500'000'000u);
  EXPECT_EQ(c.config.zero.prefetch_bucket_size, 50'000'000u);
  EXPECT_EQ(c.config.zero.offload_param->buffer_count, 5u);
  EXPECT_FALSE(c.config.fp16.enabled);
  ASSERT_EQ(c.warnings.size(), 1u);
  for (const char* key : {"zero_optimization.reduce_bucket_size", "zero_optimization.stage3_prefetch_bucket_size",
                          "zero_optimization.offload_param.buffer_count", "fp16.enabled", "bf16.enabled"}) {
    EXPECT_THAT(c.warnings[0].message, HasSubstr(key));
    EXPECT_EQ(entry_of(c, key)->source, config_source::auto_value) << key;
  }
}

TEST(config_auto, auto_for_an_offload_block_names_the_defaults_it_resolved_to) {
  // DeepSpeed drops "offload_param": "auto", leaving no block; the one line says what that means.
  const loaded_config c = parse_config(R"({"zero_optimization": {"stage": 3, "offload_param": "auto"}})");
  EXPECT_FALSE(c.config.zero.offload_param.has_value());
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_THAT(c.warnings[0].message, AllOf(HasSubstr(R"(zero_optimization.offload_param.device="none")"),
                                           HasSubstr("zero_optimization.offload_param.buffer_count=5")));
}

TEST(config_auto, auto_only_hugging_face_resolves_is_an_error_naming_each_key) {
  const std::string message = config_error_of(R"({"gradient_clipping": "auto", "gradient_accumulation_steps": "auto",
      "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto", "weight_decay": "auto"}}})");
  for (const char* key : {"gradient_clipping", "gradient_accumulation_steps", "optimizer.params.lr",
                          "optimizer.params.betas", "optimizer.params.eps", "optimizer.params.weight_decay"}) {
    EXPECT_THAT(message, HasSubstr(key));
  }
  EXPECT_THAT(message, HasSubstr("write a number"));
}

TEST(config_auto, auto_where_zoe_expects_a_value_is_a_type_error) {
  EXPECT_THAT(config_error_of(R"({"aio": {"block_size": "auto"}})"),
              AllOf(HasSubstr("aio.block_size"), HasSubstr("(a string)")));
  // A whole block is no number Hugging Face fills in: "write a number" would be wrong advice.
  for (const char* block : {"zero_optimization", "optimizer", "fp16", "zoe"}) {
    const std::string message = config_error_of(str(R"({")", block, R"(": "auto"})"));
    EXPECT_THAT(message, AllOf(HasSubstr(str(block, ": expected an object")), HasSubstr("(a string)")));
    EXPECT_THAT(message, Not(HasSubstr("write a number")));
  }
}

TEST(config_zoe_block, every_zoe_key_is_read) {
  const loaded_config c = parse_config(R"({
    "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme", "nvme_path": "/nvme0"}},
    "zoe": {"device": {"kind": "host", "budget_bytes": 4e9},
            "swap": {"checksums": false, "engine": "uring", "extra_paths": ["/nvme1", "/nvme2"]},
            "numa": "interleave",
            "placement": {"exp_avg_sq": {"host": 0.3, "nvme": 0.7}, "working": {"device": 1}}}})");
  const zoe_settings& z = c.config.zoe;
  EXPECT_EQ(z.device_kind, "host");
  EXPECT_EQ(z.device_budget, 4'000'000'000u);
  EXPECT_FALSE(z.checksums);
  EXPECT_EQ(z.io_engine, "uring");
  ASSERT_EQ(z.extra_swap_paths.size(), 2u);
  EXPECT_EQ(z.extra_swap_paths[1], "/nvme2");
  EXPECT_EQ(z.numa_policy, "interleave");
  const auto& sq = z.placement[static_cast<std::size_t>(state_kind::exp_avg_sq)];
  ASSERT_TRUE(sq.has_value());
  EXPECT_DOUBLE_EQ(sq->host, 0.3);
  EXPECT_DOUBLE_EQ(sq->nvme, 0.7);
  EXPECT_DOUBLE_EQ(sq->device, 0.0);
  EXPECT_FALSE(z.placement[static_cast<std::size_t>(state_kind::master)].has_value());
  EXPECT_EQ(entry_of(c, "zoe.placement.exp_avg_sq.nvme")->value, "0.7");
  EXPECT_EQ(entry_of(c, "zoe.placement.master")->value, "null");
  EXPECT_TRUE(c.warnings.empty());
}

TEST(config_zoe_block, bad_zoe_values_name_their_key) {
  EXPECT_THAT(config_error_of(R"({"zoe": {"placement": {"exp_avg": {"host": 0.5, "nvme": 0.4}}}})"),
              AllOf(HasSubstr("zoe.placement.exp_avg"), HasSubstr("sum to 1")));
  EXPECT_THAT(config_error_of(R"({"zoe": {"placement": {"master": {"host": 1.5}}}})"),
              AllOf(HasSubstr("zoe.placement.master.host"), HasSubstr("[0, 1]")));
  EXPECT_THAT(config_error_of(R"({"zoe": {"placement": {"gradient": {"nvme": 1}}}})"),
              AllOf(HasSubstr("zoe.placement.gradient.nvme"), HasSubstr("nvme_path")));
  EXPECT_THAT(config_error_of(R"({"zoe": {"device": {"kind": "tpu"}}})"),
              AllOf(HasSubstr("zoe.device.kind"), HasSubstr("auto, host, cuda")));
  EXPECT_THAT(config_error_of(R"({"zoe": {"device": {"budget_bytes": 0}}})"), HasSubstr("zoe.device.budget_bytes"));
  EXPECT_THAT(config_error_of(R"({"zoe": {"swap": {"engine": "spdk"}}})"),
              AllOf(HasSubstr("zoe.swap.engine"), HasSubstr("auto, uring, aio, posix")));
  EXPECT_THAT(config_error_of(R"({"zoe": {"swap": {"extra_paths": "/nvme1"}}})"), HasSubstr("zoe.swap.extra_paths"));
  EXPECT_THAT(config_error_of(R"({"zoe": {"swap": {"extra_paths": ["/a", 3]}}})"),
              HasSubstr("zoe.swap.extra_paths[1]"));
  EXPECT_THAT(config_error_of(R"({"zoe": {"numa": "all"}})"),
              AllOf(HasSubstr("zoe.numa"), HasSubstr("none, local, interleave")));
}

}  // namespace
}  // namespace zoe::engine
