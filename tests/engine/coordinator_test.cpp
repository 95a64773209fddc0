// The coordinator: modules fetched and gathered byte-exact from every tier, step after step with
// prefetch along the recorded trace; dirty parameters written back; a changed order re-records;
// a tiny arena makes prefetches back off and fetches wait (never fail or hang); random schedules
// with faults under the swap store lose nothing, name the failing path and offset, and stay within
// the footprint plan.
#include <gtest/gtest.h>

#include <atomic>
#include <functional>
#include <future>
#include <random>
#include <string>
#include <thread>

#include "engine_stack.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"

namespace zoe::testing {
namespace {

using engine::module_id;
using engine::parameter_id;

engine::engine_config test_config(std::uint64_t buffer_count = 4) {
  engine::engine_config c = nvme_config(buffer_count);
  c.zero.param_persistence_threshold = 1000;  // only the tiny parameters persist
  return c;
}

// Working copies on every tier.
engine::engine_config mixed_config() {
  engine::engine_config c = test_config();
  c.zoe.placement[static_cast<std::size_t>(engine::state_kind::working)] =
      engine::tier_fractions{.device = 0.25, .host = 0.25, .nvme = 0.5};
  return c;
}

// Six layers of two parameters, the last parameter of every other layer tiny (persistent).
std::vector<engine::module_spec> model_with_persistent() {
  std::vector<engine::module_spec> m = layered_model(6, 2, 30'000, {kernels::dtype::fp16, kernels::dtype::bf16});
  for (std::size_t i = 0; i < m.size(); i += 2) m[i].parameters.push_back({str("layer", i, ".bias"), {500}});
  return m;
}

// The expected contents of every home, written once at the start.
struct model_data {
  std::vector<std::vector<std::byte>> shards;

  explicit model_data(engine_stack& s) {
    for (const auto& p : s.layout().parameters()) {
      shards.push_back(s.shard_data(p.id, 1000 + p.id));
      s.write_home(p.id, shards.back());
    }
  }
};

// Checks every parameter of a module (fetched and waited) against `expected`.
void expect_gathered(engine_stack& s, module_id m, const model_data& expected) {
  for (const parameter_id p : s.layout().module(m).parameters) {
    EXPECT_TRUE(same_bytes(s.from_device(s.coord().address(p), s.shard_bytes(p)), expected.shards[p]))
        << s.layout().parameter(p).name;
  }
}

void run_step(engine_stack& s, const std::vector<module_id>& order, const model_data& expected) {
  s.coord().begin_step();
  for (const module_id m : order) {
    const engine::fetch_handle h = s.coord().fetch(m);
    h.wait();
    expect_gathered(s, m, expected);
    s.coord().release(m);
  }
  s.coord().end_step();
}

std::vector<module_id> forward_backward(std::size_t layers) {
  std::vector<module_id> order;
  for (std::size_t m = 0; m < layers; ++m) order.push_back(static_cast<module_id>(m));
  for (std::size_t m = layers; m-- > 0;) order.push_back(static_cast<module_id>(m));
  return order;
}

void expect_within_plan(engine_stack& s) {
  EXPECT_LE(s.pinned().peak_bytes_in_use(), s.plan().pinned_bytes);
  const device_usage u = s.dev().usage();
  EXPECT_LE(u.peak_bytes, u.budget_bytes);
  EXPECT_LE(s.coord().stats().arena.peak_used, s.plan().arena_bytes);
}

TEST(Coordinator, GathersEveryModuleByteExactStepAfterStepWithPrefetch) {
  engine_stack s({.modules = model_with_persistent(), .config = mixed_config()});
  const model_data data(s);
  const auto order = forward_backward(6);
  run_step(s, order, data);
  EXPECT_FALSE(s.coord().policy().recording());
  EXPECT_EQ(s.coord().stats().prefetches, 0U);  // the first step records
  run_step(s, order, data);
  run_step(s, order, data);
  const engine::coordinator_stats st = s.coord().stats();
  EXPECT_GT(st.prefetches, 0U);
  EXPECT_FALSE(s.coord().policy().persistent_parameters().empty());
  expect_within_plan(s);
}

TEST(Coordinator, DroppingTheGatheredParametersMakesTheNextFetchReadTheNewHomes) {
  engine_stack s({.modules = model_with_persistent(), .config = mixed_config()});
  model_data data(s);
  const auto order = forward_backward(6);
  run_step(s, order, data);
  // The persistent parameters stay gathered across steps: a home rewritten under them (as the
  // optimizer step does) is not seen until they are dropped.
  s.coord().begin_step();
  const engine::fetch_handle open = s.coord().fetch(0);
  open.wait();
  const std::string refused = [&] {
    try {
      s.coord().drop_gathered();
    } catch (const usage_error& e) {
      return std::string(e.what());
    }
    return std::string("no usage_error");
  }();
  EXPECT_NE(refused.find("module 'layer0' has an open fetch"), std::string::npos) << refused;
  s.coord().release(0);
  s.coord().end_step();
  for (const auto& p : s.layout().parameters()) {
    data.shards[p.id] = s.shard_data(p.id, 2000 + p.id);
    s.write_home(p.id, data.shards[p.id]);
  }
  s.coord().drop_gathered();
  EXPECT_EQ(s.coord().stats().arena.used, 0U);
  run_step(s, order, data);
  expect_within_plan(s);
}

TEST(Coordinator, AStreamOrderedWaitOrdersTheCallersWorkAfterTheGather) {
  engine_stack s({.modules = layered_model(3, 2, 30'000), .config = mixed_config()});
  const model_data data(s);
  const device_stream compute = s.dev().create_stream();
  s.coord().begin_step();
  for (module_id m = 0; m < 3; ++m) {
    s.coord().fetch(m).wait(compute.view());
    // The caller's work reads the gathered parameters in stream order, without a host wait.
    std::vector<std::vector<std::byte>> got;
    for (const parameter_id p : s.layout().module(m).parameters) {
      got.emplace_back(s.shard_bytes(p));
      s.dev().copy_async(got.back().data(), s.coord().address(p), got.back().size(), copy_kind::device_to_host,
                         compute.view());
    }
    s.coord().release(m, compute.view());
    s.dev().synchronize(compute.view());
    for (std::size_t i = 0; i < got.size(); ++i) {
      const parameter_id p = s.layout().module(m).parameters[i];
      EXPECT_TRUE(same_bytes(got[i], data.shards[p])) << s.layout().parameter(p).name;
    }
  }
  s.coord().end_step();
}

// A prefetch whose read the swapper refuses (another mover has the state) backs off like one
// the arena cannot hold: the fetch that walked ahead succeeds, the parameters behind it are
// released in the policy (their own fetches gather them), and the step runs to the end.
TEST(Coordinator, APrefetchTheSwapperRefusesBacksOffAndLeavesNothingInFlight) {
  engine_stack s({.modules = layered_model(4, 1, 20'000), .config = test_config()});
  const model_data data(s);
  const std::vector<module_id> order{0, 1, 2, 3};
  run_step(s, order, data);                                           // records the trace
  ASSERT_TRUE(s.tiers().begin_move(2, engine::state_kind::working));  // module 2's only parameter
  s.coord().begin_step();
  engine::fetch_handle h;
  ASSERT_NO_THROW(h = s.coord().fetch(0));
  EXPECT_EQ(s.coord().policy().status(2), engine::gather_status::released);
  EXPECT_EQ(s.coord().policy().status(3), engine::gather_status::released);
  s.tiers().abort_move(2, engine::state_kind::working);
  h.wait();
  expect_gathered(s, 0, data);
  s.coord().release(0);
  for (const module_id m : {1U, 2U, 3U}) {
    s.coord().fetch(m).wait();
    expect_gathered(s, m, data);
    s.coord().release(m);
  }
  s.coord().end_step();
}

TEST(Coordinator, AStepInAnotherOrderReRecordsTheTrace) {
  engine_stack s({.modules = layered_model(5, 2, 20'000), .config = test_config()});
  const model_data data(s);
  const std::vector<module_id> first = {0, 1, 2, 3, 4};
  const std::vector<module_id> second = {0, 2, 1, 4, 3};
  run_step(s, first, data);
  run_step(s, first, data);
  EXPECT_FALSE(s.coord().policy().recording());
  s.coord().begin_step();
  for (const module_id m : second) {
    s.coord().fetch(m).wait();
    expect_gathered(s, m, data);
    s.coord().release(m);
  }
  s.coord().end_step();
  EXPECT_EQ(std::vector<module_id>(s.coord().policy().trace().begin(), s.coord().policy().trace().end()), second);
  const std::uint64_t before = s.coord().stats().prefetches;
  run_step(s, second, data);
  EXPECT_GT(s.coord().stats().prefetches, before);  // the new trace is followed
  expect_within_plan(s);
}

TEST(Coordinator, ATinyArenaMakesPrefetchBackOffAndFetchesWaitWithoutFailing) {
  // Room for one layer and a bit: everything ahead must back off or be evicted.
  engine_stack probe({.modules = layered_model(6, 2, 20'000), .config = test_config()});
  const std::uint64_t one_layer =
      probe.coord().full_bytes(0) + probe.coord().full_bytes(1) + 2 * allocators::arena_options{}.alignment;
  engine_stack s({.modules = layered_model(6, 2, 20'000), .config = test_config(1), .arena_bytes = one_layer + 4096});
  const model_data data(s);
  for (int step = 0; step < 3; ++step) run_step(s, forward_backward(6), data);
  const engine::coordinator_stats st = s.coord().stats();
  EXPECT_GT(st.prefetch_backoffs + st.evictions, 0U);
  EXPECT_LE(st.arena.peak_used, one_layer + 4096);
  expect_within_plan(s);
}

TEST(Coordinator, AModuleLargerThanTheArenaIsAMemoryErrorNamingTheKeys) {
  engine_stack s({.modules = layered_model(2, 2, 20'000), .config = test_config(), .arena_bytes = 64 * 1024});
  s.coord().begin_step();
  try {
    (void)s.coord().fetch(0);
    FAIL() << "a fetch that cannot fit was accepted";
  } catch (const memory_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("layer0"), std::string::npos) << m;
    EXPECT_NE(m.find("stage3_max_live_parameters"), std::string::npos) << m;
    EXPECT_NE(m.find("zoe.device.budget_bytes"), std::string::npos) << m;
  }
}

TEST(Coordinator, AFetchWaitsForAnotherCallersReleaseWhenTheArenaIsFull) {
  engine_stack probe({.modules = layered_model(2, 1, 40'000), .config = test_config()});
  const std::uint64_t one = probe.coord().full_bytes(0) + allocators::arena_options{}.alignment;
  engine_stack s({.modules = layered_model(2, 1, 40'000), .config = test_config(), .arena_bytes = one});
  const model_data data(s);
  s.coord().begin_step();
  s.coord().fetch(0).wait();
  std::atomic<bool> released{false};
  std::jthread other([&] {
    const engine::fetch_handle h = s.coord().fetch(1);  // waits: module 0 holds the whole arena
    EXPECT_TRUE(released.load());
    h.wait();
    expect_gathered(s, 1, data);
    s.coord().release(1);
  });
  // Release only once the other fetch is seen waiting for space (not after a guessed sleep, which
  // a loaded machine could outlast before the other thread even starts); the deadline only keeps a
  // broken coordinator from hanging the test.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (s.coord().stats().arena_waits == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_GT(s.coord().stats().arena_waits, 0U) << "the second fetch never waited for the full arena";
  released.store(true);
  s.coord().release(0);
  other.join();
  s.coord().end_step();
}

// Two modules of one 4 KiB parameter (fp16) and one of an 8 KiB one (fp32), in an arena of 12 KiB:
// room for a held small module and the big one, as fuzz/regressions/c_api/
// arena_fragmented_by_a_held_module found.
std::vector<engine::module_spec> small_small_big() {
  return {{"small0", {{"small0.w", {2048}, kernels::dtype::fp16}}},
          {"small1", {{"small1.w", {2048}, kernels::dtype::fp16}}},
          {"big", {{"big.w", {2048}, kernels::dtype::fp32}}}};
}

constexpr std::uint64_t small_small_big_arena = 12 * 1024;

// Runs `calls` on a thread, as one caller; false when they have not returned within the deadline
// (the old coordinator waited for ever for a release only that caller could make): `unblock` then
// ends the wait, so that the test fails instead of blocking ctest.
bool finishes(const std::function<void()>& calls, const std::function<void()>& unblock) {
  std::promise<void> done;
  std::future<void> finished = done.get_future();
  std::jthread caller([&] {
    try {
      calls();
      done.set_value();
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  });
  const bool in_time = finished.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  if (!in_time) unblock();
  caller.join();
  finished.get();
  return in_time;
}

TEST(Coordinator, AHeldModuleAboveTheFreedSpaceLeavesRoomForTheLargestModule) {
  engine_stack s({.modules = small_small_big(), .config = test_config(), .arena_bytes = small_small_big_arena});
  const model_data data(s);
  s.coord().begin_step();
  // small0 takes the bottom of the arena, small1 the space above it; small0 goes before small1 is
  // waited for, so a held small1 left in place would sit in the middle, 4 KiB free on either side.
  const engine::fetch_handle first = s.coord().fetch(0);
  const engine::fetch_handle second = s.coord().fetch(1);
  first.wait();
  s.coord().release(0);
  second.wait();
  ASSERT_TRUE(finishes([&] { s.coord().fetch(2).wait(); }, [&] { s.coord().release(1); }))
      << "the fetch of the big module waited for a release while the held module split the arena";
  expect_gathered(s, 1, data);
  expect_gathered(s, 2, data);
  s.coord().release(2);
  s.coord().release(1);
  s.coord().end_step();
}

TEST(Coordinator, AFetchNoReleaseCanMakeRoomForIsAMemoryErrorNamingWhatIsHeld) {
  engine_stack s({.modules = small_small_big(), .config = test_config(), .arena_bytes = small_small_big_arena});
  const model_data data(s);
  s.coord().begin_step();
  // Both small modules held, then the one at the bottom released: the held small1 (pinned: its
  // address was handed out) leaves 4 KiB on either side, and the big module needs 8 KiB in one piece.
  std::string refusal;
  ASSERT_TRUE(finishes(
      [&] {
        s.coord().fetch(0).wait();
        s.coord().fetch(1).wait();
        s.coord().release(0);
        try {
          s.coord().fetch(2).wait();
        } catch (const memory_error& e) {
          refusal = e.what();
        }
      },
      [&] { s.coord().release(1); }))
      << "the fetch waited for a release only its own thread could make";
  EXPECT_NE(refusal.find("'big'"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("'small1'"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("12 KiB"), std::string::npos) << refusal;
  // Nothing changed: the held module is still gathered, the refused fetch is not open, and the big
  // module fits once small1 is released.
  expect_gathered(s, 1, data);
  s.coord().release(1);
  s.coord().fetch(2).wait();
  expect_gathered(s, 2, data);
  s.coord().release(2);
  s.coord().end_step();
}

// A release that frees a parameter whose read is still in flight waits for the read outside the
// lock; another caller's pump (here: its fetches of another module, which pump as they return)
// may see the read arrive first and complete the gather. The policy released the parameter
// already, so that gather must not report it gathered (the policy refuses it as a usage_error,
// thrown at whichever caller pumped). Racy by nature: many rounds.
TEST(Coordinator, AGatherCompletedByAnotherCallerWhileAReleaseWaitsForItsReadIsNoError) {
  for (int round = 0; round < 50; ++round) {
    auto faults = std::make_shared<fault_plan>();
    engine_stack s({.modules = layered_model(2, 1, 20'000), .config = test_config(), .faults = faults});
    const model_data data(s);
    faults->add({.op = io::io_op::read, .hold = true, .times = 1});
    s.coord().begin_step();
    (void)s.coord().fetch(0);  // its read is held: the parameter stays in flight
    std::atomic<bool> released{false};
    std::string failure;
    std::size_t others = 0;  // fetches of module 1, each released at the end
    std::jthread other([&] {
      for (int i = 0; !released.load(); ++i) {
        if (i == 100) faults->release_held();
        try {
          (void)s.coord().fetch(1);  // returns at once and pumps: completes the gathers whose reads arrived
          ++others;
        } catch (const std::exception& e) {
          if (failure.empty()) failure = e.what();
        }
      }
    });
    s.coord().release(0);  // frees the parameter in flight: waits for its read
    released.store(true);
    other.join();
    for (std::size_t i = 0; i < others; ++i) s.coord().release(1);
    EXPECT_EQ(failure, "") << "round " << round;
    EXPECT_NO_THROW(s.coord().end_step());
    EXPECT_EQ(s.coord().arena().stats().used, 0U) << "round " << round;
    if (!failure.empty()) break;
  }
}

TEST(Coordinator, TwoThreadsFetchAndReleaseTheirOwnModules) {
  engine_stack s({.modules = layered_model(8, 2, 10'000), .config = test_config(2)});
  const model_data data(s);
  s.coord().begin_step();
  std::vector<std::jthread> threads;
  for (module_id first : {0U, 1U}) {
    threads.emplace_back([&, first] {
      for (module_id m = first; m < 8; m += 2) {
        s.coord().fetch(m).wait();
        expect_gathered(s, m, data);
        s.coord().release(m);
      }
    });
  }
  threads.clear();
  s.coord().end_step();
  expect_within_plan(s);
}

// Random steps (in the trace's order or not, some layers skipped) and failed reads under the swap
// store: each is reported with the path and offset, and at the end every home still holds exactly
// its data and the gathered copies agree with it.
TEST(Coordinator, RandomSchedulesWithFaultsLoseNothing) {
  auto faults = std::make_shared<fault_plan>();
  engine_stack s({.modules = model_with_persistent(), .config = mixed_config(), .faults = faults});
  model_data data(s);
  std::mt19937_64 rng(12345);
  const std::string folder = s.store()->folders()[0].string();
  int reported = 0;
  const auto check_report = [&](const error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find(folder), std::string::npos) << m;
    EXPECT_NE(m.find("offset"), std::string::npos) << m;
    ++reported;
  };
  const std::vector<module_id> base = forward_backward(6);
  const std::uint64_t chunks = s.store()->capacity() / (16 * 1024);
  for (int step = 0; step < 12; ++step) {
    std::vector<module_id> order = base;
    if (rng() % 3 == 0) std::shuffle(order.begin(), order.end(), rng);
    if (rng() % 4 == 0) order.resize(order.size() / 2);  // a forward-only step
    if (rng() % 2 == 0) {
      faults->add({.op = io::io_op::read, .begin = (rng() % chunks) * 16 * 1024, .inject_errno = EIO, .times = 1});
    }
    s.coord().begin_step();
    for (const module_id m : order) {
      const engine::fetch_handle h = s.coord().fetch(m);
      try {
        h.wait();
      } catch (const io_error& e) {
        check_report(e);
        s.coord().release(m);
        continue;
      }
      expect_gathered(s, m, data);
      s.coord().release(m);
    }
    s.coord().end_step();
  }
  faults->clear();  // the reads of the homes below must not fail
  EXPECT_GT(reported, 0);
  EXPECT_GT(s.coord().stats().failed_gathers, 0U);
  for (const auto& p : s.layout().parameters()) {
    if (s.coord().policy().status(p.id) != engine::gather_status::released) continue;
    EXPECT_TRUE(same_bytes(s.read_home(p.id), data.shards[p.id])) << p.name;
  }
  run_step(s, base, data);  // and the gathered copies agree with the homes
  expect_within_plan(s);
}

}  // namespace
}  // namespace zoe::testing
