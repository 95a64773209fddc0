// What this machine offers the plan, and where the plan falls short of it.
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <string>

#include "zoe/core/check.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/tiers/footprint_plan.hpp"

namespace zoe::engine {
namespace {

constexpr std::uint64_t unlimited = std::numeric_limits<std::uint64_t>::max();

// CAP_IPC_LOCK (capability 14) lets mlock pass RLIMIT_MEMLOCK, as root in most containers has.
bool can_lock_without_limit() {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const std::uint64_t caps = std::stoull(line.substr(7), nullptr, 16);
    return (caps & (std::uint64_t{1} << 14)) != 0;
  }
  return false;
}

std::uint64_t memlock_limit(device_kind kind) {
  // The CUDA driver pins registered memory itself, not through mlock, so RLIMIT_MEMLOCK does not
  // bound it; the host device locks with mlock.
  if (kind == device_kind::cuda || can_lock_without_limit()) return unlimited;
  rlimit limit{};
  if (::getrlimit(RLIMIT_MEMLOCK, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return unlimited;
  return limit.rlim_cur;
}

std::uint64_t mem_available() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("MemAvailable:", 0) == 0) return std::stoull(line.substr(13)) * KiB;
  }
  return 0;
}

std::optional<std::uint64_t> free_bytes(const std::filesystem::path& path) {
  struct statvfs fs {};
  if (::statvfs(path.c_str(), &fs) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(fs.f_bavail) * fs.f_frsize;
}

std::optional<std::uint64_t> filesystem_of(const std::filesystem::path& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return static_cast<std::uint64_t>(st.st_dev);
}

// The keys of every item in `memories`, each once, those of the largest items first, then `extra`.
std::string keys_of(const footprint_plan& plan, std::initializer_list<memory_kind> memories,
                    const std::vector<std::string>& extra) {
  std::vector<const plan_item*> items;
  for (const plan_item& item : plan.items) {
    if (std::find(memories.begin(), memories.end(), item.memory) != memories.end()) items.push_back(&item);
  }
  std::stable_sort(items.begin(), items.end(),
                   [](const plan_item* a, const plan_item* b) { return a->bytes > b->bytes; });
  std::vector<std::string> keys;
  for (const plan_item* item : items) keys.insert(keys.end(), item->keys.begin(), item->keys.end());
  keys.insert(keys.end(), extra.begin(), extra.end());
  std::string out;
  std::vector<std::string> seen;
  for (const std::string& k : keys) {
    if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
    seen.push_back(k);
    out += out.empty() ? k : ", " + k;
  }
  return out;
}

}  // namespace

machine_limits measure_machine(const engine_config& config) {
  const device_selection selected =
      select_device({.kind = config.zoe.device_kind, .budget_bytes = config.zoe.device_budget, .cuda_ordinal = 0});
  return measure_machine(config, *selected.dev);
}

machine_limits measure_machine(const engine_config& config, const device& dev) {
  machine_limits out;
  out.device_budget = dev.usage().budget_bytes;
  out.memlock_limit = memlock_limit(dev.kind());
  out.host_available = mem_available();
  for (const auto& path : swap_paths(config)) {
    out.disk_free.push_back({.path = path, .free = free_bytes(path), .filesystem = filesystem_of(path)});
  }
  return out;
}

std::vector<std::string> plan_shortfalls(const footprint_plan& plan, const machine_limits& limits) {
  std::vector<std::string> out;
  if (plan.device_bytes > limits.device_budget) {
    out.push_back(str("device memory: the plan needs ", format_bytes(plan.device_bytes), " but the device budget is ",
                      format_bytes(limits.device_budget), "; change ",
                      keys_of(plan, {memory_kind::device}, {"zoe.device.budget_bytes"})));
  }
  if (plan.pinned_bytes > limits.memlock_limit) {
    out.push_back(str("pinned host memory: the plan needs ", format_bytes(plan.pinned_bytes),
                      " but RLIMIT_MEMLOCK allows ", format_bytes(limits.memlock_limit), "; change ",
                      keys_of(plan, {memory_kind::pinned}, {}), ", or raise the limit (ulimit -l)"));
  }
  // The totals saturate at UINT64_MAX ("more than any machine"); so does their sum, which must
  // not wrap to a few bytes that fit.
  const std::uint64_t host =
      plan.pageable_bytes > unlimited - plan.pinned_bytes ? unlimited : plan.pinned_bytes + plan.pageable_bytes;
  if (host > limits.host_available) {
    out.push_back(str("host memory: the plan needs ", format_bytes(host), " (", format_bytes(plan.pinned_bytes),
                      " pinned, ", format_bytes(plan.pageable_bytes), " pageable) but MemAvailable is ",
                      format_bytes(limits.host_available), "; change ",
                      keys_of(plan, {memory_kind::pinned, memory_kind::pageable}, {})));
  }
  if (plan.nvme_bytes > 0 && !plan.swap_paths.empty()) {
    // The store gives every path an equal share of its capacity (a whole number of stripes); the
    // paths on one filesystem take their shares from the same free bytes.
    const std::uint64_t share = plan.nvme_bytes / plan.swap_paths.size();
    std::vector<bool> done(limits.disk_free.size(), false);
    for (std::size_t i = 0; i < limits.disk_free.size(); ++i) {
      const swap_disk& disk = limits.disk_free[i];
      if (done[i] || std::find(plan.swap_paths.begin(), plan.swap_paths.end(), disk.path) == plan.swap_paths.end()) {
        continue;
      }
      std::string names = str("'", disk.path.string(), "'");
      std::uint64_t need = share;
      for (std::size_t j = i + 1; j < limits.disk_free.size(); ++j) {
        const swap_disk& other = limits.disk_free[j];
        if (!disk.filesystem || other.filesystem != disk.filesystem ||
            std::find(plan.swap_paths.begin(), plan.swap_paths.end(), other.path) == plan.swap_paths.end()) {
          continue;
        }
        done[j] = true;
        need += share;
        names += str(", '", other.path.string(), "'");
      }
      if (!disk.free || *disk.free >= need) continue;
      const bool alone = need == share;
      out.push_back(str(alone ? "swap path " : "swap paths ", names, alone ? "" : " (one filesystem)", ": ",
                        alone ? "its share" : "their shares", " of the swap store ", alone ? "is " : "are ",
                        format_bytes(need), alone ? "" : " together", " but ",
                        alone ? "it has " : "the filesystem has ", format_bytes(*disk.free), " free; change ",
                        keys_of(plan, {memory_kind::nvme}, {"zoe.swap.extra_paths"})));
    }
  }
  return out;
}

void check_plan_fits(const footprint_plan& plan, const machine_limits& limits) {
  const std::vector<std::string> shortfalls = plan_shortfalls(plan, limits);
  if (shortfalls.empty()) return;
  std::string text = "the footprint plan does not fit this machine:";
  for (const std::string& s : shortfalls) text += "\n  " + s;
  throw config_error(text);
}

}  // namespace zoe::engine
