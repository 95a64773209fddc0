#include "plan_report.hpp"

#include <sstream>

#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"

namespace zoe::plan {
namespace {

using engine::memory_kind;

constexpr std::array<memory_kind, engine::memory_kind_count> all_memories = {memory_kind::device, memory_kind::pinned,
                                                                             memory_kind::pageable, memory_kind::nvme};

std::uint64_t total_of(const engine::footprint_plan& plan, memory_kind m) {
  switch (m) {
    case memory_kind::device: return plan.device_bytes;
    case memory_kind::pinned: return plan.pinned_bytes;
    case memory_kind::pageable: return plan.pageable_bytes;
    case memory_kind::nvme: return plan.nvme_bytes;
  }
  return 0;
}

std::string joined(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) out += out.empty() ? k : ", " + k;
  return out;
}

std::string limit_text(std::uint64_t bytes) {
  return bytes == std::numeric_limits<std::uint64_t>::max() ? "unlimited" : format_bytes(bytes);
}

}  // namespace

std::vector<std::string> missing_path_warnings(const engine::footprint_plan& plan,
                                               const engine::machine_limits& machine) {
  std::vector<std::string> out;
  for (const auto& disk : machine.disk_free) {
    if (disk.free || std::find(plan.swap_paths.begin(), plan.swap_paths.end(), disk.path) == plan.swap_paths.end()) {
      continue;
    }
    out.push_back(str("swap path '", disk.path.string(),
                      "' does not exist here: its free space is unknown (an engine refuses it when it starts)"));
  }
  return out;
}

std::string render_text(const plan_report& r) {
  std::ostringstream out;
  out << "configuration:\n" << engine::render_config_lines(r.loaded);
  out << "\nmodel: " << r.model << "\n";
  out << "\nfootprint plan (one rank):\n";
  for (const memory_kind m : all_memories) {
    out << "  " << engine::memory_kind_name(m) << ": " << format_bytes(total_of(r.plan, m)) << "\n";
    for (const auto& item : r.plan.items) {
      if (item.memory != m) continue;
      out << "    " << format_bytes(item.bytes) << "  " << item.what;
      if (item.pool) {
        out << " (mover." << item.pool->key << ": " << item.pool->slot_count << " slots of "
            << format_bytes(item.pool->slot_bytes) << ")";
      }
      out << "  [" << joined(item.keys) << "]\n";
    }
  }
  if (!r.plan.swap_paths.empty()) {
    out << "  swap store: " << r.plan.swap_paths.size() << " path(s), block_size "
        << format_bytes(r.plan.swap_block_size) << "\n";
  }
  out << "\nthis machine:\n  device budget " << format_bytes(r.machine.device_budget) << "\n  RLIMIT_MEMLOCK "
      << limit_text(r.machine.memlock_limit) << "\n  MemAvailable " << format_bytes(r.machine.host_available) << "\n";
  for (const auto& disk : r.machine.disk_free) {
    out << "  " << disk.path.string() << ": "
        << (disk.free ? format_bytes(*disk.free) + " free" : std::string("does not exist")) << "\n";
  }
  if (r.shortfalls.empty()) {
    out << "\nthe plan fits this machine\n";
  } else {
    out << "\nthe plan does NOT fit this machine:\n";
    for (const auto& s : r.shortfalls) out << "  " << s << "\n";
  }
  return out.str();
}

nlohmann::json render_json(const plan_report& r) {
  nlohmann::json items = nlohmann::json::array();
  for (const auto& item : r.plan.items) {
    nlohmann::json j = {{"what", item.what},
                        {"memory", engine::memory_kind_name(item.memory)},
                        {"bytes", item.bytes},
                        {"keys", item.keys}};
    if (item.pool) {
      j["pool"] = {{"key", "mover." + item.pool->key},
                   {"slot_bytes", item.pool->slot_bytes},
                   {"slot_count", item.pool->slot_count}};
    }
    items.push_back(std::move(j));
  }
  nlohmann::json paths = nlohmann::json::array();
  for (const auto& p : r.plan.swap_paths) paths.push_back(p.string());
  nlohmann::json disks = nlohmann::json::array();
  for (const auto& disk : r.machine.disk_free) {
    disks.push_back({{"path", disk.path.string()},
                     {"free_bytes", disk.free ? nlohmann::json(*disk.free) : nlohmann::json(nullptr)}});
  }
  nlohmann::json warnings = nlohmann::json::array();
  for (const auto& w : r.loaded.warnings) warnings.push_back(w.message);
  for (const auto& w : r.warnings) warnings.push_back(w);
  return {{"config", nlohmann::json::parse(engine::render_config_json(r.loaded, -1))},
          {"plan",
           {{"model", r.model},
            {"device_bytes", r.plan.device_bytes},
            {"pinned_bytes", r.plan.pinned_bytes},
            {"pageable_bytes", r.plan.pageable_bytes},
            {"nvme_bytes", r.plan.nvme_bytes},
            {"arena_bytes", r.plan.arena_bytes},
            {"param_buffer_count", r.plan.param_buffer_count},
            {"param_buffer_bytes", r.plan.param_buffer_bytes},
            {"optimizer_buffer_count", r.plan.optimizer_buffer_count},
            {"optimizer_buffer_bytes", r.plan.optimizer_buffer_bytes},
            {"local_gradient_device_bytes", r.plan.local_gradient_device_bytes},
            {"local_gradient_host_bytes", r.plan.local_gradient_host_bytes},
            {"swap_paths", paths},
            {"swap_block_size", r.plan.swap_block_size},
            {"items", items},
            {"machine",
             {{"device_budget", r.machine.device_budget},
              {"memlock_limit", r.machine.memlock_limit},
              {"host_available", r.machine.host_available},
              {"disk_free", disks}}},
            {"fits", r.shortfalls.empty()},
            {"shortfalls", r.shortfalls}}},
          {"warnings", warnings}};
}

}  // namespace zoe::plan
