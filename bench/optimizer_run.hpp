#pragma once
// `zoe-bench optimizer`: zoe's pipelined optimizer step (engine::optimizer_step) over a model whose
// optimizer states are on NVMe or in pinned host memory, against each of its stages run alone over
// the same data in the same run (reads, Adam, writes, reads and writes together), and, with the
// states in memory, against a memcpy on the same threads.

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "zoe/engine/config/config.hpp"

namespace zoe::bench {

struct optimizer_settings {
  std::string params_text = "256M";  ///< parameters in all (decimal suffixes k, M, G)
  std::string offload = "nvme";      ///< offload_optimizer.device: nvme or cpu
  std::string path;                  ///< offload_optimizer.nvme_path (nvme only)
  std::string working = "device";    ///< where the fp16 working copies live: device, or cpu (offload_param cpu)
  /// zero_optimization.sub_group_size; unset: 1/32 of the parameters, rounded up to whole chunks.
  std::optional<std::string> sub_group_text;
  /// Elements per parameter tensor; unset: 16M, or a 1/8 of the parameters when that is less.
  std::optional<std::string> tensor_text;
  int steps = 5;  ///< timed rounds: each a step, then every stage alone
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());  ///< Adam's and the memcpy's
  std::optional<std::uint64_t> buffer_count;  ///< offload_optimizer.buffer_count (DeepSpeed's 4 otherwise)
  std::optional<std::string> block_text;      ///< aio.block_size
  std::optional<std::uint64_t> queue_depth;   ///< aio.queue_depth
  std::string engine = "auto";
  bool no_checksums = false;
  std::string memcpy_text = "1GiB";  ///< the most the memcpy limit copies (cpu)
  bool json = false;

  // Resolved by check().
  std::uint64_t params = 0;
  std::uint64_t tensor_numel = 0;
  std::uint64_t sub_group_size = 0;
  std::uint64_t memcpy_cap = 0;
  engine::engine_config config;

  /// Parses and checks the flags; throws usage_error naming the flag.
  void check();
};

/// The sub-group size zoe-bench optimizer takes when --sub-group-size is not given: 1/32 of the
/// parameters, rounded up to whole chunks (aio.block_size bytes of the fp16 working copy), at
/// least one chunk.
[[nodiscard]] std::uint64_t default_sub_group_size(std::uint64_t params, std::uint64_t block_size);

/// Runs the benchmark; progress on stderr. The result as the JSON line prints it.
[[nodiscard]] nlohmann::json run_optimizer(const optimizer_settings& s);

/// Prints the result: the JSON line with --json, else a few readable lines.
void print_optimizer(const optimizer_settings& s, const nlohmann::json& result);

}  // namespace zoe::bench
