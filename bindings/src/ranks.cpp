// A data-parallel caller's view of the ranks: where it stands (the launcher's environment before an
// engine, the engine's communicator after), a host-side sum over the ranks for its own figures
// (the loss), and the bytes the engine's collectives sent within and across nodes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "objects.hpp"
#include "status.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/engine/comm/gather_shards.hpp"
#include "zoe/engine/comm/launcher.hpp"
#include "zoe/engine/comm/pairwise_tree.hpp"
#include "zoe/engine/statistics.hpp"

namespace zoe::bindings {
namespace {

// The struct from the engine's placement; the arithmetic is the engine's alone (the launcher's
// view in launcher.hpp, the communicator's groups after an engine is made).
void fill(zoe_ranks& out, std::uint32_t rank, std::uint32_t size, const engine::launcher_ranks::placement& p) {
  out.rank = rank;
  out.world_size = size;
  out.ranks_per_node = p.ranks_per_node;
  out.node = p.node;
  out.local_rank = p.local_rank;
  out.nodes = p.nodes;
}

// A count or rank of a communicator as the struct's type (a world of 2^32 ranks is not one).
std::uint32_t narrow(std::size_t x) { return static_cast<std::uint32_t>(x); }

}  // namespace

engine::comm_stats engine_traffic(zoe_engine& e) { return engine::comm_traffic(e.engine->resources()); }

}  // namespace zoe::bindings

using zoe::bindings::expect_pointer;
using zoe::bindings::guarded;
using zoe::bindings::live;

extern "C" {

zoe_status zoe_launcher_ranks(zoe_ranks* ranks) {
  return guarded("zoe_launcher_ranks", [&] {
    zoe::bindings::expect_struct(ranks, ZOE_FIELDS_END(zoe_ranks, nodes), "zoe_ranks");
    // The engine's reading of the launcher (launcher.hpp); its config_error is the caller's
    // usage error here, as zoe.h promises.
    std::optional<zoe::engine::launcher_ranks> launch;
    try {
      launch = zoe::engine::launcher_environment();
    } catch (const zoe::config_error& e) {
      throw zoe::usage_error(e.what());
    }
    if (!launch) {
      zoe::bindings::fill(*ranks, 0, 1, {});
      return;
    }
    if (!launch->size) {
      throw zoe::usage_error(zoe::str("the launcher set ", launch->rank_variable,
                                      " but no world size (PMIx tells it through MPI only): make an engine and "
                                      "ask zoe_engine_ranks"));
    }
    zoe::bindings::fill(*ranks, launch->rank, *launch->size, launch->place());
  });
}

zoe_status zoe_engine_ranks(const zoe_engine* engine, zoe_ranks* ranks) {
  return guarded("zoe_engine_ranks", [&] {
    const zoe_engine& e = live(engine, "engine");
    zoe::bindings::expect_struct(ranks, ZOE_FIELDS_END(zoe_ranks, nodes), "zoe_ranks");
    zoe::engine::communicator& world = *e.caller_world;
    using zoe::bindings::narrow;
    // The node-local group is this rank's node; the cross-node group one rank of each node, in
    // node order, so its rank is this rank's node.
    zoe::engine::communicator& node = world.node_local();
    zoe::engine::communicator& across = world.cross_node();
    zoe::bindings::fill(*ranks, narrow(world.rank()), narrow(world.size()),
                        {.ranks_per_node = narrow(node.size()),
                         .node = narrow(across.rank()),
                         .local_rank = narrow(node.rank()),
                         .nodes = narrow(across.size())});
  });
}

zoe_status zoe_all_reduce_sum(zoe_engine* engine, double* values, size_t count) {
  return guarded("zoe_all_reduce_sum", [&] {
    zoe_engine& e = live(engine, "engine");
    if (count > 0) expect_pointer(values, "values");
    zoe::engine::communicator& world = *e.caller_world;
    const std::size_t size = world.size();
    if (size == 1) return;
    if (count > std::numeric_limits<std::size_t>::max() / 2 / sizeof(double) / size) {
      throw zoe::usage_error(zoe::str("count ", count, " doubles times ", size, " ranks overflows"));
    }
    zoe::device& dev = *e.device->dev;
    // Each rank's count first (count 0 too), so a mismatch fails on every rank with the counts
    // named instead of a transfer of mismatched sizes.
    const std::uint64_t mine = count;
    const std::vector<std::byte> gathered_counts =
        zoe::engine::gather_shards(world, dev, std::as_bytes(std::span(&mine, 1)));
    std::vector<std::uint64_t> counts(size, 0);
    std::memcpy(counts.data(), gathered_counts.data(), gathered_counts.size());
    for (std::size_t r = 0; r < size; ++r) {
      if (counts[r] != count) {
        std::string all;
        for (std::size_t k = 0; k < size; ++k) all += zoe::str(k == 0 ? "" : ", ", "rank ", k, ": ", counts[k]);
        throw zoe::usage_error(zoe::str("the ranks pass different counts (", all, "); every rank must pass the same"));
      }
    }
    if (count == 0) return;
    // The values by all-gather, then summed on the host in zoe's pairwise tree over the ranks: the
    // same bits on every rank (a reduction's order inside a transport is its own), and the same
    // tree as the gradients' reductions.
    const std::vector<std::byte> gathered =
        zoe::engine::gather_shards(world, dev, std::as_bytes(std::span(values, count)));
    std::vector<double> all(size * count);
    std::memcpy(all.data(), gathered.data(), gathered.size());
    for (std::size_t i = 0; i < count; ++i) {
      values[i] = zoe::engine::pairwise_tree_sum<double>(
          size, [&](std::size_t r) { return all[r * count + i]; }, [](double& left, double&& right) { left += right; });
    }
  });
}

zoe_status zoe_engine_traffic(zoe_engine* engine, zoe_comm_traffic* traffic) {
  return guarded("zoe_engine_traffic", [&] {
    zoe_engine& e = live(engine, "engine");
    zoe::bindings::expect_struct(traffic, ZOE_FIELDS_END(zoe_comm_traffic, collectives), "zoe_comm_traffic");
    const zoe::engine::comm_stats s = zoe::bindings::engine_traffic(e);
    const zoe::engine::traffic t = s.total();
    traffic->intra_node_bytes = t.intra_node;
    traffic->inter_node_bytes = t.inter_node;
    traffic->collectives = s.calls;
  });
}

}  // extern "C"
