// make_mpi_communicator: the world of one call (a duplicate of MPI_COMM_WORLD), its placement of
// ranks on nodes, and its node-local, cross-node and hpZ sub-groups (splits of that duplicate).
//
// Creation is collective, and MPI's communicator calls block until every rank makes them, so a rank
// that never calls make_communicator would hang the others. Like a collective, creation therefore
// waits at most comm_options::timeout: every rank first sends every other its zoe.ranks_per_node
// and zero_hpz_partition_size (polled, mpi_transfer.hpp), which fails naming the ranks that did not
// arrive, and refuses on every rank alike any disagreement (the splits below follow from these
// settings, so ranks that disagree would make different blocking calls and hang); then the
// duplicate of MPI_COMM_WORLD is made with MPI_Comm_idup, polled with the timeout and the failure
// notices. Once that completes every rank is inside this call with the same settings, so the
// splits that follow (MPI has no non-blocking split) find every rank.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <numeric>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "backends.hpp"
#include "backoff.hpp"
#include "mpi_group.hpp"
#include "mpi_runtime.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::engine::detail {
namespace {

// The ranks per node MPI's shared-memory split finds, after checking that every node holds the
// same number of ranks in one consecutive block of world ranks (as by-slot mapping places them).
std::size_t detect_ranks_per_node(MPI_Comm world, std::size_t world_rank, std::size_t world_size) {
  mpi_runtime& rt = mpi_runtime::instance();
  std::vector<int> first(world_size);  // the lowest world rank on each rank's node
  {
    const auto mpi = rt.serialize();
    MPI_Comm node = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, static_cast<int>(world_rank), MPI_INFO_NULL, &node),
              "mpi: MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)");
    const mpi_comm_owner owned(node);
    const int me = static_cast<int>(world_rank);
    int lowest = me;
    check_mpi(MPI_Allreduce(&me, &lowest, 1, MPI_INT, MPI_MIN, node), "mpi: MPI_Allreduce on the node");
    check_mpi(MPI_Allgather(&lowest, 1, MPI_INT, first.data(), 1, MPI_INT, world), "mpi: MPI_Allgather of nodes");
  }
  // The first node's size; then every rank must sit in the block its world rank says.
  const auto per_node = static_cast<std::size_t>(std::count(first.begin(), first.end(), first[0]));
  std::string misplaced;
  for (std::size_t w = 0; w < world_size; ++w) {
    const std::size_t expected = w / per_node * per_node;
    if (static_cast<std::size_t>(first[w]) != expected) {
      misplaced += str(misplaced.empty() ? "" : ", ", "world rank ", w, " shares a node with world rank ", first[w]);
    }
  }
  if (world_size % per_node != 0 || !misplaced.empty()) {
    throw comm_error(
        str("mpi: ranks are not placed on nodes in equal consecutive blocks (",
            misplaced.empty() ? str(world_size, " ranks do not divide into nodes of ", per_node) : misplaced,
            "); launch with by-slot mapping or set zoe.ranks_per_node"));
  }
  return per_node;
}

// A split of `world` into the group `color`, its ranks ordered by world rank.
mpi_comm_owner split(MPI_Comm world, std::size_t color, std::size_t world_rank) {
  const auto mpi = mpi_runtime::instance().serialize();
  MPI_Comm out = MPI_COMM_NULL;
  check_mpi(MPI_Comm_split(world, static_cast<int>(color), static_cast<int>(world_rank), &out), "mpi: MPI_Comm_split");
  mpi_comm_owner owned(out);
  check_mpi(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN), "mpi: MPI_Comm_set_errhandler");
  return owned;
}

constexpr std::string_view creation = "make_communicator on mpi (world)";

// The settings that decide which blocking calls creation makes after the duplicate: every rank
// must pass the same.
struct world_settings {
  std::uint64_t ranks_per_node = 0;
  std::uint64_t hpz_partition_size = 0;
};

