// The host backend on ranks that are threads of one process, whose collectives meet in an
// in-process exchange (host_exchange.hpp) in place of torch.distributed: each collective's result
// against what the mpi backend gives (the values are small integers, so every reduction order adds
// them exactly), the calls the host sees (one per coalesced collective on the host device, the
// pair alone for point-to-point, every group asked for on every rank), the bytes counted by
// bytes_to()'s rule, a host failure named, abort(), and the configuration's refusals.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "host_exchange.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/error.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/engine/comm/host_collectives.hpp"

namespace zoe::engine {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::host_exchange;

// One rank's world on a host device of its own, as each process of a torchrun job has.
struct rank_rig {
  std::unique_ptr<device> dev = make_host_device(std::uint64_t{64} << 20);
  device_stream stream = dev->create_stream();
  std::unique_ptr<communicator> world;
};

comm_options host_options(host_exchange& ex, std::size_t rank, std::size_t hpz = 1) {
  comm_options o;
  o.host = ex.rank(rank);
  o.hpz_partition_size = hpz;
  return o;
}

// Runs body(rank, rig) on every rank of `ex`, each with its world made through the host.
void on_ranks(host_exchange& ex, const std::function<void(std::size_t, rank_rig&)>& body, std::size_t hpz = 1) {
  ex.run([&](std::size_t r) {
    rank_rig rig;
    rig.world = make_communicator(*rig.dev, host_options(ex, r, hpz));
    body(r, rig);
    rig.dev->synchronize(rig.stream.view());
  });
}

// Rank r's values: r * 100 + i for i in [0, n).
std::vector<float> values_of(std::size_t r, std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(r * 100 + i);
  return v;
}

TEST(HostCommunicator, AllGatherGivesEveryRanksBlockInRankOrderAlsoInPlace) {
  host_exchange ex(3);
  on_ranks(ex, [&](std::size_t r, rank_rig& rig) {
    const std::vector<float> mine = values_of(r, 4);
    std::vector<float> out(12, -1.0F);
    rig.world->all_gather(mine.data(), out.data(), 16, rig.stream.view());
    std::vector<float> in_place(12, -1.0F);
    std::copy(mine.begin(), mine.end(), in_place.begin() + static_cast<std::ptrdiff_t>(r * 4));
    rig.world->all_gather(in_place.data() + r * 4, in_place.data(), 16, rig.stream.view());
    rig.dev->synchronize(rig.stream.view());
    std::vector<float> expected;
    for (std::size_t p = 0; p < 3; ++p) {
      const std::vector<float> b = values_of(p, 4);
      expected.insert(expected.end(), b.begin(), b.end());
    }
    EXPECT_EQ(out, expected);
    EXPECT_EQ(in_place, expected);
    // bytes_to's rule: the 16 bytes to each of the 2 others, all on this node.
    const comm_stats s = rig.world->stats();
    EXPECT_EQ(s.of(collective::all_gather).intra_node, 2 * 2 * 16U);
    EXPECT_EQ(s.calls, 2U);
    EXPECT_EQ(rig.world->name(), "host (world)");
  });
  EXPECT_EQ(ex.calls(0, "all_gather"), 2U);
}

TEST(HostCommunicator, CoalescedAllGatherIsOneHostCallLandingEachPart) {
  host_exchange ex(2);
  on_ranks(ex, [&](std::size_t r, rank_rig& rig) {
    const std::vector<float> a = values_of(r, 3);
    const std::vector<float> b = values_of(r + 10, 1);
    std::vector<float> out_a(6, -1.0F);
    std::vector<float> out_b(2, -1.0F);
    const std::array parts{gather_part{a.data(), out_a.data(), 12}, gather_part{b.data(), out_b.data(), 4}};
    rig.world->all_gather_coalesced(parts, rig.stream.view());
    rig.dev->synchronize(rig.stream.view());
    std::vector<float> expected_a = values_of(0, 3);
    const std::vector<float> a1 = values_of(1, 3);
    expected_a.insert(expected_a.end(), a1.begin(), a1.end());
    EXPECT_EQ(out_a, expected_a);
    EXPECT_EQ(out_b, (std::vector<float>{1000.0F, 1100.0F}));
    EXPECT_EQ(rig.world->stats().of(collective::all_gather).intra_node, 16U);
  });
  EXPECT_EQ(ex.calls(0, "all_gather"), 1U);
  EXPECT_EQ(ex.calls(1, "all_gather"), 1U);
}

TEST(HostCommunicator, ReduceScatterSumsAndMeansEachRanksBlockAlsoInPlace) {
  host_exchange ex(2);
  on_ranks(ex, [&](std::size_t r, rank_rig& rig) {
    const std::vector<float> send = values_of(r, 6);  // 2 blocks of 3
    std::vector<float> sum(3, -1.0F);
    std::vector<float> mean(3, -1.0F);
    rig.world->reduce_scatter(send.data(), sum.data(), 3, kernels::dtype::fp32, reduce_op::sum, rig.stream.view());
    rig.world->reduce_scatter(send.data(), mean.data(), 3, kernels::dtype::fp32, reduce_op::mean, rig.stream.view());
    std::vector<float> in_place = send;
    rig.world->reduce_scatter(in_place.data(), in_place.data() + r * 3, 3, kernels::dtype::fp32, reduce_op::sum,
                              rig.stream.view());
    rig.dev->synchronize(rig.stream.view());
    for (std::size_t k = 0; k < 3; ++k) {
      const float expected = static_cast<float>(0 + 100 + 2 * (r * 3 + k));  // rank 0's + rank 1's element
      EXPECT_EQ(sum[k], expected) << k;
      EXPECT_EQ(mean[k], expected / 2) << k;
      EXPECT_EQ(in_place[r * 3 + k], expected) << k;
    }
    EXPECT_EQ(rig.world->stats().of(collective::reduce_scatter).intra_node, 3 * 12U);
  });
}

TEST(HostCommunicator, CoalescedReduceScatterOfOneDtypeIsOneHostCall) {
  host_exchange ex(2);
  on_ranks(ex, [&](std::size_t r, rank_rig& rig) {
    const std::vector<float> a = values_of(r, 4);  // 2 blocks of 2
    const std::vector<float> b = values_of(r, 2);  // 2 blocks of 1
    std::vector<float> out_a(2, -1.0F);
    std::vector<float> out_b(1, -1.0F);
    const std::array parts{reduce_part{a.data(), out_a.data(), 2, kernels::dtype::fp32},
                           reduce_part{b.data(), out_b.data(), 1, kernels::dtype::fp32}};
    rig.world->reduce_scatter_coalesced(parts, reduce_op::sum, rig.stream.view());
    rig.dev->synchronize(rig.stream.view());
    EXPECT_EQ(out_a,
              (std::vector<float>{static_cast<float>(100 + 2 * (2 * r)), static_cast<float>(100 + 2 * (2 * r + 1))}));
    EXPECT_EQ(out_b, (std::vector<float>{static_cast<float>(100 + 2 * r)}));
  });
  EXPECT_EQ(ex.calls(0, "reduce_scatter"), 1U);
}

TEST(HostCommunicator, AllToAllSendsBlockDToRankD) {
  host_exchange ex(3);
  on_ranks(ex, [&](std::size_t r, rank_rig& rig) {
    const std::vector<float> send = values_of(r, 3);
    std::vector<float> recv(3, -1.0F);
    rig.world->all_to_all(send.data(), recv.data(), 4, rig.stream.view());
    rig.dev->synchronize(rig.stream.view());
    for (std::size_t p = 0; p < 3; ++p) EXPECT_EQ(recv[p], static_cast<float>(p * 100 + r)) << p;
  });
}

TEST(HostCommunicator, AllReduceSumsInPlace) {
  host_exchange ex(3);
  on_ranks(ex, [&](std::size_t r, rank_rig& rig) {
    std::vector<float> v = values_of(r, 5);
    rig.world->all_reduce(v.data(), v.data(), 5, kernels::dtype::fp32, reduce_op::sum, rig.stream.view());
    rig.dev->synchronize(rig.stream.view());
    for (std::size_t k = 0; k < 5; ++k) EXPECT_EQ(v[k], static_cast<float>(300 + 3 * k)) << k;
    // bytes_to's all-reduce: chunk(dest) + chunk(rank) of 5 floats over 3 ranks, to each other rank.
    std::uint64_t expected = 0;
    for (std::size_t d = 0; d < 3; ++d) expected += bytes_to(collective::all_reduce, 3, r, d, 20, 0, 4);
    EXPECT_EQ(rig.world->stats().of(collective::all_reduce).intra_node, expected);
  });
}

TEST(HostCommunicator, BroadcastOverwritesEveryRankWithTheRoots) {
  host_exchange ex(3);
  on_ranks(ex, [&](std::size_t r, rank_rig& rig) {
    std::vector<float> v = values_of(r, 2);
    rig.world->broadcast(v.data(), 8, 2, rig.stream.view());
    rig.dev->synchronize(rig.stream.view());
    EXPECT_EQ(v, values_of(2, 2));
    EXPECT_EQ(rig.world->stats().of(collective::broadcast).intra_node, r == 2 ? 16U : 0U);
  });
}

TEST(HostCommunicator, PointToPointIsHandedToTheSenderAndReceiverAlone) {
  host_exchange ex(3);
  on_ranks(ex, [&](std::size_t r, rank_rig& rig) {
    std::vector<float> v = values_of(r, 2);
    rig.world->point_to_point(r == 1 ? nullptr : v.data(), 8, 2, 0, rig.stream.view());
    rig.dev->synchronize(rig.stream.view());
    EXPECT_EQ(v, r == 0 ? values_of(2, 2) : values_of(r, 2));
    EXPECT_EQ(rig.world->stats().of(collective::point_to_point).intra_node, r == 2 ? 8U : 0U);
    EXPECT_EQ(rig.world->stats().calls, 1U);
  });
  EXPECT_EQ(ex.calls(0, "point_to_point"), 1U);
  EXPECT_EQ(ex.calls(1, "point_to_point"), 0U);
  EXPECT_EQ(ex.calls(2, "point_to_point"), 1U);
}

TEST(HostCommunicator, BarrierRunsAfterTheGroupsQueuedCollectives) {
  host_exchange ex(2);
  on_ranks(ex, [&](std::size_t r, rank_rig& rig) {
    const std::vector<float> mine = values_of(r, 1);
    std::vector<float> out(2, -1.0F);
    rig.world->all_gather(mine.data(), out.data(), 4, rig.stream.view());
    // Not synchronized: the barrier waits for the gather's turn, so the host sees them in order.
    rig.world->barrier();
    EXPECT_EQ(out, (std::vector<float>{0.0F, 100.0F}));
  });
  EXPECT_EQ(ex.calls(1, "barrier"), 1U);
}

TEST(HostCommunicator, SubGroupsAreAskedForOnEveryRankInOneOrderAndDestroyed) {
  // 4 ranks as 2 nodes of 2, hpZ groups of 2 (the node-local groups again: not asked for twice).
  host_exchange ex(4, 2);
  on_ranks(
      ex,
      [&](std::size_t r, rank_rig& rig) {
        communicator& node = rig.world->node_local();
        communicator& cross = rig.world->cross_node();
        EXPECT_EQ(&rig.world->hpz(), &node);
        EXPECT_EQ(node.name(), "host (node-local)");
        EXPECT_EQ(node.size(), 2U);
        EXPECT_EQ(node.rank(), r % 2);
        EXPECT_EQ(cross.rank(), r / 2);
        const std::vector<float> mine = values_of(r, 1);
        std::vector<float> on_node(2, -1.0F);
        std::vector<float> across(2, -1.0F);
        node.all_gather(mine.data(), on_node.data(), 4, rig.stream.view());
        cross.all_gather(mine.data(), across.data(), 4, rig.stream.view());
        rig.dev->synchronize(rig.stream.view());
        const float first = static_cast<float>((r / 2) * 2 * 100);
        EXPECT_EQ(on_node, (std::vector<float>{first, first + 100}));
        EXPECT_EQ(across,
                  (std::vector<float>{static_cast<float>((r % 2) * 100), static_cast<float>((r % 2 + 2) * 100)}));
        // The cross-node gather's 4 bytes went to the other node.
        EXPECT_EQ(cross.stats().of(collective::all_gather).inter_node, 4U);
        EXPECT_EQ(total_stats(*rig.world).of(collective::all_gather).total(), 8U);
      },
      2);
  // The world, both node-local groups, both cross-node groups: on every rank.
  for (std::size_t r = 0; r < 4; ++r) EXPECT_EQ(ex.calls(r, "create_group"), 5U) << r;
  EXPECT_EQ(ex.groups_alive(), 0U);
}

TEST(HostCommunicator, GroupOfOneCopiesWithoutTheHost) {
  host_exchange ex(2, 1);  // a node per rank: the node-local group is this rank alone
  on_ranks(ex, [&](std::size_t r, rank_rig& rig) {
    communicator& node = rig.world->node_local();
    EXPECT_EQ(node.size(), 1U);
    const std::vector<float> mine = values_of(r, 3);
    std::vector<float> out(3, -1.0F);
    node.all_reduce(mine.data(), out.data(), 3, kernels::dtype::fp32, reduce_op::sum, rig.stream.view());
    rig.dev->synchronize(rig.stream.view());
    EXPECT_EQ(out, mine);
  });
  EXPECT_EQ(ex.calls(0, "create_group"), 1U);  // the world alone
  EXPECT_EQ(ex.calls(0, "all_reduce"), 0U);
}

TEST(HostCommunicator, HostFailureNamesTheCollectiveGroupAndRankAndRefusesLaterOnes) {
  host_exchange ex(2);
  ex.fail_call("all_gather", 0, "the host's gloo said no");
  on_ranks(ex, [&](std::size_t r, rank_rig& rig) {
    const std::vector<float> mine = values_of(r, 1);
    std::vector<float> out(2, -1.0F);
    rig.world->all_gather(mine.data(), out.data(), 4, rig.stream.view());
    try {
      rig.dev->synchronize(rig.stream.view());
      ADD_FAILURE() << "the host's failure was not reported";
    } catch (const error& e) {
      EXPECT_THAT(e.what(), AllOf(HasSubstr("all_gather on host (world) (world rank " + std::to_string(r) + ")"),
                                  HasSubstr("the host's gloo said no")));
    }
    EXPECT_THAT([&] { rig.world->all_gather(mine.data(), out.data(), 4, rig.stream.view()); },
                ::testing::ThrowsMessage<comm_error>(HasSubstr("not run: all_gather on host (world)")));
  });
  EXPECT_EQ(ex.calls(0, "all_gather"), 1U);
}

TEST(HostCommunicator, AbortRefusesThisRanksLaterCollectivesAndNoHostCallIsMade) {
  host_exchange ex(2, 1);
  on_ranks(ex, [&](std::size_t r, rank_rig& rig) {
    if (r != 0) return;
    rig.world->abort("a fetch was cut short");
    const std::vector<float> mine = values_of(r, 1);
    std::vector<float> out(2, -1.0F);
    EXPECT_THAT(
        [&] { rig.world->all_gather(mine.data(), out.data(), 4, rig.stream.view()); },
        ::testing::ThrowsMessage<comm_error>(HasSubstr("host (world) aborted by world rank 0: a fetch was cut short")));
    EXPECT_THAT([&] { rig.world->node_local().barrier(); },
                ::testing::ThrowsMessage<comm_error>(HasSubstr("aborted by world rank 0")));
  });
  EXPECT_EQ(ex.calls(0, "all_gather"), 0U);
  EXPECT_EQ(ex.groups_alive(), 0U);
}

TEST(HostCommunicator, ABackendOtherThanHostOrASizeThatDoesNotDivideIsAConfigError) {
  host_exchange ex(4);
  const std::unique_ptr<device> dev = make_host_device(std::uint64_t{16} << 20);
  comm_options mpi = host_options(ex, 0);
  mpi.backend = "mpi";
  EXPECT_THAT([&] { (void)make_communicator(*dev, mpi); },
              ::testing::ThrowsMessage<config_error>(HasSubstr("zoe.comm.backend: 'mpi'")));
  comm_options nodes = host_options(ex, 0);
  nodes.ranks_per_node = 3;
  EXPECT_THAT([&] { (void)make_communicator(*dev, nodes); },
              ::testing::ThrowsMessage<config_error>(HasSubstr("zoe.ranks_per_node: 3 does not divide")));
  EXPECT_THAT([&] { (void)make_communicator(*dev, host_options(ex, 0, 3)); },
              ::testing::ThrowsMessage<config_error>(HasSubstr("zero_optimization.zero_hpz_partition_size")));
  comm_options no_host;
  no_host.backend = "host";
  EXPECT_THAT([&] { (void)make_communicator(*dev, no_host); },
              ::testing::ThrowsMessage<config_error>(HasSubstr("zoe_engine_desc.host_comm")));
  EXPECT_EQ(ex.calls(0, "create_group"), 0U);
}

TEST(HostCommunicator, AWorldOfOneNeverCallsTheHost) {
  host_exchange ex(1);
  on_ranks(ex, [&](std::size_t r, rank_rig& rig) {
    std::vector<float> v = values_of(r, 2);
    rig.world->all_reduce(v.data(), v.data(), 2, kernels::dtype::fp32, reduce_op::sum, rig.stream.view());
    rig.dev->synchronize(rig.stream.view());
    EXPECT_EQ(v, values_of(0, 2));
  });
  EXPECT_EQ(ex.calls(0, "create_group"), 0U);
  EXPECT_EQ(ex.calls(0, "all_reduce"), 0U);
}

}  // namespace
}  // namespace zoe::engine
