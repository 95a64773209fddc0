#pragma once
// `zoe-bench io --sweep`: tries block sizes x queue depths x threads x engines on the given path,
// prints the table, and prints the best setting as a DeepSpeed `aio` JSON block, as ds_nvme_tune
// does.

#include "io_settings.hpp"

namespace zoe::bench {

void run_sweep(const io_settings& settings);

}  // namespace zoe::bench
