#pragma once
// What the memory system of this machine does to a benchmark: the size of the last-level cache
// (a working set that fits in it measures the cache, not memory) and glibc's non-temporal
// threshold (a memcpy call at least this large streams its stores past the cache, which is how a
// large copy runs; a smaller call does not, and is 1.5-2x slower on the same memory).

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace zoe::bench {

/// The last-level cache as the system describes it. Both sources are kept because they can
/// disagree (in a VM, cpuid may report every die's cache and sysfs one of them).
struct last_level_cache {
  std::uint64_t sysfs_bytes = 0;    ///< cpu0's highest data or unified cache in sysfs; 0 if unknown
  std::uint64_t sysconf_bytes = 0;  ///< sysconf(_SC_LEVEL3_CACHE_SIZE) (glibc reads cpuid); 0 if unknown
  /// The larger of the two: a working set below it may be served from cache. 0 when neither knows.
  [[nodiscard]] std::uint64_t bytes() const noexcept {
    return sysfs_bytes > sysconf_bytes ? sysfs_bytes : sysconf_bytes;
  }
};

/// Reads the last-level cache sizes (once per process). Never throws: an unreadable source is 0.
[[nodiscard]] const last_level_cache& llc();

/// glibc's memcpy non-temporal threshold and where the figure came from.
struct non_temporal_threshold {
  std::uint64_t bytes = 0;
  /// "ld.so --list-tunables" when the dynamic loader reported it (tunables and cpuid applied), or
  /// a note naming the estimate used instead.
  std::string source;
};

/// Asks this process's dynamic loader for glibc.cpu.x86_non_temporal_threshold (once per
/// process). Where it cannot answer (not glibc, glibc before 2.33, not x86) it estimates 3/4 of
/// the last-level cache, glibc's own rule, and says so in `source`. Never throws.
[[nodiscard]] const non_temporal_threshold& glibc_non_temporal_threshold();

/// The smallest memcpy piece that glibc copies with streaming stores: above the threshold,
/// rounded up to whole 2 MiB pages.
[[nodiscard]] std::uint64_t streaming_piece_bytes();

/// Whether a benchmark's working set (every byte one timed call touches) fits the last-level cache.
struct cache_fit {
  std::uint64_t working_set_bytes = 0;
  std::uint64_t llc_bytes = 0;
  [[nodiscard]] bool fits() const noexcept { return working_set_bytes <= llc_bytes; }
};

/// Checks `working_set_bytes` against the cache; when it fits, warns on stderr that `what`
/// measures the cache rather than memory (the JSON carries the same flag).
cache_fit check_working_set(std::uint64_t working_set_bytes, std::string_view what);

/// {"working_set_bytes", "llc_bytes", "fits_llc"} for a benchmark's JSON.
[[nodiscard]] nlohmann::json to_json(const cache_fit& fit);

}  // namespace zoe::bench
