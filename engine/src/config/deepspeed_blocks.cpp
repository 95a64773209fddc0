// DeepSpeed's keys, defaults and validators as its current source has them (zero/config.py,
// zero/offload_config.py, swap_tensor/aio_config.py, precision_config.py, runtime/config.py and
// constants.py); engine/CONFIG.md lists them. Keys DeepSpeed has and zoe does not use are in the
// `ignored` lists, so a DeepSpeed file loads without warnings.
#include <algorithm>
#include <cctype>
#include <limits>
#include <memory>
#include <optional>
#include <string>

#include "config/blocks.hpp"
#include "config/float_ranges.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine::detail {
namespace {

constexpr double unbounded = std::numeric_limits<double>::max();
constexpr std::int64_t int_max = std::numeric_limits<std::int64_t>::max();
constexpr std::int64_t int_min = std::numeric_limits<std::int64_t>::min();

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

field device_field(offload_device& target) {
  return field{"device",
               [&target](const json& v, const std::string& key, read_context& ctx) {
                 const std::string d = to_choice(v, key, ctx, {"none", "cpu", "nvme"});
                 target = d == "nvme" ? offload_device::nvme : d == "cpu" ? offload_device::cpu : offload_device::none;
               },
               [&target] { return json(std::string(offload_device_name(target))); },
               {}};
}

block_spec offload_param_block(offload_param_config& c) {
  block_spec b;
  b.fields = {device_field(c.device),
              path_field("nvme_path", c.nvme_path),
              uint_field("buffer_count", c.buffer_count),
              uint_field("buffer_size", c.buffer_size),
              uint_field("max_in_cpu", c.max_in_cpu),
              bool_field("pin_memory", c.pin_memory)};
  b.on_auto = auto_policy::deepspeed_default;
  return b;
}

block_spec offload_optimizer_block(offload_optimizer_config& c) {
  block_spec b;
  b.fields = {device_field(c.device),
              path_field("nvme_path", c.nvme_path),
              uint_field("buffer_count", c.buffer_count),
              bool_field("pin_memory", c.pin_memory),
              bool_field("pipeline_read", c.pipeline_read),
              bool_field("pipeline_write", c.pipeline_write),
              bool_field("fast_init", c.fast_init),
              number_field("ratio", c.ratio, 0.0, 1.0)};
  b.ignored = {"super_offload", "cpuadam_cores_perc"};
  b.on_auto = auto_policy::deepspeed_default;
  return b;
}

// offload_param / offload_optimizer are optional: an absent block lists DeepSpeed's defaults
// (device none), which is what DeepSpeed's None means, and leaves the optional empty.
template <typename T>
field optional_block_field(std::string_view name, std::optional<T>& target, block_spec (*spec)(T&)) {
  return field{name, {}, {}, [&target, spec](read_context& ctx, const json* node, const std::string& key) {
                 if (node != nullptr) {
                   read_block(ctx, *node, key, spec(target.emplace()));
                   return;
                 }
                 T shown = target.value_or(T{});
                 read_block(ctx, json::object(), key, spec(shown));
               }};
}

// DeepSpeed's cpu_offload / cpu_offload_param: true means an offload block on the cpu, false none
// (anything else is left for the block's own type check).
json cpu_offload_block(const json& v) {
  if (!v.is_boolean()) return v;
  return v.get<bool>() ? json{{"device", "cpu"}} : json(nullptr);
}

block_spec zero_block(zero_config& z) {
  block_spec b;
  b.fields = {
      field{"stage",
            [&z](const json& v, const std::string& key, read_context& ctx) {
              z.stage = static_cast<int>(to_int(v, key, ctx, 0, 3));
            },
            [&z] { return json(z.stage); },
            {}},
      bool_field("contiguous_gradients", z.contiguous_gradients),
      bool_field("reduce_scatter", z.reduce_scatter),
      uint_field("reduce_bucket_size", z.reduce_bucket_size),
      uint_field("allgather_bucket_size", z.allgather_bucket_size),
      bool_field("overlap_comm", z.overlap_comm),
      optional_block_field("offload_param", z.offload_param, offload_param_block),
      optional_block_field("offload_optimizer", z.offload_optimizer, offload_optimizer_block),
      uint_field("sub_group_size", z.sub_group_size),
      uint_field("stage3_prefetch_bucket_size", z.prefetch_bucket_size),
      uint_field("stage3_param_persistence_threshold", z.param_persistence_threshold),
      uint_field("stage3_model_persistence_threshold", z.model_persistence_threshold, 0,
                 static_cast<std::uint64_t>(int_max)),
      uint_field("stage3_max_live_parameters", z.max_live_parameters),
      uint_field("stage3_max_reuse_distance", z.max_reuse_distance),
      bool_field("stage3_gather_16bit_weights_on_model_save", z.gather_16bit_weights_on_model_save),
      uint_field("zero_hpz_partition_size", z.zero_hpz_partition_size),
      bool_field("zero_quantized_weights", z.zero_quantized_weights),
      bool_field("zero_quantized_nontrainable_weights", z.zero_quantized_nontrainable_weights),
      bool_field("zero_quantized_gradients", z.zero_quantized_gradients),
  };
  b.deprecated = {
      {"cpu_offload", "offload_optimizer", cpu_offload_block, true, {}},
      {"cpu_offload_param", "offload_param", cpu_offload_block, true, {}},
      {"cpu_offload_use_pin_memory", "offload_param.pin_memory or offload_optimizer.pin_memory", {}, false, {}},
      {"stage3_gather_fp16_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save", {}, true, {}},
      // DeepSpeed reads the field names beside their stage3_ aliases; its documentation gives the aliases.
      {"prefetch_bucket_size", "stage3_prefetch_bucket_size", {}, true, {}},
      {"param_persistence_threshold", "stage3_param_persistence_threshold", {}, true, {}},
      {"model_persistence_threshold", "stage3_model_persistence_threshold", {}, true, {}},
      {"max_live_parameters", "stage3_max_live_parameters", {}, true, {}},
      {"max_reuse_distance", "stage3_max_reuse_distance", {}, true, {}},
      {"gather_16bit_weights_on_model_save", "stage3_gather_16bit_weights_on_model_save", {}, true, {}},
  };
  b.ignored = {"use_multi_rank_bucket_allreduce",
               "allgather_partitions",
               "load_from_fp32_weights",
               "elastic_checkpoint",
               "zenflow",
               "stage3_module_granularity_threshold",
               "module_granularity_threshold",
               "stage3_use_all_reduce_for_fetch_params",
               "use_all_reduce_for_fetch_params",
               "stage3_allgather_sequential",
               "allgather_sequential",
               "ignore_unused_parameters",
               "legacy_stage1",
               "round_robin_gradients",
               "zeropp_loco_param",
               "mics_shard_size",
               "mics_hierarchical_params_gather",
               "memory_efficient_linear",
               "pipeline_loading_checkpoint",
               "override_module_apply",
               "log_trace_cache_warnings",
               "enable_sanity_checks",
               "save_muon_momentum_buffer_in_memory",
               "leaf_module"};
  b.on_auto = auto_policy::deepspeed_default;
  b.finish = [&z](read_context& /*ctx*/, const std::string& /*path*/, const auto& given) {
    // DeepSpeed's overlap_comm is None until its validator: true at stage 3, false below.
    if (!given("overlap_comm")) z.overlap_comm = z.stage == 3;
  };
  return b;
}

block_spec aio_block(aio_config& a) {
  block_spec b;
  b.fields = {uint_field("block_size", a.block_size, 1),
              uint_field("queue_depth", a.queue_depth, 1),
              uint_field("intra_op_parallelism", a.intra_op_parallelism, 1),
              bool_field("single_submit", a.single_submit),
              bool_field("overlap_events", a.overlap_events),
              bool_field("use_gds", a.use_gds)};
  b.deprecated = {{"thread_count",
                   "intra_op_parallelism",
                   {},
                   true,
                   "zoe reads it as intra_op_parallelism (recent DeepSpeed ignores it and runs one thread)"}};
  return b;
}

block_spec fp16_block(fp16_config& f) {
  block_spec b;
  // The ranges are checked once every key is read, by the check the loss scaler shares: which
  // values work depends on the other keys (a static scale uses neither window nor minimum).
  b.fields = {bool_field("enabled", f.enabled),
              bool_field("auto_cast", f.auto_cast),
              number_field("loss_scale", f.loss_scale, -unbounded, unbounded),
              int_field("initial_scale_power", f.initial_scale_power, int_min),
              int_field("loss_scale_window", f.loss_scale_window, int_min),
              int_field("hysteresis", f.hysteresis, int_min),
              bool_field("consecutive_hysteresis", f.consecutive_hysteresis),
              int_field("min_loss_scale", f.min_loss_scale, int_min)};
  b.ignored = {"fp16_master_weights_and_grads"};
  b.on_auto = auto_policy::deepspeed_default;
  b.finish = [&f](read_context& ctx, const std::string& path, const auto& /*given*/) {
    if (const auto problem = find_fp16_problem(f)) ctx.fail(join_key(path, problem->key), problem->message);
  };
  return b;
}

block_spec bf16_block(bf16_config& f) {
  block_spec b;
  b.fields = {bool_field("enabled", f.enabled)};
  b.ignored = {"immediate_grad_update", "check_grad_overflow", "bf16_master_weights_and_grads",
               "bf16_optimizer_states"};
  b.on_auto = auto_policy::deepspeed_default;
  return b;
}

// The Adam kernel computes in float: each of its settings must stay finite (and an eps positive)
// as a float, or every step would fail in the kernel, naming no key.
constexpr std::string_view as_float = " (the Adam kernel computes in float)";

field float_field(std::string_view name, double& target, double min) {
  return field{name,
               [&target, min](const json& v, const std::string& key, read_context& ctx) {
                 if (!v.is_number() || !(v.get<double>() >= min && v.get<double>() <= float_max)) {
                   ctx.fail(key,
                            str("expected a number in [", min, ", ", float_max, "]", as_float, ", got ", describe(v)));
                 }
                 target = v.get<double>();
               },
               [&target] { return json(target); },
               {}};
}

field betas_field(std::array<double, 2>& betas) {
  return field{"betas",
               [&betas](const json& v, const std::string& key, read_context& ctx) {
                 if (!v.is_array() || v.size() != 2) {
                   ctx.fail(key, str("expected [beta1, beta2] (two numbers in [0, 1)), got ", describe(v)));
                 }
                 for (std::size_t i = 0; i < 2; ++i) {
                   const std::string element = str(key, '[', i, ']');
                   betas[i] = to_number(v[i], element, ctx, 0.0, 1.0);
                   if (betas[i] > float_below_one) {
                     ctx.fail(element, str("expected a number in [0, 0.99999994]: a float holds nothing between that "
                                           "and 1",
                                           as_float, ", got ", describe(v[i])));
                   }
                 }
               },
               [&betas] {
                 return json::array({betas[0], betas[1]});
               },
               {}};
}

block_spec optimizer_params_block(optimizer_config& o) {
  block_spec b;
  b.fields = {float_field("lr", o.lr, 0.0),
              betas_field(o.betas),
              float_field("eps", o.eps, float_min_positive),
              float_field("weight_decay", o.weight_decay, 0.0),
              bool_field("adam_w_mode", o.adam_w_mode),
              bool_field("bias_correction", o.bias_correction)};
  b.ignored = {"torch_adam", "fp32_optimizer_states"};
  b.refused = {{"max_grad_norm",
                "not supported as an optimizer parameter (DeepSpeed refuses it too); use the "
                "top-level gradient_clipping"}};
  b.on_auto = auto_policy::hugging_face_only;
  b.finish = [&o](read_context& /*ctx*/, const std::string& /*path*/, const auto& /*given*/) {
    // DeepSpeed runs AdamW for "AdamW" whatever adam_w_mode says; "Adam" follows adam_w_mode.
    if (lower(o.type) == "adamw") o.adam_w_mode = true;
  };
  return b;
}

block_spec optimizer_block(optimizer_config& o) {
  block_spec b;
  b.fields = {field{"type",
                    [&o](const json& v, const std::string& key, read_context& ctx) {
                      std::string t = to_string(v, key, ctx);
                      const std::string l = lower(t);
                      if (l != "adam" && l != "adamw") {
                        ctx.fail(key,
                                 str("expected Adam or AdamW (the optimizers zoe runs; any case), got ", describe(v)));
                      }
                      o.type = std::move(t);
                    },
                    [&o] { return json(o.type); },
                    {}},
              block_field("params", o, optimizer_params_block)};
  b.ignored = {"legacy_fusion"};
  return b;
}

// The optimizer block is optional; absent, it lists the defaults zoe's Adam would run with.
field optimizer_field(std::optional<optimizer_config>& target) {
  return field{"optimizer", {}, {}, [&target](read_context& ctx, const json* node, const std::string& key) {
                 if (node != nullptr) {
                   read_block(ctx, *node, key, optimizer_block(target.emplace()));
                   return;
                 }
                 optimizer_config shown;
                 read_block(ctx, json::object(), key, optimizer_block(shown));
               }};
}

// The top-level allgather_size, read only by the legacy form of zero_optimization below (DeepSpeed's
// read_zero_config_deprecated), and only checked there: otherwise a key DeepSpeed ignores, so zoe
// does. Not a key zoe lists; kept here until zero_optimization is read.
using pending_value = std::shared_ptr<std::optional<json>>;

field allgather_size_field(pending_value allgather_size) {
  return field{
      "allgather_size", {}, {}, [allgather_size](read_context& /*ctx*/, const json* node, const std::string& /*key*/) {
        if (node != nullptr) *allgather_size = *node;
      }};
}

// The legacy form "zero_optimization": true|false means stage 1|0; with true, the top-level
// allgather_size is the allgather_bucket_size (default 5e8, DeepSpeed's default for both).
field zero_field(zero_config& z, pending_value allgather_size) {
  return field{
      "zero_optimization", {}, {}, [&z, allgather_size](read_context& ctx, const json* node, const std::string& key) {
        if (node != nullptr && node->is_boolean()) {
          ctx.warn(key, str(key, ": true/false is deprecated; use ", key, ".stage (true means stage 1)"));
          json legacy{{"stage", node->get<bool>() ? 1 : 0}};
          if (node->get<bool>() && *allgather_size) {
            legacy["allgather_bucket_size"] =
                to_uint(**allgather_size, "allgather_size", ctx, 0, std::numeric_limits<std::uint64_t>::max());
          }
          read_block(ctx, legacy, key, zero_block(z));
          return;
        }
        read_block(ctx, node != nullptr ? *node : json::object(), key, zero_block(z));
      }};
}

}  // namespace

