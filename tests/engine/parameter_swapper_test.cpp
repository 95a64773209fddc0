// The parameter swapper: byte-exact reads from every tier and element type (the homes written by
// state_io), shards larger than a buffer, back-pressure from a one-buffer pool under many moves at
// once, a failed read that names the path and offset and leaves the home resident, and a prefetch
// raised to demand.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "engine_stack.hpp"
#include "zoe/core/error.hpp"

namespace zoe::testing {
namespace {

using engine::parameter_id;
using engine::state_status;

// Working copies spread over every tier: a third each on device, host and nvme.
engine::engine_config mixed_tiers(bool pin_memory) {
  engine::engine_config c = nvme_config();
  c.zero.offload_param->pin_memory = pin_memory;
  c.zoe.placement[static_cast<std::size_t>(engine::state_kind::working)] =
      engine::tier_fractions{.device = 1.0 / 3, .host = 1.0 / 3, .nvme = 1.0 / 3};
  c.zoe.placement[static_cast<std::size_t>(engine::state_kind::master)] =
      engine::tier_fractions{.device = 1.0 / 3, .host = 1.0 / 3, .nvme = 1.0 / 3};
  return c;
}

std::vector<kernels::dtype> all_types() { return {kernels::dtype::fp16, kernels::dtype::bf16, kernels::dtype::fp32}; }

void round_trip_everything(engine_stack& s) {
  const auto n = static_cast<parameter_id>(s.layout().parameters().size());
  bool seen[engine::tier_count] = {};
  for (parameter_id p = 0; p < n; ++p) {
    const auto& param = s.layout().parameter(p);
    seen[static_cast<std::size_t>(s.tiers().location(p, engine::working_state(param)).where)] = true;
    const std::vector<std::byte> data = s.shard_data(p, 100 + p);
    s.write_home(p, data);
    EXPECT_EQ(s.tiers().status(p, engine::working_state(param)), state_status::resident) << param.name;
    EXPECT_TRUE(same_bytes(s.read_home(p), data)) << param.name;
  }
  for (bool t : seen) EXPECT_TRUE(t) << "the placement did not use every tier";
}

TEST(ParameterSwapper, RoundTripsEveryTierAndTypeByteExact) {
  for (const bool pin : {true, false}) {
    engine_stack s({.modules = layered_model(3, 3, 40'000, all_types()), .config = mixed_tiers(pin)});
    round_trip_everything(s);
    // NVMe homes pass through the pinned slots: each piece read is copied on once.
    const engine::parameter_swapper_stats st = s.swapper().stats();
    EXPECT_GT(st.bytes_read, 0U);
    EXPECT_EQ(st.bytes_staged, st.bytes_read);
  }
}

TEST(ParameterSwapper, MovesShardsLargerThanABufferInWholeChunks) {
  // Buffers of 16 Ki elements (32 KiB of fp16) and shards of about 100 Ki elements: several pieces each.
  engine_stack s({.modules = layered_model(2, 2, 100'000), .config = nvme_config(2, 16 * 1024)});
  ASSERT_LT(s.plan().param_buffer_bytes, s.shard_bytes(0));
  for (parameter_id p = 0; p < 4; ++p) {
    const std::vector<std::byte> data = s.shard_data(p, p);
    s.write_home(p, data);
    EXPECT_TRUE(same_bytes(s.read_home(p), data));
  }
}

TEST(ParameterSwapper, AFullPoolMakesMovesWaitNotFail) {
  // One pinned buffer of two chunk slots for 16 shards read all at once from 4 threads.
  engine_stack s({.modules = layered_model(4, 4, 30'000), .config = nvme_config(1, 16 * 1024)});
  ASSERT_EQ(s.plan().param_buffer_count, 1U);
  ASSERT_EQ(s.swapper().stats().buffer_slots, 2U);
  std::vector<std::vector<std::byte>> data;
  for (parameter_id p = 0; p < 16; ++p) {
    data.push_back(s.shard_data(p, 7 * p));
    s.write_home(p, data.back());
  }
  std::vector<void*> dst(16);
  for (parameter_id p = 0; p < 16; ++p) dst[p] = s.dev().allocate(s.shard_bytes(p));
  std::vector<engine::swap_ticket> tickets(16);
  std::vector<std::jthread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (parameter_id p = static_cast<parameter_id>(t); p < 16; p += 4) tickets[p] = s.swapper().swap_in(p, dst[p]);
    });
  }
  threads.clear();
  for (parameter_id p = 0; p < 16; ++p) {
    tickets[p].synchronize();
    EXPECT_TRUE(same_bytes(s.from_device(dst[p], s.shard_bytes(p)), data[p]));
    s.dev().deallocate(dst[p], s.shard_bytes(p));
  }
  const engine::parameter_swapper_stats st = s.swapper().stats();
  EXPECT_GT(st.buffer_waits, 0U);
  EXPECT_EQ(st.peak_buffers_in_use, 2U);
  EXPECT_LE(s.pinned().peak_bytes_in_use(), s.plan().pinned_bytes);
}

TEST(ParameterSwapper, AFailedReadNamesThePathAndOffsetAndLeavesTheHomeResident) {
  auto faults = std::make_shared<fault_plan>();
  engine_stack s({.modules = layered_model(1, 1, 50'000), .config = nvme_config(), .faults = faults});
  const std::vector<std::byte> data = s.shard_data(0, 1);
  s.write_home(0, data);
  faults->add({.op = io::io_op::read, .inject_errno = EIO});
  try {
    (void)s.read_home(0);
    FAIL() << "the read did not fail";
  } catch (const io_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layer0.w0"), std::string::npos) << m;
    EXPECT_NE(m.find(s.store()->folders()[0].string()), std::string::npos) << m;
    EXPECT_NE(m.find("offset"), std::string::npos) << m;
    EXPECT_EQ(e.os_errno(), EIO);
  }
  EXPECT_EQ(s.tiers().status(0, engine::state_kind::working), state_status::resident);
  EXPECT_TRUE(same_bytes(s.read_home(0), data));  // the rule fired once: the next read works
}

// The compute comes to wait on a prefetch queued behind another prefetch whose read the drive
// holds: raise_to_demand() lets it take the request the mover keeps for demand. At queue depth 2
// the prefetches share one request, which the held read keeps, so without the raise the second
// prefetch would wait for the hold to end. Bounded: a swapper that does not raise it fails here.
TEST(ParameterSwapper, APrefetchTheComputeWaitsOnIsNotServedBehindAHeldPrefetch) {
  auto faults = std::make_shared<fault_plan>();
  engine::engine_config c = nvme_config();
  c.aio.queue_depth = 2;
  engine_stack s({.modules = layered_model(1, 2, 50'000), .config = c, .faults = faults});
  const std::vector<std::byte> first = s.shard_data(0, 1);
  const std::vector<std::byte> second = s.shard_data(1, 2);
  s.write_home(0, first);
  s.write_home(1, second);
  void* dst0 = s.dev().allocate(s.shard_bytes(0));
  void* dst1 = s.dev().allocate(s.shard_bytes(1));
  faults->add({.op = io::io_op::read, .hold = true, .times = 1});  // the first prefetch's read
  const engine::swap_ticket held = s.swapper().swap_in(0, dst0, engine::move_priority::prefetch);
  // Its read at the drive first: raised before it started, the second could take the hold itself.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (faults->fired() == 0 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  ASSERT_EQ(faults->fired(), 1);
  const engine::swap_ticket waited = s.swapper().swap_in(1, dst1, engine::move_priority::prefetch);
  waited.raise_to_demand();
  auto ready = std::async(std::launch::async, [&] { waited.wait_ready(); });
  const bool in_time = ready.wait_for(std::chrono::seconds(30)) == std::future_status::ready;
  faults->release_held();  // either way, so both moves end and the test can too
  ASSERT_TRUE(in_time) << "the prefetch the compute waits on was served behind a held prefetch";
  waited.synchronize();
  held.synchronize();
  EXPECT_TRUE(same_bytes(s.from_device(dst1, s.shard_bytes(1)), second));
  EXPECT_TRUE(same_bytes(s.from_device(dst0, s.shard_bytes(0)), first));
  s.dev().deallocate(dst0, s.shard_bytes(0));
  s.dev().deallocate(dst1, s.shard_bytes(1));
}

TEST(ParameterSwapper, AStateAnotherMoverHoldsIsRefused) {
  engine_stack s({.modules = layered_model(1, 1, 50'000), .config = nvme_config()});
  const std::vector<std::byte> data = s.shard_data(0, 3);
  s.write_home(0, data);
  // Another mover (say the optimizer's swapper) has the state in flight.
  ASSERT_TRUE(s.tiers().begin_move(0, engine::state_kind::working));
  void* d = s.dev().allocate(s.shard_bytes(0));
  EXPECT_THROW((void)s.swapper().swap_in(0, d), usage_error);
  s.tiers().abort_move(0, engine::state_kind::working);
  s.dev().deallocate(d, s.shard_bytes(0));
  EXPECT_TRUE(same_bytes(s.read_home(0), data));
}

TEST(ParameterSwapper, BuffersThatHoldNeitherAShardNorAChunkAreAConfigError) {
  engine_stack s({.modules = layered_model(1, 1, 100'000), .config = nvme_config(2, 16 * 1024)});
  // Two slots of 8 KiB: smaller than a chunk and than the shard.
  engine::mover small(s.store(), &s.pinned(), &s.dev(),
                      {.pools = {{.key = "params", .slot_bytes = 8 * 1024, .slot_count = 2}}});
  EXPECT_THROW(engine::parameter_swapper(s.tiers(), s.dev(), &small), config_error);
}

TEST(ParameterSwapper, AStoreHoldingNoWorkingCopyNeedsNoBuffers) {
  // Optimizer states on nvme, working copies on the device (ZeRO-Offload with offload_optimizer
  // nvme): the plan gives the swapper no buffers, and it needs none.
  engine::engine_config c = nvme_config();
  c.zoe.placement[static_cast<std::size_t>(engine::state_kind::working)] = engine::tier_fractions{.device = 1.0};
  c.zoe.placement[static_cast<std::size_t>(engine::state_kind::master)] = engine::tier_fractions{.nvme = 1.0};
  engine_stack s({.modules = layered_model(2, 2, 10'000), .config = c});
  ASSERT_NE(s.store(), nullptr);
  EXPECT_EQ(s.plan().param_buffer_count, 0U);
  EXPECT_EQ(s.swapper().stats().pinned_bytes, 0U);
  for (parameter_id p = 0; p < 4; ++p) {
    const std::vector<std::byte> data = s.shard_data(p, p);
    s.write_home(p, data);
    EXPECT_TRUE(same_bytes(s.read_home(p), data));
  }
}

}  // namespace
}  // namespace zoe::testing
