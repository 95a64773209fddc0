// zoe's own settings, under the top-level "zoe" key (engine/CONFIG.md, "The zoe block").
#include <cmath>
#include <cstdint>
#include <string>

#include "config/blocks.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine::detail {
namespace {

block_spec device_block(zoe_settings& z) {
  block_spec b;
  b.fields = {choice_field("kind", z.device_kind, {"auto", "host", "cuda"}),
              optional_uint_field("budget_bytes", z.device_budget, 1)};
  return b;
}

field extra_paths_field(std::vector<std::filesystem::path>& paths) {
  return field{"extra_paths",
               [&paths](const json& v, const std::string& key, read_context& ctx) {
                 if (!v.is_array()) ctx.fail(key, str("expected an array of directory paths, got ", describe(v)));
                 paths.clear();
                 for (std::size_t i = 0; i < v.size(); ++i) {
                   const std::string element = str(key, '[', i, ']');
                   std::string p = to_string(v[i], element, ctx);
                   if (p.empty()) ctx.fail(element, "expected a directory path, got an empty string");
                   paths.emplace_back(std::move(p));
                 }
               },
               [&paths] {
                 json out = json::array();
                 for (const auto& p : paths) out.push_back(p.string());
                 return out;
               },
               {}};
}

block_spec swap_block(zoe_settings& z) {
  block_spec b;
  b.fields = {bool_field("checksums", z.checksums),
              choice_field("engine", z.io_engine, {"auto", "uring", "aio", "posix"}),
              extra_paths_field(z.extra_swap_paths), choice_field("shadows", z.shadows, {"full", "bounded"})};
  return b;
}

// Fractions are compared with this slack so that 0.3 + 0.7 (0.99999999999999989) sums to 1.
constexpr double sum_slack = 1e-9;

block_spec fractions_block(tier_fractions& f) {
  block_spec b;
  b.fields = {number_field("device", f.device, 0.0, 1.0), number_field("host", f.host, 0.0, 1.0),
              number_field("nvme", f.nvme, 0.0, 1.0)};
  b.finish = [&f](read_context& ctx, const std::string& path, const auto& /*given*/) {
    const double sum = f.device + f.host + f.nvme;
    if (std::fabs(sum - 1.0) > sum_slack) {
      ctx.fail(path, str("the fractions device + host + nvme must sum to 1, got ", f.device, " + ", f.host, " + ",
                         f.nvme, " = ", sum));
    }
  };
  return b;
}

// zoe.placement.<state>: absent is null (the state follows the DeepSpeed keys).
field state_field(state_kind s, std::optional<tier_fractions>& target) {
  return field{state_kind_name(s), {}, {}, [&target](read_context& ctx, const json* node, const std::string& key) {
                 if (node == nullptr) {
                   ctx.entries.push_back(config_entry{key, "null", config_source::default_value});
                   return;
                 }
                 read_block(ctx, *node, key, fractions_block(target.emplace()));
               }};
}

block_spec placement_block(zoe_settings& z) {
  block_spec b;
  for (std::size_t i = 0; i < state_kind_count; ++i) {
    b.fields.push_back(state_field(static_cast<state_kind>(i), z.placement[i]));
  }
  return b;
}

// Byte counts up to 2^56 (64 PiB), so the plan's sums and roundings of them cannot overflow.
constexpr std::uint64_t max_share_bytes = std::uint64_t{1} << 56;

block_spec activations_block(zoe_settings& z) {
  block_spec b;
  b.fields = {uint_field("host_bytes", z.activations.host_bytes, 0, max_share_bytes),
              uint_field("nvme_bytes", z.activations.nvme_bytes, 0, max_share_bytes),
              uint_field("prefetch_bytes", z.activations.prefetch_bytes, 0, max_share_bytes)};
  return b;
}

// The longest timeout zoe.comm.timeout_s takes: a week, far inside std::chrono::milliseconds.
constexpr double max_timeout_s = 7.0 * 24 * 3600;

block_spec comm_block(zoe_settings& z) {
  block_spec b;
  b.fields = {choice_field("backend", z.comm.backend, {"auto", "single", "mpi", "nccl", "host"}),
              number_field("timeout_s", z.comm.timeout_s, 0.0, max_timeout_s)};
  b.finish = [&z](read_context& ctx, const std::string& path, const auto& /*given*/) {
    // number_field's range is closed; a timeout of 0 would fail every collective that waits at all.
    if (!(z.comm.timeout_s > 0)) {
      ctx.fail(path + ".timeout_s", str("must be > 0 seconds, got ", z.comm.timeout_s));
    }
  };
  return b;
}

// Ranks per node: up to 2^20, far above any node's core count (a typo fails here, not in MPI).
constexpr std::uint64_t max_ranks_per_node = std::uint64_t{1} << 20;
// Pending memory: up to 1 PiB (the plan checks it against the machine; this bounds its sums).
constexpr std::uint64_t max_pending_bytes = std::uint64_t{1} << 50;

}  // namespace

block_spec zoe_block(zoe_settings& zoe) {
  block_spec b;
  b.fields = {block_field("device", zoe, device_block),
              block_field("swap", zoe, swap_block),
              choice_field("numa", zoe.numa_policy, {"none", "local", "interleave"}),
              block_field("placement", zoe, placement_block),
              block_field("activations", zoe, activations_block),
              block_field("comm", zoe, comm_block),
              uint_field("ranks_per_node", zoe.ranks_per_node, 0, max_ranks_per_node),
              bool_field("optimizer_in_backward", zoe.optimizer_in_backward),
              uint_field("optimizer_pending_bytes", zoe.optimizer_pending_bytes, 0, max_pending_bytes)};
  return b;
}

}  // namespace zoe::engine::detail
