#include "config/checks.hpp"

#include <string>

#include "zoe/core/str.hpp"

namespace zoe::engine::detail {
namespace {

std::string joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += str(out.empty() ? "" : ", ", k);
  return out;
}

void refuse_hugging_face_auto(const read_context& ctx) {
  if (ctx.auto_refused.empty()) return;
  ctx.fail(joined(ctx.auto_refused),
           "\"auto\" is filled in only by the Hugging Face integration, which is not reading this file; write a "
           "number for each (betas: [beta1, beta2])");
}

void check_precision(const read_context& ctx, const engine_config& c) {
  if (c.fp16.enabled && c.bf16.enabled) {
    ctx.fail("fp16.enabled, bf16.enabled", "fp16 and bf16 cannot both be enabled; set at most one of them to true");
  }
}

void check_nvme_path(const read_context& ctx, std::string_view block, offload_device device,
                     const std::optional<std::filesystem::path>& path) {
  if (device == offload_device::nvme && !path) {
    ctx.fail(str("zero_optimization.", block, ".nvme_path"),
             str("required when zero_optimization.", block, ".device is nvme; give the directory to swap to"));
  }
}

void check_offload(read_context& ctx, zero_config& z) {
  if (z.offload_param && z.stage < 3) {
    if (z.offload_param->device != offload_device::none) {
      ctx.warn("zero_optimization.offload_param",
               str("zero_optimization.offload_param is ignored below stage 3 (zero_optimization.stage is ", z.stage,
                   "), as DeepSpeed ignores it"));
    }
    z.offload_param.reset();
  }
  if (z.offload_param) check_nvme_path(ctx, "offload_param", z.offload_param->device, z.offload_param->nvme_path);
  // Stage 0 has no ZeRO optimizer to move the states: DeepSpeed's engine.py only picks its CPU Adam
  // for the basic optimizer, which steps the states where the parameters are (it refuses parameters
  // on a GPU), and documents offload_optimizer for stages 1-3. The states stay on the device.
  if (z.offload_optimizer && z.stage == 0) {
    if (z.offload_optimizer->device != offload_device::none) {
      ctx.warn("zero_optimization.offload_optimizer",
               "zero_optimization.offload_optimizer is ignored at stage 0: the optimizer states stay on the device "
               "with the parameters, as no ZeRO optimizer moves them in DeepSpeed either (it documents the block "
               "for stages 1-3); set zero_optimization.stage 1 to offload them, or place them with zoe.placement");
    }
    z.offload_optimizer.reset();
  }
  if (z.offload_optimizer) {
    check_nvme_path(ctx, "offload_optimizer", z.offload_optimizer->device, z.offload_optimizer->nvme_path);
    if (z.offload_optimizer->ratio < 1.0 && z.stage != 3) {
      ctx.fail("zero_optimization.offload_optimizer.ratio",
               str("below 1 (partial offload) needs zero_optimization.stage 3, got ratio ", z.offload_optimizer->ratio,
                   " at stage ", z.stage));
    }
  }
}

// A placement that puts a state on NVMe needs somewhere to swap to.
void check_placement(const read_context& ctx, const engine_config& c) {
  const bool have_nvme_path = (c.zero.offload_param && c.zero.offload_param->nvme_path) ||
                              (c.zero.offload_optimizer && c.zero.offload_optimizer->nvme_path) ||
                              !c.zoe.extra_swap_paths.empty();
  for (std::size_t i = 0; i < state_kind_count; ++i) {
    const auto& f = c.zoe.placement[i];
    if (f && f->nvme > 0 && !have_nvme_path) {
      ctx.fail(str("zoe.placement.", state_kind_name(static_cast<state_kind>(i)), ".nvme"),
               "puts part of the state on NVMe, but no swap directory is given; set "
               "zero_optimization.offload_param.nvme_path, zero_optimization.offload_optimizer.nvme_path or "
               "zoe.swap.extra_paths");
    }
  }
}

void announce_auto(read_context& ctx) {
  if (ctx.auto_resolved.empty()) return;
  std::string resolved;
  for (const std::string& key : ctx.auto_resolved) {
    // A key, or every key of a block given as "auto" (offload_param: "auto" means no block).
    for (const config_entry& e : ctx.entries) {
      const bool in_block = e.key.size() > key.size() && e.key.starts_with(key) && e.key[key.size()] == '.';
      if (e.key == key || in_block) resolved += str(resolved.empty() ? "" : ", ", e.key, '=', e.value);
    }
  }
  ctx.warn(joined(ctx.auto_resolved),
           str("\"auto\" resolved to DeepSpeed's defaults, as DeepSpeed resolves it: ", resolved));
}

}  // namespace

void check_config(read_context& ctx, engine_config& config) {
  refuse_hugging_face_auto(ctx);
  check_precision(ctx, config);
  check_offload(ctx, config.zero);
  check_placement(ctx, config);
  announce_auto(ctx);
}

}  // namespace zoe::engine::detail
