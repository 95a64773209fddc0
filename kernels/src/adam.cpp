#include "zoe/kernels/adam.hpp"

#include <cmath>

#include "cpu/kernel_table.hpp"
#include "parallel.hpp"
#include "zoe/core/check.hpp"

namespace zoe::kernels {
namespace detail {

adam_scalars make_adam_scalars(const adam_config& c) {
  ZOE_EXPECTS(c.step >= 1, "adam: step must count from 1, got ", c.step);
  ZOE_EXPECTS(c.beta1 >= 0.0f && c.beta1 < 1.0f, "adam: beta1 must lie in [0, 1), got ", c.beta1);
  ZOE_EXPECTS(c.beta2 >= 0.0f && c.beta2 < 1.0f, "adam: beta2 must lie in [0, 1), got ", c.beta2);
  ZOE_EXPECTS(c.eps > 0.0f && std::isfinite(c.eps), "adam: eps must be positive and finite, got ", c.eps);
  ZOE_EXPECTS(c.lr >= 0.0f && std::isfinite(c.lr), "adam: lr must be non-negative and finite, got ", c.lr);
  ZOE_EXPECTS(c.weight_decay >= 0.0f && std::isfinite(c.weight_decay),
              "adam: weight_decay must be non-negative and finite, got ", c.weight_decay);
  ZOE_EXPECTS(std::isfinite(c.grad_scale), "adam: grad_scale must be finite, got ", c.grad_scale);
  // Powers and quotients in double, each constant rounded to float once.
  const double t = static_cast<double>(c.step);
  const double bc1 = c.bias_correction ? 1.0 - std::pow(static_cast<double>(c.beta1), t) : 1.0;
  const double bc2 = c.bias_correction ? 1.0 - std::pow(static_cast<double>(c.beta2), t) : 1.0;
  const double lr = c.lr;
  const double wd = c.weight_decay;
  return adam_scalars{
      .grad_scale = c.grad_scale,
      .l2 = c.adamw ? 0.0f : c.weight_decay,
      .beta1 = c.beta1,
      .one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(c.beta1)),
      .beta2 = c.beta2,
      .one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(c.beta2)),
      .inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bc2)),
      .eps = c.eps,
      .lr_wd = c.adamw ? static_cast<float>(lr * wd) : 0.0f,
      .step_size = static_cast<float>(lr / bc1),
  };
}

adam_args make_adam_args(const adam_config& config, const adam_shard& shard) {
  const std::size_t n = shard.params.size();
  ZOE_EXPECTS(shard.exp_avg.size() == n, "adam: exp_avg has ", shard.exp_avg.size(), " elements, params ", n);
  ZOE_EXPECTS(shard.exp_avg_sq.size() == n, "adam: exp_avg_sq has ", shard.exp_avg_sq.size(), " elements, params ", n);
  ZOE_EXPECTS(shard.grad.count == n, "adam: grad has ", shard.grad.count, " elements, params ", n);
  ZOE_EXPECTS(n == 0 || shard.grad.data != nullptr, "adam: grad is null");
  if (shard.working) {
    ZOE_EXPECTS(shard.working->type != dtype::fp32,
                "adam: the working copy must be fp16 or bf16 (an fp32 working copy is the master itself: "
                "pass no working copy)");
    ZOE_EXPECTS(shard.working->count == n, "adam: working copy has ", shard.working->count, " elements, params ", n);
    ZOE_EXPECTS(n == 0 || shard.working->data != nullptr, "adam: working copy is null");
  }
  return adam_args{
      .params = shard.params.data(),
      .exp_avg = shard.exp_avg.data(),
      .exp_avg_sq = shard.exp_avg_sq.data(),
      .grad = shard.grad.data,
      .grad_type = shard.grad.type,
      .working = shard.working ? shard.working->data : nullptr,
      .working_type = shard.working ? shard.working->type : dtype::fp16,
      .s = make_adam_scalars(config),
  };
}

}  // namespace detail

void adam_step(const adam_config& config, const adam_shard& shard, thread_budget budget) {
  const detail::adam_args args = detail::make_adam_args(config, shard);
  const std::size_t n = shard.params.size();
  const detail::kernel_table& k = detail::active_table();
  detail::parallel_ranges(n, detail::elementwise_grain, budget.max_threads,
                          [&](std::size_t b, std::size_t e) { k.adam_range(args, b, e); });
}

}  // namespace zoe::kernels
