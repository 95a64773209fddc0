#include "cache_limits.hpp"

#include <elf.h>
#include <link.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>

#include "zoe/core/log.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"

namespace zoe::bench {
namespace {

// sysfs writes sizes as "32768K" (or a plain byte count).
std::uint64_t parse_sysfs_size(const std::string& text) {
  std::size_t used = 0;
  std::uint64_t value = 0;
  try {
    value = std::stoull(text, &used);
  } catch (const std::exception&) {
    return 0;
  }
  const std::string unit = text.substr(used);
  if (unit.starts_with('K')) return value * KiB;
  if (unit.starts_with('M')) return value * MiB;
  if (unit.starts_with('G')) return value * GiB;
  return value;
}

std::string read_word(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string word;
  in >> word;
  return word;
}

// The highest-level data or unified cache of cpu0 (instruction caches do not hold data).
std::uint64_t sysfs_last_level_cache() {
  const std::filesystem::path caches = "/sys/devices/system/cpu/cpu0/cache";
  std::error_code ec;
  int best_level = 0;
  std::uint64_t best_bytes = 0;
  for (const auto& entry : std::filesystem::directory_iterator(caches, ec)) {
    if (!entry.path().filename().string().starts_with("index")) continue;
    if (read_word(entry.path() / "type") == "Instruction") continue;
    const std::string level_text = read_word(entry.path() / "level");
    const int level = level_text.empty() ? 0 : level_text[0] - '0';
    if (level > best_level) {
      best_level = level;
      best_bytes = parse_sysfs_size(read_word(entry.path() / "size"));
    }
  }
  return best_bytes;
}

// The PT_INTERP path of the main program: the dynamic loader that set up this process.
std::optional<std::string> program_interpreter() {
  std::optional<std::string> interp;
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) -> int {
        for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
          if (info->dlpi_phdr[i].p_type == PT_INTERP) {
            *static_cast<std::optional<std::string>*>(out) =
                reinterpret_cast<const char*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
          }
        }
        return 1;  // the first object is the main program; the rest do not matter
      },
      &interp);
  return interp;
}

// glibc.cpu.x86_non_temporal_threshold as `ld.so --list-tunables` prints it ("name: 0x... (min: ...)").
std::optional<std::uint64_t> loader_threshold() {
  const auto interp = program_interpreter();
  if (!interp || interp->find('\'') != std::string::npos) return std::nullopt;
  FILE* pipe = ::popen(str("'", *interp, "' --list-tunables 2>/dev/null").c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  std::optional<std::uint64_t> found;
  char line[512];
  constexpr std::string_view key = "glibc.cpu.x86_non_temporal_threshold:";
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    const std::string_view text(line);
    if (!text.starts_with(key)) continue;
    try {
      found = std::stoull(std::string(text.substr(key.size())), nullptr, 0);
    } catch (const std::exception&) {
      found.reset();
    }
  }
  ::pclose(pipe);
  return found;
}

}  // namespace

const last_level_cache& llc() {
  static const last_level_cache cache = [] {
    last_level_cache c;
    c.sysfs_bytes = sysfs_last_level_cache();
    const long sysconf_bytes = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
    c.sysconf_bytes = sysconf_bytes > 0 ? static_cast<std::uint64_t>(sysconf_bytes) : 0;
    return c;
  }();
  return cache;
}

const non_temporal_threshold& glibc_non_temporal_threshold() {
  static const non_temporal_threshold threshold = [] {
    if (const auto bytes = loader_threshold(); bytes && *bytes > 0) {
      return non_temporal_threshold{*bytes, "ld.so --list-tunables"};
    }
    if (llc().bytes() > 0) {
      return non_temporal_threshold{llc().bytes() / 4 * 3,
                                    "estimated as 3/4 of the last-level cache (the loader did not report it)"};
    }
    return non_temporal_threshold{64 * MiB, "assumed 64 MiB (neither the loader nor the system reported a cache size)"};
  }();
  return threshold;
}

std::uint64_t streaming_piece_bytes() { return align_up(glibc_non_temporal_threshold().bytes + 1, 2 * MiB); }

cache_fit check_working_set(std::uint64_t working_set_bytes, std::string_view what) {
  const cache_fit fit{working_set_bytes, llc().bytes()};
  if (fit.fits()) {
    log::warn(what, ": the working set of ", format_bytes(working_set_bytes), " fits the last-level cache (",
              format_bytes(fit.llc_bytes), "): this measures the cache, not memory; the JSON says \"fits_llc\": true");
  }
  return fit;
}

nlohmann::json to_json(const cache_fit& fit) {
  return {{"working_set_bytes", fit.working_set_bytes}, {"llc_bytes", fit.llc_bytes}, {"fits_llc", fit.fits()}};
}

}  // namespace zoe::bench
