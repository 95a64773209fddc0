// The thread world itself (tests/engine/thread_world.hpp): what neither of its suites exercises.
// A rank that skips a collective makes the others fail naming it instead of hanging; broadcast
// copies the root's buffer and counts its bytes by bytes_to; a topology that does not divide the
// world is refused.
#include <gtest/gtest.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "thread_world.hpp"
#include "zoe/core/device.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"

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

TEST(thread_world, RanksPerNodeThatDoNotDivideTheWorldAreAUsageError) {
  EXPECT_THROW(thread_world(4, {.ranks_per_node = 3}), usage_error);
  EXPECT_THROW(thread_world(0), usage_error);
}

}  // namespace
}  // namespace zoe::testing
