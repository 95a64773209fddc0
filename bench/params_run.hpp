#pragma once
// `zoe-bench params`: ZeRO-3 parameter fetch through zoe's parameter path (NVMe -> pinned swap
// buffers -> device -> gathered into the arena, with trace-based prefetch) layer after layer while
// a simulated compute sleeps, against raw reads of the same bytes through the I/O engine at the
// same aio settings, from the same kind of pinned, huge-page memory, in the same run.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "zoe/engine/config/config.hpp"

namespace zoe::bench {

struct params_settings {
  std::string params_text = "256M";  ///< parameters in all (decimal suffixes k, M, G)
  std::size_t layers = 32;
  std::size_t per_layer = 4;  ///< parameters per layer (a transformer layer's large matrices)
  std::string path;
  std::optional<double> compute_ms;  ///< unset: 1.5x the raw read of one layer, measured first
  int steps = 3;                     ///< timed steps, each after a raw read pass (alternating)
  std::string dtype = "fp16";
  std::optional<std::uint64_t> buffer_count;  ///< offload_param.buffer_count (DeepSpeed's default otherwise)
  std::optional<std::uint64_t> buffer_size;   ///< offload_param.buffer_size, elements
  std::optional<std::string> block_text;      ///< aio.block_size
  std::optional<std::uint64_t> queue_depth;   ///< aio.queue_depth
  std::string engine = "auto";
  bool no_checksums = false;  ///< zoe.swap.checksums false (to see what verifying costs)
  bool json = false;

  // Resolved by check().
  std::uint64_t params = 0;
  engine::engine_config config;

  /// Parses and checks the flags; throws usage_error naming the flag.
  void check();
};

/// Runs the benchmark; progress on stderr. The result as the JSON line prints it.
[[nodiscard]] nlohmann::json run_params(const params_settings& s);

/// Prints the result: the JSON line with --json, else a few readable lines.
void print_params(const params_settings& s, const nlohmann::json& result);

}  // namespace zoe::bench
