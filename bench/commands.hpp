#pragma once
// The subcommands of zoe-bench. Each lives in its own <name>_command.cpp and registers itself on
// the application here; main() only wires them up.

#include <CLI/CLI.hpp>

namespace zoe::bench {

/// `zoe-bench io`: file I/O bandwidth through the I/O engine.
void add_io_command(CLI::App& app);

/// `zoe-bench alloc`: the defragmenting arena on a ZeRO-3-like trace, compaction bandwidth and
/// buffer-pool acquire/release cost.
void add_alloc_command(CLI::App& app);

/// `zoe-bench adam`: one CPU Adam step against memcpy on the same threads.
void add_adam_command(CLI::App& app);

/// `zoe-bench quant`: block quantization speed and accuracy.
void add_quant_command(CLI::App& app);

/// `zoe-bench params`: ZeRO-3 parameter fetch with prefetch from NVMe against raw reads.
void add_params_command(CLI::App& app);

/// `zoe-bench optimizer`: the pipelined optimizer step against each of its stages alone.
void add_optimizer_command(CLI::App& app);

}  // namespace zoe::bench