// config_error when the ranks disagree on a setting, naming each value with the world ranks that
// passed it. Every rank holds every rank's settings, so each throws the same message.
void refuse_disagreement(const std::vector<world_settings>& all) {
  std::string disagreements;
  const auto check = [&](std::string_view key, std::uint64_t world_settings::*field) {
    // Each value in the order world ranks first pass it, with the ranks that pass it.
    std::vector<std::pair<std::uint64_t, std::vector<std::size_t>>> values;
    for (std::size_t w = 0; w < all.size(); ++w) {
      const std::uint64_t v = all[w].*field;
      const auto it = std::find_if(values.begin(), values.end(), [v](const auto& e) { return e.first == v; });
      if (it == values.end()) {
        values.emplace_back(v, std::vector<std::size_t>{w});
      } else {
        it->second.push_back(w);
      }
    }
    if (values.size() == 1) return;
    std::string text;
    for (const auto& [value, ranks] : values) {
      std::string list;
      for (const std::size_t w : ranks) list += str(list.empty() ? "" : ", ", w);
      text += str(text.empty() ? "" : "; ", value, " on world rank", ranks.size() > 1 ? "s " : " ", list);
    }
    disagreements += str(disagreements.empty() ? "" : "; and ", key, ": ", text);
  };
  check("zoe.ranks_per_node", &world_settings::ranks_per_node);
  check("zero_optimization.zero_hpz_partition_size", &world_settings::hpz_partition_size);
  if (!disagreements.empty()) {
    throw config_error(str(creation, ": the ranks disagree on ", disagreements, " (every rank must pass the same)"));
  }
}

// Returns once every rank of the world called make_communicator with the same settings; comm_error
// naming the ranks that did not arrive within `timeout` (the others are told, as for a
// collective), config_error (refuse_disagreement) on every rank when they disagree.
void await_arrival(mpi_runtime& rt, const world_settings& mine, std::chrono::milliseconds timeout) {
  const std::size_t size = rt.world_size();
  const std::size_t me = rt.world_rank();
  std::vector<std::size_t> world_ranks(size);
  std::iota(world_ranks.begin(), world_ranks.end(), std::size_t{0});
  // Until the nodes are known, messages place every rank on one node (or as zoe.ranks_per_node says).
  const std::size_t message_nodes = mine.ranks_per_node != 0 ? mine.ranks_per_node : size;
  const mpi_group_view view{rt.control_comm(), me, &world_ranks, message_nodes, timeout};
  mpi_exchange x(view, rt.next_creation_tag(), std::string(creation));
  std::vector<world_settings> all(size);
  all[me] = mine;
  for (std::size_t p = 0; p < size; ++p) {
    if (p == me) continue;
    x.send(p, &mine, sizeof mine);
    x.receive(p, &all[p], sizeof(world_settings));
  }
  x.run();
  refuse_disagreement(all);
}

// A duplicate of MPI_COMM_WORLD returning errors as codes, made with MPI_Comm_idup and polled: it
// fails with comm_error after `timeout`, or at once on another rank's failure notice.
mpi_comm_owner duplicate_world(mpi_runtime& rt, std::chrono::milliseconds timeout) {
  MPI_Comm dup = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  {
    const auto mpi = rt.serialize();
    check_mpi(MPI_Comm_idup(MPI_COMM_WORLD, &dup, &request), "mpi: MPI_Comm_idup of MPI_COMM_WORLD");
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  backoff wait;
  for (;;) {
    int done = 0;
    {
      const auto mpi = rt.serialize();
      check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), "mpi: MPI_Test of MPI_Comm_idup");
    }
    if (done != 0) break;
    // The pending duplicate cannot be cancelled: it is left to MPI (the process fails anyway).
    if (const auto notice = rt.poll_notice()) {
      if (notice->sender_skips_finalize) rt.record_failure();
      throw comm_error(str(creation, ": world rank ", notice->world_rank, " failed: ", notice->message));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      rt.record_failure();  // a rank stuck in MPI would hang MPI_Finalize
      const std::string text = str(creation, ": MPI_Comm_idup of MPI_COMM_WORLD did not complete within ",
                                   static_cast<double>(timeout.count()) / 1000.0, " s: a rank of world ranks 0-",
                                   rt.world_size() - 1, " did not take part");
      rt.announce_failure(rt.world_rank(), text);
      throw comm_error(text);
    }
    wait.pause();
  }
  mpi_comm_owner owned(dup);
  const auto mpi = rt.serialize();
  check_mpi(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), "mpi: MPI_Comm_set_errhandler");
  return owned;
}

}  // namespace

