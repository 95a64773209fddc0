#pragma once
// DeepSpeed's batch arithmetic (runtime/config.py: _set_batch_related_parameters, then
// _batch_assertion): train_batch_size = train_micro_batch_size_per_gpu x
// gradient_accumulation_steps x world size, the key not written derived from the others, and a
// triple that does not multiply out refused. Documented in engine/CONFIG.md.

#include <cstddef>

#include "zoe/engine/config/config.hpp"

namespace zoe::engine {

/// Resolves config.batch (the keys as written) for `world_size` ranks as DeepSpeed does: with two
/// of the three written the third is derived (rounded down, as DeepSpeed divides); with only
/// train_batch_size, gradient_accumulation_steps is 1 and the micro-batch train_batch_size /
/// world_size; with only train_micro_batch_size_per_gpu, gradient_accumulation_steps is 1. Sets
/// config.batch to the three and config.gradient_accumulation_steps to the steps. With neither
/// batch size written (where DeepSpeed refuses the configuration) it changes nothing: zoe runs
/// config.gradient_accumulation_steps (as written, 1 by default) and the batch sizes stay unknown. Idempotent for one
/// world size. Throws config_error naming the keys and their values (and which one was derived)
/// when one comes out 0 or the three do not multiply out; usage_error for world_size 0.
void resolve_batch_sizes(engine_config& config, std::size_t world_size);

}  // namespace zoe::engine
