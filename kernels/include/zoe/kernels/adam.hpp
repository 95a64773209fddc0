#pragma once
// One Adam / AdamW step over a shard, in one pass over memory: the fp32 master weights and both
// moments are updated in place, and the 16-bit working copy (if any) is written in the same pass.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

#include "zoe/kernels/dtype.hpp"

namespace zoe::kernels {

/// Hyper-parameters of one step. The defaults are PyTorch's.
struct adam_config {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  /// true: decoupled weight decay (AdamW); false: L2, the decay is added to the gradient (Adam).
  bool adamw = true;
  bool bias_correction = true;
  /// The step being taken, counting from 1 (bias correction uses it).
  std::int64_t step = 1;
  /// The gradient is multiplied by grad_scale before use: 1/loss_scale times the clipping factor,
  /// folded in so the gradient is read once.
  float grad_scale = 1.0f;
};

/// The state of one shard. All spans have the same length; `grad` is fp32, fp16 or bf16; `working`
/// is the 16-bit copy of the new weights (fp16 or bf16), or nullopt when the working weights are
/// the fp32 master itself.
struct adam_shard {
  std::span<float> params;
  std::span<float> exp_avg;
  std::span<float> exp_avg_sq;
  const_tensor_view grad;
  std::optional<tensor_view> working;
};

/// How many threads one CPU kernel call may use, so a caller sharing few cores with its own threads
/// (the optimizer pipeline beside its I/O threads) can bound it.
struct thread_budget {
  /// 0: as many as TBB's current arena has (the default). 1: the calling thread alone, without
  /// TBB. n: at most n threads, the caller among them (the call runs in a TBB arena of n).
  std::size_t max_threads = 0;
};

/// Runs one step on the CPU, parallel with TBB within `budget`. The same bits come out on every CPU
/// path, for every budget, and from the CUDA launcher. Throws usage_error naming the offending field
/// on mismatched lengths, a step below 1, a working copy of type fp32, or non-positive beta/eps
/// settings outside [0, 1). Thread-safe for distinct shards.
void adam_step(const adam_config& config, const adam_shard& shard, thread_budget budget = {});

}  // namespace zoe::kernels
