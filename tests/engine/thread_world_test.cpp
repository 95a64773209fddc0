// The thread world itself (tests/engine/thread_world.hpp): what neither of its suites exercises.
// A rank that skips a collective makes the others fail naming it instead of hanging; broadcast
// copies the root's buffer and counts its bytes by bytes_to; a coalesced reduce-scatter matches
// per-part ones; a topology that does not divide the
// world is refused.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "thread_world.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/kernels/dtype.hpp"

namespace zoe::testing {
namespace {

TEST(thread_world, ARankThatSkipsACollectiveFailsTheOthersNamingIt) {
  thread_world world(3, {.timeout = std::chrono::milliseconds(200)});
  std::vector<std::string> failures(world.size());
  world.run([&](std::size_t r) {
    if (r == 1) {
      return;  // never arrives
    }
    try {
      world.rank(r).barrier();
    } catch (const comm_error& e) {
      failures[r] = e.what();
    }
  });
  for (const std::size_t r : {std::size_t{0}, std::size_t{2}}) {
    EXPECT_NE(failures[r].find("rank 1 (node 0)"), std::string::npos) << "rank " << r << ": " << failures[r];
  }
}

// communicator::abort: the peers fail naming the aborting rank and its reason (not a timeout: the
// timeout is far longer than the test), and the aborted rank's own later calls are refused.
TEST(thread_world, ARankThatAbortsFailsTheOthersNamingItAndRefusesItsOwnCalls) {
  thread_world world(3, {.timeout = std::chrono::minutes(5)});
  std::vector<std::string> failures(world.size());
  world.run([&](std::size_t r) {
    if (r == 1) world.rank(r).abort("a gather bucket was dropped");
    try {
      world.rank(r).barrier();
    } catch (const comm_error& e) {
      failures[r] = e.what();
    }
  });
  for (std::size_t r = 0; r < world.size(); ++r) {
    EXPECT_NE(failures[r].find("rank 1 (node 0) aborted: a gather bucket was dropped"), std::string::npos)
        << "rank " << r << ": " << failures[r];
  }
}

// A broadcast from rank 2 reaches every rank; a point-to-point from rank 3 to rank 0 reaches rank 0
// alone. Each counts its bytes on the sender, split by the receivers' nodes (2 nodes of 2).
TEST(thread_world, BroadcastAndPointToPointCopyToTheirReceiversAndCountOnTheSender) {
  const std::unique_ptr<device> dev = make_host_device(16 * MiB);
  thread_world world(4, {.ranks_per_node = 2, .dev = dev.get()});
  world.run([&](std::size_t r) {
    const device_stream stream = dev->create_stream();
    std::array<int, 8> everyone{};
    std::array<int, 8> one{};
    everyone.fill(static_cast<int>(r));
    one.fill(static_cast<int>(r));
    world.rank(r).broadcast(everyone.data(), sizeof(everyone), 2, stream.view());
    world.rank(r).point_to_point(one.data(), sizeof(one), 3, 0, stream.view());
    for (std::size_t i = 0; i < everyone.size(); ++i) {
      EXPECT_EQ(everyone[i], 2) << "rank " << r;
      EXPECT_EQ(one[i], r == 0 ? 3 : static_cast<int>(r)) << "rank " << r;
    }
    const engine::comm_stats s = world.rank(r).stats();
    // Root 2 (node 1) sends the buffer to rank 3 on its node and to ranks 0 and 1 on the other.
    EXPECT_EQ(s.of(engine::collective::broadcast).intra_node, r == 2 ? sizeof(everyone) : 0U) << "rank " << r;
    EXPECT_EQ(s.of(engine::collective::broadcast).inter_node, r == 2 ? 2 * sizeof(everyone) : 0U) << "rank " << r;
    // Rank 3 (node 1) sends to rank 0 (node 0) alone: inter-node, on the sender only.
    EXPECT_EQ(s.of(engine::collective::point_to_point).intra_node, 0U) << "rank " << r;
    EXPECT_EQ(s.of(engine::collective::point_to_point).inter_node, r == 3 ? sizeof(one) : 0U) << "rank " << r;
  });
}

// A coalesced reduce-scatter of parts that divide nothing lands as per-part reduce_scatters do,
// bit for bit, in one meeting counted as one reduce_scatter of the summed block bytes.
TEST(thread_world, ReduceScatterCoalescedMatchesPerPartReduceScatter) {
  const std::unique_ptr<device> dev = make_host_device(16 * MiB);
  thread_world world(3, {.dev = dev.get()});
  world.run([&](std::size_t r) {
    const device_stream stream = dev->create_stream();
    const std::array<std::size_t, 3> counts{1, 7, 4097};
    std::vector<std::vector<float>> sends;
    std::vector<std::vector<float>> expect;
    std::vector<std::vector<float>> got;
    std::vector<engine::reduce_part> parts;
    std::size_t bytes = 0;
    for (const std::size_t count : counts) {
      std::vector<float> send(3 * count);
      for (std::size_t i = 0; i < send.size(); ++i) {
        send[i] = static_cast<float>((r * 131 + i * 7 + count) % 997) * 0.013F - 6.1F;
      }
      sends.push_back(std::move(send));
      expect.emplace_back(count);
      got.emplace_back(count);
      bytes += count * sizeof(float);
    }
    for (std::size_t k = 0; k < counts.size(); ++k) {
      world.rank(r).reduce_scatter(sends[k].data(), expect[k].data(), counts[k], kernels::dtype::fp32,
                                   engine::reduce_op::mean, stream.view());
      parts.push_back({sends[k].data(), got[k].data(), counts[k], kernels::dtype::fp32});
    }
    const engine::comm_stats before = world.rank(r).stats();
    world.rank(r).reduce_scatter_coalesced(parts, engine::reduce_op::mean, stream.view());
    for (std::size_t k = 0; k < counts.size(); ++k) {
      EXPECT_EQ(0, std::memcmp(got[k].data(), expect[k].data(), counts[k] * sizeof(float)))
          << "rank " << r << " part " << k;
    }
    const engine::comm_stats after = world.rank(r).stats();
    EXPECT_EQ(after.calls - before.calls, 1U);
    EXPECT_EQ(
        after.of(engine::collective::reduce_scatter).total() - before.of(engine::collective::reduce_scatter).total(),
        2 * bytes);
  });
}

TEST(thread_world, RanksPerNodeThatDoNotDivideTheWorldAreAUsageError) {
  EXPECT_THROW(thread_world(4, {.ranks_per_node = 3}), usage_error);
  EXPECT_THROW(thread_world(0), usage_error);
}

}  // namespace
}  // namespace zoe::testing
