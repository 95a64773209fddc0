#pragma once
// The flags of `zoe-bench io`, parsed and checked once for the run, the store and the sweep.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zoe::bench {

struct io_settings {
  std::string path;
  std::string size_text = "1GiB";
  std::string block_text = "1MiB";
  std::size_t queue_depth = 32;
  std::size_t threads = 1;
  std::string engine = "auto";
  std::string op = "both";
  bool buffered = false;
  bool verify = false;
  bool store = false;
  int loops = 3;
  bool json = false;
  std::optional<std::uint64_t> seed;

  bool sweep = false;
  std::vector<std::string> sweep_block_sizes{"256KiB", "1MiB", "4MiB"};
  std::vector<std::size_t> sweep_queue_depths{8, 32, 64};
  std::vector<std::size_t> sweep_threads{1, 2};
  std::vector<std::string> sweep_engines;  ///< empty: every backend in this build

  // Parsed from the text flags by check().
  std::uint64_t size = 0;
  std::size_t block = 0;

  /// Parses sizes and checks combinations; throws usage_error naming the flag.
  void check();
};

/// Checks block size and queue depth as the I/O engine will; throws usage_error starting with
/// `flags` (the flags they came from) when either is out of range.
void check_engine_options(std::size_t block, std::size_t queue_depth, std::string_view flags);

/// Warns when `path` is on tmpfs or ramfs (a drive is what zoe-bench measures); throws usage_error
/// naming --path when it is missing or not a directory.
void check_bench_directory(const std::string& path);

}  // namespace zoe::bench