std::unique_ptr<communicator> make_mpi_communicator(device& dev, const comm_options& options, mpi_use use) {
  // Before MPI is touched, alike on every rank (backends.hpp says why).
  if (use == mpi_use::collectives && dev.kind() != device_kind::host) {
    throw config_error(str("zoe.comm.backend: mpi runs its exchanges in host callbacks of the device's streams, which ",
                           dev.name(), " may serialise across streams (two worlds could deadlock): use nccl on it"));
  }
  mpi_runtime& rt = mpi_runtime::instance();
  const std::size_t size = rt.world_size();
  const std::size_t me = rt.world_rank();
  // The sizes first, alike on every rank, so a refusal leaves no rank inside a collective.
  if (options.ranks_per_node != 0 && size % options.ranks_per_node != 0) {
    throw config_error(str("zoe.ranks_per_node: ", options.ranks_per_node, " does not divide the world size ", size,
                           " (mpi launched ", size, " ranks)"));
  }
  if (options.hpz_partition_size == 0 || size % options.hpz_partition_size != 0) {
    throw config_error(str("zero_optimization.zero_hpz_partition_size: ", options.hpz_partition_size,
                           " does not divide the world size ", size, " (1: no hpZ)"));
  }
  if (options.timeout.count() <= 0) {
    throw config_error(str("zoe.comm.timeout_s: ", static_cast<double>(options.timeout.count()) / 1000.0,
                           " s is not a positive time"));
  }
  await_arrival(rt, {.ranks_per_node = options.ranks_per_node, .hpz_partition_size = options.hpz_partition_size},
                options.timeout);
  mpi_comm_owner world = duplicate_world(rt, options.timeout);
  const std::size_t per_node =
      options.ranks_per_node != 0 ? options.ranks_per_node : detect_ranks_per_node(world.get(), me, size);
  const std::size_t hpz = options.hpz_partition_size;

  // Members of each group, as bytes_to() and the header describe them (rank_group.hpp). A
  // sub-group's lowest world rank names it, so it is the colour of its split.
  rank_group node_shape = make_rank_group(group_kind::node_local, size, me, per_node, hpz);
  rank_group cross_shape = make_rank_group(group_kind::cross_node, size, me, per_node, hpz);
  rank_group hpz_shape = make_rank_group(group_kind::hpz, size, me, per_node, hpz);
  // Each split is collective over the world; whether a sub-group is the world itself depends on
  // the sizes only, so every rank makes the same calls.
  const auto split_of = [&](const rank_group& g) {
    return g.size() == size ? mpi_comm_owner() : split(world.get(), g.world_ranks.front(), me);
  };
  mpi_comm_owner node_comm = split_of(node_shape);
  mpi_comm_owner cross_comm = split_of(cross_shape);
  mpi_comm_owner hpz_comm = split_of(hpz_shape);

  auto out = std::make_unique<mpi_group>(
      dev, std::move(world), make_rank_group(group_kind::world, size, me, per_node, hpz), options.timeout, nullptr);
  // The sub-groups that are not the world itself; the world stands in for the others.
  const auto group_of = [&](mpi_comm_owner comm, rank_group g) -> std::unique_ptr<mpi_group> {
    if (g.size() == size) return nullptr;
    return std::make_unique<mpi_group>(dev, std::move(comm), std::move(g), options.timeout, out.get());
  };
  std::unique_ptr<mpi_group> node_group = group_of(std::move(node_comm), std::move(node_shape));
  std::unique_ptr<mpi_group> cross_group = group_of(std::move(cross_comm), std::move(cross_shape));
  std::unique_ptr<mpi_group> hpz_group = group_of(std::move(hpz_comm), std::move(hpz_shape));
  out->adopt(std::move(node_group), std::move(cross_group), std::move(hpz_group));
  return out;
}

}  // namespace zoe::engine::detail