block_spec top_level_block(engine_config& config) {
  block_spec b;
  // Read before zero_optimization, which needs it in its legacy form.
  auto allgather_size = std::make_shared<std::optional<json>>();
  b.fields = {allgather_size_field(allgather_size),
              zero_field(config.zero, allgather_size),
              block_field("aio", config.aio, aio_block),
              block_field("fp16", config.fp16, fp16_block),
              block_field("bf16", config.bf16, bf16_block),
              number_field("gradient_clipping", config.gradient_clipping, 0.0, unbounded),
              uint_field("gradient_accumulation_steps", config.gradient_accumulation_steps, 1),
              optional_uint_field("train_batch_size", config.batch.train_batch_size, 1),
              optional_uint_field("train_micro_batch_size_per_gpu", config.batch.train_micro_batch_size_per_gpu, 1),
              optimizer_field(config.optimizer),
              block_field("zoe", config.zoe, zoe_block)};
  b.deprecated = {{"bfloat16", "bf16", {}, true, {}}};
  // Whether gradient_accumulation_steps was written or is the default decides which batch key
  // resolve_batch_sizes derives.
  b.finish = [&config](read_context& /*ctx*/, const std::string& /*path*/, const auto& given) {
    if (given("gradient_accumulation_steps"))
      config.batch.gradient_accumulation_steps = config.gradient_accumulation_steps;
  };
  // runtime/config.py and the configs it reads (monitor, comm, profiling, autotuning, elasticity,
  // compression, data_pipeline, checkpointing, nebula, datastates, tensor_parallel, ...).
  b.ignored = {"managed_gradient_accumulation",
               "steps_per_print",
               "dump_state",
               "disable_allgather",
               "communication_data_type",
               "seq_parallel_communication_data_type",
               "prescale_gradients",
               "gradient_predivide_factor",
               "gradient_allreduce_op",
               "sparse_gradients",
               "activation_checkpointing",
               "comms_logger",
               "tensorboard",
               "wandb",
               "csv_monitor",
               "comet",
               "amp",
               "torch_autocast",
               "compression_training",
               "graph_harvesting",
               "zero_allow_untested_optimizer",
               "zero_force_ds_cpu_optimizer",
               "scheduler",
               "flops_profiler",
               "wall_clock_breakdown",
               "memory_breakdown",
               "autotuning",
               "eigenvalue",
               "quantize_training",
               "use_data_before_expert_parallelism",
               "hybrid_engine",
               "sparse_attention",
               "pipeline",
               "progressive_layer_drop",
               "curriculum_learning",
               "data_efficiency",
               "checkpoint",
               "data_types",
               "dataloader_drop_last",
               "log_level",
               "nebula",
               "datastates_ckpt",
               "weight_quantization",
               "compile",
               "timers",
               "tensor_parallel",
               "expert_parallel",
               "elasticity",
               "vocabulary_size"};
  b.on_auto = auto_policy::hugging_face_only;
  return b;
}

}  // namespace zoe::engine::detail
