// DeepSpeed files as its documentation and Hugging Face's give them (fixtures/), and the
// renderings zoe-plan prints.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>

#include "config_test_support.hpp"

namespace zoe::engine {
namespace {

using ::testing::AllOf;
using testing::entry_of;
using ::testing::HasSubstr;
using testing::warning_about;

std::filesystem::path fixture(const char* name) { return std::filesystem::path(ZOE_CONFIG_FIXTURES) / name; }

TEST(config_files, zero3_cpu_offload_tutorial) {
  const loaded_config c = load_config_file(fixture("zero3_offload_cpu.json"));
  const zero_config& z = c.config.zero;
  EXPECT_EQ(z.stage, 3);
  EXPECT_TRUE(z.overlap_comm);
  EXPECT_EQ(z.prefetch_bucket_size, 10'000'000u);
  EXPECT_EQ(z.reduce_bucket_size, 10'000'000u);
  EXPECT_EQ(z.param_persistence_threshold, 100'000u);
  ASSERT_TRUE(z.offload_param && z.offload_optimizer);
  EXPECT_EQ(z.offload_param->device, offload_device::cpu);
  EXPECT_TRUE(z.offload_param->pin_memory);
  EXPECT_EQ(z.offload_optimizer->device, offload_device::cpu);
  EXPECT_TRUE(c.config.fp16.enabled);
  EXPECT_DOUBLE_EQ(c.config.optimizer->betas[1], 0.95);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(config_files, zero_infinity_nvme_example) {
  const loaded_config c = load_config_file(fixture("zero_infinity_nvme.json"));
  const zero_config& z = c.config.zero;
  ASSERT_TRUE(z.offload_param && z.offload_optimizer);
  EXPECT_EQ(z.offload_param->device, offload_device::nvme);
  EXPECT_EQ(z.offload_param->nvme_path, std::filesystem::path("/local_nvme"));
  EXPECT_EQ(z.offload_param->buffer_size, 100'000'000u);
  EXPECT_EQ(z.offload_param->max_in_cpu, 1'000'000'000u);
  EXPECT_EQ(z.offload_optimizer->buffer_count, 4u);
  EXPECT_EQ(z.sub_group_size, 1'000'000'000'000u);
  EXPECT_EQ(c.config.aio.intra_op_parallelism, 1u);
  EXPECT_EQ(c.config.gradient_accumulation_steps, 4u);
  EXPECT_TRUE(c.config.bf16.enabled);
  // The documentation's aio block still says thread_count: the one warning.
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_EQ(c.warnings[0].key, "aio.thread_count");
  EXPECT_THAT(c.warnings[0].message, HasSubstr("aio.intra_op_parallelism"));
}

TEST(config_files, zeropp_tutorial) {
  const loaded_config c = load_config_file(fixture("zeropp.json"));
  EXPECT_TRUE(c.config.zero.zero_quantized_weights);
  EXPECT_TRUE(c.config.zero.zero_quantized_gradients);
  EXPECT_EQ(c.config.zero.zero_hpz_partition_size, 16u);
  EXPECT_EQ(c.config.zero.reduce_bucket_size, 10'000'000u);
  EXPECT_TRUE(c.warnings.empty());
}

TEST(config_files, hugging_face_zero3_with_auto_asks_for_numbers) {
  try {
    (void)load_config_file(fixture("hf_zero3_auto.json"));
    FAIL() << "expected a config_error";
  } catch (const config_error& e) {
    EXPECT_THAT(e.what(), AllOf(HasSubstr("hf_zero3_auto.json"), HasSubstr("gradient_clipping"),
                                HasSubstr("gradient_accumulation_steps"), HasSubstr("optimizer.params.lr"),
                                HasSubstr("optimizer.params.betas"), HasSubstr("write a number")));
    // The batch sizes decide gradient_accumulation_steps (DeepSpeed's arithmetic): asked for too.
    EXPECT_THAT(e.what(), AllOf(HasSubstr("train_batch_size"), HasSubstr("train_micro_batch_size_per_gpu")));
  }
}

TEST(config_files, hugging_face_zero3_with_numbers_loads) {
  const loaded_config c = load_config_file(fixture("hf_zero3_filled.json"));
  const zero_config& z = c.config.zero;
  EXPECT_EQ(z.stage, 3);
  EXPECT_EQ(z.reduce_bucket_size, 500'000'000u);
  EXPECT_EQ(z.prefetch_bucket_size, 50'000'000u);
  EXPECT_EQ(z.param_persistence_threshold, 100'000u);
  EXPECT_TRUE(z.gather_16bit_weights_on_model_save);
  EXPECT_FALSE(c.config.fp16.enabled);
  EXPECT_FALSE(c.config.bf16.enabled);
  EXPECT_DOUBLE_EQ(c.config.optimizer->lr, 3e-5);
  EXPECT_TRUE(c.config.optimizer->adam_w_mode);
  EXPECT_EQ(c.config.gradient_accumulation_steps, 2u);
  ASSERT_EQ(c.warnings.size(), 1u);  // the line naming the resolved "auto" keys
  EXPECT_THAT(c.warnings[0].message, AllOf(HasSubstr("zero_optimization.reduce_bucket_size=500000000"),
                                           HasSubstr("fp16.enabled=false"), HasSubstr("bf16.enabled=false")));
}

TEST(config_files, legacy_names_load_with_warnings) {
  const loaded_config c = load_config_file(fixture("legacy_names.json"));
  EXPECT_TRUE(c.config.bf16.enabled);
  EXPECT_EQ(c.config.zero.offload_optimizer->device, offload_device::cpu);
  EXPECT_EQ(c.config.zero.offload_param->device, offload_device::cpu);
  EXPECT_EQ(c.config.zero.prefetch_bucket_size, 20'000'000u);
  EXPECT_EQ(c.config.zero.max_live_parameters, 300'000'000u);
  EXPECT_TRUE(c.config.zero.gather_16bit_weights_on_model_save);
  EXPECT_EQ(c.warnings.size(), 6u);
}

TEST(config_render, json_has_deepspeeds_nesting_and_every_entry) {
  const loaded_config c = load_config_file(fixture("zero_infinity_nvme.json"));
  const nlohmann::json rendered = nlohmann::json::parse(render_config_json(c));
  EXPECT_EQ(rendered["zero_optimization"]["offload_param"]["nvme_path"], "/local_nvme");
  EXPECT_EQ(rendered["zero_optimization"]["offload_param"]["max_in_cpu"], 1'000'000'000u);
  EXPECT_EQ(rendered["zero_optimization"]["stage3_max_live_parameters"], 1'000'000'000u);
  EXPECT_EQ(rendered["aio"]["intra_op_parallelism"], 1);
  EXPECT_FALSE(rendered["aio"].contains("thread_count"));
  EXPECT_EQ(rendered["optimizer"]["params"]["lr"], 1e-3);
  EXPECT_TRUE(rendered["zoe"]["placement"]["working"].is_null());
  for (const config_entry& e : c.entries) {
    const nlohmann::json::json_pointer pointer("/" + [&] {
      std::string p = e.key;
      std::replace(p.begin(), p.end(), '.', '/');
      return p;
    }());
    ASSERT_TRUE(rendered.contains(pointer)) << e.key;
    EXPECT_EQ(rendered[pointer].dump(), e.value) << e.key;
  }
}

// The keys zoe-plan lists, in its order: a change here changes zoe-plan's output and CONFIG.md.
TEST(config_render, every_known_key_is_listed_once_in_a_fixed_order) {
  const std::vector<std::string> expected = {
      "zero_optimization.stage",
      "zero_optimization.contiguous_gradients",
      "zero_optimization.reduce_scatter",
      "zero_optimization.reduce_bucket_size",
      "zero_optimization.allgather_bucket_size",
      "zero_optimization.overlap_comm",
      "zero_optimization.offload_param.device",
      "zero_optimization.offload_param.nvme_path",
      "zero_optimization.offload_param.buffer_count",
      "zero_optimization.offload_param.buffer_size",
      "zero_optimization.offload_param.max_in_cpu",
      "zero_optimization.offload_param.pin_memory",
      "zero_optimization.offload_optimizer.device",
      "zero_optimization.offload_optimizer.nvme_path",
      "zero_optimization.offload_optimizer.buffer_count",
      "zero_optimization.offload_optimizer.pin_memory",
      "zero_optimization.offload_optimizer.pipeline_read",
      "zero_optimization.offload_optimizer.pipeline_write",
      "zero_optimization.offload_optimizer.fast_init",
      "zero_optimization.offload_optimizer.ratio",
      "zero_optimization.sub_group_size",
      "zero_optimization.stage3_prefetch_bucket_size",
      "zero_optimization.stage3_param_persistence_threshold",
      "zero_optimization.stage3_model_persistence_threshold",
      "zero_optimization.stage3_max_live_parameters",
      "zero_optimization.stage3_max_reuse_distance",
      "zero_optimization.stage3_gather_16bit_weights_on_model_save",
      "zero_optimization.zero_hpz_partition_size",
      "zero_optimization.zero_quantized_weights",
      "zero_optimization.zero_quantized_nontrainable_weights",
      "zero_optimization.zero_quantized_gradients",
      "aio.block_size",
      "aio.queue_depth",
      "aio.intra_op_parallelism",
      "aio.single_submit",
      "aio.overlap_events",
      "aio.use_gds",
      "fp16.enabled",
      "fp16.auto_cast",
      "fp16.loss_scale",
      "fp16.initial_scale_power",
      "fp16.loss_scale_window",
      "fp16.hysteresis",
      "fp16.consecutive_hysteresis",
      "fp16.min_loss_scale",
      "bf16.enabled",
      "gradient_clipping",
      "gradient_accumulation_steps",
      "train_batch_size",
      "train_micro_batch_size_per_gpu",
      "optimizer.type",
      "optimizer.params.lr",
      "optimizer.params.betas",
      "optimizer.params.eps",
      "optimizer.params.weight_decay",
      "optimizer.params.adam_w_mode",
      "optimizer.params.bias_correction",
      "zoe.device.kind",
      "zoe.device.budget_bytes",
      "zoe.swap.checksums",
      "zoe.swap.engine",
      "zoe.swap.extra_paths",
      "zoe.swap.shadows",
      "zoe.numa",
      "zoe.placement.working",
      "zoe.placement.gradient",
      "zoe.placement.master",
      "zoe.placement.exp_avg",
      "zoe.placement.exp_avg_sq",
      "zoe.activations.host_bytes",
      "zoe.activations.nvme_bytes",
      "zoe.activations.prefetch_bytes",
      "zoe.comm.backend",
      "zoe.comm.timeout_s",
      "zoe.ranks_per_node",
      "zoe.optimizer_in_backward",
      "zoe.optimizer_pending_bytes",
  };
  std::vector<std::string> keys;
  for (const config_entry& e : parse_config("{}").entries) keys.push_back(e.key);
  EXPECT_EQ(keys, expected);
  // A document that writes every block lists the same keys.
  keys.clear();
  for (const config_entry& e : load_config_file(fixture("zero_infinity_nvme.json")).entries) keys.push_back(e.key);
  EXPECT_EQ(keys, expected);
}

TEST(config_render, lines_give_key_value_and_source) {
  const loaded_config c = parse_config(R"({"zero_optimization": {"stage": 3, "reduce_bucket_size": "auto"}})");
  const std::string lines = render_config_lines(c);
  EXPECT_THAT(lines, HasSubstr("zero_optimization.stage = 3 (file)\n"));
  EXPECT_THAT(lines, HasSubstr("zero_optimization.reduce_bucket_size = 500000000 (auto)\n"));
  EXPECT_THAT(lines, HasSubstr("aio.block_size = 1048576 (default)\n"));
  EXPECT_EQ(static_cast<std::size_t>(std::count(lines.begin(), lines.end(), '\n')), c.entries.size());
}

}  // namespace
}  // namespace zoe::engine
