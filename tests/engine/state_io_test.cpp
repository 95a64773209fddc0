// state_io: whole states and ranges of them, read and written on every tier, through the tier
// manager's transitions, with failures naming the state, the path and the offset.
#include "zoe/engine/swap/state_io.hpp"

#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "engine_stack.hpp"
#include "usage_message.hpp"

namespace zoe::testing {
namespace {

using engine::parameter_id;
using engine::state_kind;
using engine::state_status;

// The usage_error `call` throws names `what`.
template <typename F>
void expect_usage(F&& call, const std::string& what) {
  const std::string m = usage_message(std::forward<F>(call));
  EXPECT_NE(m.find(what), std::string::npos) << m;
}

// Stage 3 with every state of every shard placed on `t` by zoe.placement (the stack's scratch
// folder holds the swap store).
engine::engine_config placed_on(const char* t) {
  engine::engine_config c = nvme_config();
  for (auto& p : c.zoe.placement) {
    p = engine::tier_fractions{.device = std::strcmp(t, "device") == 0 ? 1.0 : 0.0,
                               .host = std::strcmp(t, "host") == 0 ? 1.0 : 0.0,
                               .nvme = std::strcmp(t, "nvme") == 0 ? 1.0 : 0.0};
  }
  return c;
}

class state_io_test : public ::testing::TestWithParam<const char*> {};

TEST_P(state_io_test, EveryStateRoundTripsWholeAndInRanges) {
  engine_stack s({.modules = layered_model(2, 2, 20'000), .config = placed_on(GetParam())});
  engine::state_io io(s.tiers(), s.dev(), &s.movers());
  for (const engine::parameter_layout& p : s.layout().parameters()) {
    for (const state_kind k : engine::all_states) {
      const std::uint64_t bytes = engine::state_bytes(p, k);
      if (bytes == 0) continue;
      const std::vector<std::byte> data = random_bytes(bytes, p.id * 10 + static_cast<std::uint64_t>(k));
      io.write(p.id, k, data);
      EXPECT_EQ(s.tiers().status(p.id, k), state_status::resident);
      EXPECT_FALSE(s.tiers().dirty(p.id, k));
      std::vector<std::byte> back(bytes);
      io.read(p.id, k, back);
      EXPECT_EQ(back, data) << p.name << " " << engine::state_kind_name(k);
      // A range at an odd offset reads the same bytes.
      std::vector<std::byte> part(bytes / 3);
      io.read(p.id, k, 5, part);
      EXPECT_EQ(0, std::memcmp(part.data(), data.data() + 5, part.size()));
    }
  }
}

TEST_P(state_io_test, ARangeWriteChangesOnlyItsBytes) {
  engine_stack s({.modules = layered_model(1, 1, 40'000), .config = placed_on(GetParam())});
  engine::state_io io(s.tiers(), s.dev(), &s.movers());
  const std::uint64_t bytes = s.tiers().location(0, state_kind::master).bytes;
  std::vector<std::byte> data = random_bytes(bytes, 1);
  io.write(0, state_kind::master, data);
  const std::uint64_t g = io.write_granule();
  ASSERT_LT(2 * g, bytes);
  const std::vector<std::byte> patch = random_bytes(g, 2);
  io.write(0, state_kind::master, g, patch);
  std::memcpy(data.data() + g, patch.data(), g);
  std::vector<std::byte> back(bytes);
  io.read(0, state_kind::master, back);
  EXPECT_EQ(back, data);
}

INSTANTIATE_TEST_SUITE_P(tiers, state_io_test, ::testing::Values("device", "host", "nvme"));

TEST(state_io, WrongSizesRangesAndReleasedStatesAreRefusedNamingTheState) {
  engine_stack s({.modules = layered_model(1, 1, 40'000), .config = placed_on("nvme")});
  engine::state_io io(s.tiers(), s.dev(), &s.movers());
  const std::uint64_t bytes = s.tiers().location(0, state_kind::exp_avg).bytes;
  std::vector<std::byte> buffer(bytes);
  expect_usage([&] { io.read(0, state_kind::exp_avg, buffer); }, "exp_avg of parameter 'layer0.w0': it is released");
  std::vector<std::byte> small(bytes - 1);
  expect_usage([&] { io.write(0, state_kind::exp_avg, small); }, "has " + std::to_string(bytes));
  expect_usage([&] { io.read(0, state_kind::exp_avg, bytes - 4, {buffer.data(), 8}); }, "pass the end");
  // An NVMe write must cover whole checksum chunks.
  expect_usage([&] { io.write(0, state_kind::exp_avg, 4096, {buffer.data(), 4096}); }, "aio.block_size");
  EXPECT_EQ(s.tiers().status(0, state_kind::exp_avg), state_status::released);
}

TEST(state_io, AFailedNvmeReadNamesTheStatePathAndOffsetAndKeepsTheStateResident) {
  auto faults = std::make_shared<fault_plan>();
  engine_stack s({.modules = layered_model(1, 1, 40'000), .config = placed_on("nvme"), .faults = faults});
  engine::state_io io(s.tiers(), s.dev(), &s.movers());
  const std::vector<std::byte> data = random_bytes(s.tiers().location(0, state_kind::master).bytes, 3);
  io.write(0, state_kind::master, data);
  faults->add({.op = io::io_op::read, .inject_errno = EIO});
  std::vector<std::byte> back(data.size());
  try {
    io.read(0, state_kind::master, back);
    FAIL() << "the read should have failed";
  } catch (const io_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("master state of parameter 'layer0.w0'"), std::string::npos) << m;
    EXPECT_NE(m.find("offset"), std::string::npos) << m;
    EXPECT_EQ(e.os_errno(), EIO);
  }
  EXPECT_EQ(s.tiers().status(0, state_kind::master), state_status::resident);
  io.read(0, state_kind::master, back);
  EXPECT_EQ(back, data);
}

TEST(state_io, AFailedNvmeWriteLeavesTheStateReleasedAndDirty) {
  auto faults = std::make_shared<fault_plan>();
  engine_stack s({.modules = layered_model(1, 1, 40'000), .config = placed_on("nvme"), .faults = faults});
  engine::state_io io(s.tiers(), s.dev(), &s.movers());
  const std::vector<std::byte> data = random_bytes(s.tiers().location(0, state_kind::exp_avg_sq).bytes, 4);
  faults->add({.op = io::io_op::write, .inject_errno = ENOSPC});
  EXPECT_THROW(io.write(0, state_kind::exp_avg_sq, data), io_error);
  EXPECT_EQ(s.tiers().status(0, state_kind::exp_avg_sq), state_status::released);
  EXPECT_TRUE(s.tiers().dirty(0, state_kind::exp_avg_sq));
  io.write(0, state_kind::exp_avg_sq, data);
  std::vector<std::byte> back(data.size());
  io.read(0, state_kind::exp_avg_sq, back);
  EXPECT_EQ(back, data);
}

}  // namespace
}  // namespace zoe::testing
