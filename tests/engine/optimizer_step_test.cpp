// The pipelined optimizer step: states on nvme, in pinned or pageable host memory, in device
// memory, or split across the three give the bits of Adam over whole shards in memory, for every
// working type and with the pipeline on or off; a read or write that fails in the middle of a step
// leaves every state byte for byte as it was, names what failed, and the retried step gives the
// undisturbed bits; a state not resident is refused; stages alone change nothing.
#include "zoe/engine/optim/optimizer_step.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "fake_device.hpp"
#include "fault_injecting_backend.hpp"
#include "io_test_support.hpp"
#include "swap_store_support.hpp"
#include "tiers_test_support.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/str.hpp"
#include "zoe/core/units.hpp"
#include "zoe/io/swap_channel.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::engine {
namespace {

using bytes = std::vector<std::byte>;
using testing::fault_plan;

// Shards of several 64 KiB chunks (a piece is 32768 elements with a 16-bit state on nvme) and
// small ones, in two modules.
model_layout test_layout(kernels::dtype dtype) {
  return testing::layout_of({{70000, 3000, 40000}, {5000, 33000}}, dtype);
}

// zoe.placement fractions (device, host, nvme) per state, in state_kind order.
using fractions_per_state = std::array<tier_fractions, state_kind_count>;

fractions_per_state everywhere(tier_fractions f) { return {f, f, f, f, f}; }

// Each state split differently, so one shard has states in every tier: the pieces with a state on
// nvme have parts in device and host memory too, and some shards have none on nvme.
fractions_per_state split_three_ways() {
  return {
      tier_fractions{.host = 0.3, .nvme = 0.7},                 // working
      tier_fractions{.device = 0.4, .host = 0.6},               // gradient
      tier_fractions{.device = 0.5, .nvme = 0.5},               // master
      tier_fractions{.device = 0.2, .host = 0.4, .nvme = 0.4},  // exp_avg
      tier_fractions{.host = 0.5, .nvme = 0.5},                 // exp_avg_sq
  };
}

// Stage 3 with every state placed by zoe.placement at `fractions`, host memory pinned or not,
// swap paths at `dir`, 64 KiB chunks.
engine_config placed_config(const std::filesystem::path& dir, const fractions_per_state& fractions,
                            bool pinned = true) {
  auto config = testing::offload_config(offload_device::nvme, offload_device::nvme, dir, pinned);
  config.aio.block_size = testing::store_chunk;
  config.zero.sub_group_size = 50'000;  // sub-groups {p0}, {p1, p2}, {p3, p4}
  for (std::size_t s = 0; s < state_kind_count; ++s) config.zoe.placement[s] = fractions[s];
  return config;
}

// The stack the step runs on: a host device (under the fake device, so a test can fail its
// copies, launches and syncs), pinned memory bounded by the plan, a swap store in a
// scratch folder (over the fault-injecting backend), and the tier manager.
struct stack {
  stack(kernels::dtype dtype, const fractions_per_state& fractions, bool pinned = true)
      : faults(std::make_shared<fault_plan>()),
        config(placed_config(dir.path(), fractions, pinned)),
        layout(test_layout(dtype)),
        where(layout, config),
        plan(make_footprint_plan(layout, config, where)),
        dev(std::make_unique<testing::fake_device>(make_host_device(plan.device_bytes + 64 * MiB))),
        pinned_memory(*dev, allocators::pinned_options{.limit_bytes = std::max<std::uint64_t>(plan.pinned_bytes, 1)}) {
    if (plan.nvme_bytes > 0) {
      io::swap_store_options so = testing::store_options({dir.path()}, plan.nvme_bytes);
      so.wrap_backend = [f = faults](std::unique_ptr<io::io_backend> inner) {
        return std::unique_ptr<io::io_backend>(std::make_unique<testing::fault_injecting_backend>(std::move(inner), f));
      };
      store = std::make_unique<io::swap_store>(std::move(so));
      movers = std::make_unique<mover>(store.get(), &pinned_memory, dev.get(), mover_options{});
    }
    tiers = std::make_unique<tier_manager>(layout, where, plan,
                                           tier_resources{.dev = *dev, .pinned = pinned_memory, .store = store.get()});
  }

  [[nodiscard]] optimizer_step_options options() const {
    return {.sub_group_size = config.zero.sub_group_size,
            .buffer_count = static_cast<std::size_t>(plan.optimizer_buffer_count),
            .buffer_bytes = static_cast<std::size_t>(plan.optimizer_buffer_bytes),
            .undo_bytes = plan.optimizer_undo_bytes,
            .pipeline_read = true,
            .pipeline_write = true,
            .adam_threads = {2}};
  }
  [[nodiscard]] testing::fake_device& fake() { return static_cast<testing::fake_device&>(*dev); }
  [[nodiscard]] std::unique_ptr<optimizer_step> make_step(optimizer_step_options o) {
    return std::make_unique<optimizer_step>(*tiers, *dev, pinned_memory, movers.get(), o);
  }

  // Writes a whole state through its home's location and marks it resident.
  void write(parameter_id p, state_kind s, const bytes& data) {
    ASSERT_TRUE(tiers->begin_move(p, s, move_kind::write));
    const state_location& loc = tiers->location(p, s);
    ASSERT_EQ(loc.bytes, data.size());
    switch (loc.where) {
      case tier::device: {
        const auto st = dev->create_stream();
        dev->copy_async(loc.device, data.data(), data.size(), copy_kind::host_to_device, st.view());
        dev->synchronize(st.view());
        break;
      }
      case tier::host: std::memcpy(loc.host.data(), data.data(), data.size()); break;
      case tier::nvme: {
        io::swap_channel ch(*store);
        testing::aligned_buffer b(data.size());
        std::memcpy(b.data(), data.data(), data.size());
        testing::store_write(ch, loc.extent, 0, b.span());
        break;
      }
    }
    tiers->finish_move(p, s);
  }

  // Reads a whole state from its home.
  [[nodiscard]] bytes read(parameter_id p, state_kind s) {
    const state_location& loc = tiers->location(p, s);
    bytes out(loc.bytes);
    switch (loc.where) {
      case tier::device: {
        const auto st = dev->create_stream();
        dev->copy_async(out.data(), loc.device, out.size(), copy_kind::device_to_host, st.view());
        dev->synchronize(st.view());
        break;
      }
      case tier::host: std::memcpy(out.data(), loc.host.data(), out.size()); break;
      case tier::nvme: {
        io::swap_channel ch(*store);
        testing::aligned_buffer b(out.size());
        const io::io_completion c = testing::store_read(ch, loc.extent, 0, b.span());
        EXPECT_TRUE(c.ok()) << c.message;
        std::memcpy(out.data(), b.data(), out.size());
        break;
      }
    }
    return out;
  }

  // Where `data` (of a state whose extent was written) lies in the swap file: the file offset of
  // its first byte (one path: the file is the extents' address space).
  [[nodiscard]] std::uint64_t file_offset_of(const bytes& data) const {
    const std::filesystem::path path = testing::only_swap_file(*store);
    const bytes file = testing::peek_file(path, 0, static_cast<std::size_t>(std::filesystem::file_size(path)));
    for (std::uint64_t at = 0; at + data.size() <= file.size(); at += 4096) {
      if (std::memcmp(file.data() + at, data.data(), std::min<std::size_t>(data.size(), 4096)) == 0) return at;
    }
    ADD_FAILURE() << "the data is nowhere in the swap file";
    return 0;
  }

  testing::scratch_dir dir;
  std::shared_ptr<fault_plan> faults;
  engine_config config;
  model_layout layout;
  placement where;
  footprint_plan plan;
  std::unique_ptr<device> dev;
  allocators::pinned_host_resource pinned_memory;
  std::unique_ptr<io::swap_store> store;
  std::unique_ptr<mover> movers;  // the rank's mover the step's reads and writes go through (null without a store)
  std::unique_ptr<tier_manager> tiers;
};

// Every state of every shard, as bytes.
using states = std::map<std::pair<parameter_id, state_kind>, bytes>;

bytes floats_to_bytes(const std::vector<float>& v) {
  bytes out(v.size() * sizeof(float));
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

// Random initial states: masters and gradients in [-1, 1), exp_avg small, exp_avg_sq positive,
// the working copy the master in its type; the gradient in its state type.
states initial_states(const model_layout& layout, std::uint64_t seed) {
  std::mt19937 rng(static_cast<std::uint32_t>(seed));
  states out;
  for (const parameter_layout& p : layout.parameters()) {
    const auto n = static_cast<std::size_t>(p.shard_numel);
    const auto fill = [&](float lo, float hi) {
      std::uniform_real_distribution<float> d(lo, hi);
      std::vector<float> v(n);
      for (float& x : v) x = d(rng);
      return v;
    };
    const std::vector<float> master = fill(-1.0f, 1.0f);
    out[{p.id, state_kind::master}] = floats_to_bytes(master);
    out[{p.id, state_kind::exp_avg}] = floats_to_bytes(fill(-0.01f, 0.01f));
    out[{p.id, state_kind::exp_avg_sq}] = floats_to_bytes(fill(0.0f, 1e-4f));
    const auto in_type = [&](const std::vector<float>& v, state_kind s) {
      const kernels::dtype t = state_dtype(p, s);
      bytes b(n * kernels::dtype_size(t));
      kernels::cast(kernels::const_tensor_view(kernels::dtype::fp32, v.data(), n),
                    kernels::tensor_view{t, b.data(), n});
      return b;
    };
    out[{p.id, state_kind::gradient}] = in_type(fill(-1.0f, 1.0f), state_kind::gradient);
    if (state_bytes(p, state_kind::working) > 0)
      out[{p.id, state_kind::working}] = in_type(master, state_kind::working);
  }
  return out;
}

// `steps` Adam steps over whole shards in memory, as the reference.
states reference_steps(const model_layout& layout, states s, const kernels::adam_config& base, int steps) {
  for (int k = 1; k <= steps; ++k) {
    kernels::adam_config c = base;
    c.step = k;
    for (const parameter_layout& p : layout.parameters()) {
      const auto n = static_cast<std::size_t>(p.shard_numel);
      const auto f = [&](state_kind st) {
        return std::span<float>(reinterpret_cast<float*>(s[{p.id, st}].data()), n);  // NOLINT
      };
      kernels::adam_shard shard{.params = f(state_kind::master),
                                .exp_avg = f(state_kind::exp_avg),
                                .exp_avg_sq = f(state_kind::exp_avg_sq),
                                .grad = kernels::const_tensor_view(state_dtype(p, state_kind::gradient),
                                                                   s[{p.id, state_kind::gradient}].data(), n),
                                .working = std::nullopt};
      if (state_bytes(p, state_kind::working) > 0) {
        shard.working = kernels::tensor_view{p.dtype, s[{p.id, state_kind::working}].data(), n};
      }
      kernels::adam_step(c, shard);
    }
  }
  return s;
}

void write_all(stack& st, const states& s) {
  for (const auto& [key, data] : s) st.write(key.first, key.second, data);
}

// Every state as the tiers hold it now equals `expected`, byte for byte; all resident.
::testing::AssertionResult holds(stack& st, const states& expected) {
  for (const auto& [key, data] : expected) {
    const auto& [p, s] = key;
    const std::string what = str(state_kind_name(s), " of ", st.layout.parameter(p).name, " (",
                                 tier_name(st.tiers->location(p, s).where), ")");
    if (st.tiers->status(p, s) != state_status::resident)
      return ::testing::AssertionFailure() << what << " not resident";
    if (st.tiers->dirty(p, s)) return ::testing::AssertionFailure() << what << " is dirty";
    const bytes now = st.read(p, s);
    if (now != data) return ::testing::AssertionFailure() << what << " differs";
  }
  return ::testing::AssertionSuccess();
}

kernels::adam_config adam_at(int step) {
  return {.lr = 1e-2f, .weight_decay = 0.01f, .step = step, .grad_scale = 0.5f};
}

struct placement_case {
  std::string name;
  fractions_per_state fractions;
  bool pinned = true;
};

std::vector<placement_case> placements() {
  return {
      {"nvme", everywhere({.nvme = 1.0})},
      {"pinned_host", everywhere({.host = 1.0})},
      {"pageable_host", everywhere({.host = 1.0}), false},
      {"device", everywhere({.device = 1.0})},
      {"split_three_ways", split_three_ways(), false},
  };
}

struct step_case {
  placement_case where;
  kernels::dtype dtype;
};

class optimizer_step_bits : public ::testing::TestWithParam<step_case> {};

TEST_P(optimizer_step_bits, OneAndThreeStepsAreBitIdenticalToAdamOverWholeShards) {
  const step_case& c = GetParam();
  stack st(c.dtype, c.where.fractions, c.where.pinned);
  if (c.where.name == "split_three_ways") {
    // m0.p1: its master in device memory, exp_avg in host memory, exp_avg_sq on nvme.
    ASSERT_EQ(st.tiers->location(1, state_kind::master).where, tier::device);
    ASSERT_EQ(st.tiers->location(1, state_kind::exp_avg).where, tier::host);
    ASSERT_EQ(st.tiers->location(3, state_kind::exp_avg_sq).where, tier::nvme);
    ASSERT_EQ(st.tiers->location(1, state_kind::exp_avg_sq).where, tier::host);
    ASSERT_EQ(st.tiers->location(1, state_kind::working).where,
              c.dtype == kernels::dtype::fp32 ? tier::device : tier::nvme);
  }
  const states start = initial_states(st.layout, 1);
  write_all(st, start);
  auto step = st.make_step(st.options());
  step->run(adam_at(1));
  EXPECT_TRUE(holds(st, reference_steps(st.layout, start, adam_at(1), 1))) << "after one step";
  step->run(adam_at(2));
  step->run(adam_at(3));
  EXPECT_TRUE(holds(st, reference_steps(st.layout, start, adam_at(1), 3))) << "after three steps";
  const optimizer_step_stats& stats = step->last();
  const bool on_nvme = st.plan.nvme_bytes > 0;
  EXPECT_EQ(stats.bytes_read > 0, on_nvme);
  EXPECT_EQ(stats.bytes_written > 0, on_nvme);
  EXPECT_GT(stats.bytes_stepped, 0U);
  if (on_nvme) {
    EXPECT_GT(stats.pieces, st.layout.parameters().size() / 2);
    EXPECT_GE(stats.max_pieces_in_flight, 1U);
    EXPECT_LE(st.pinned_memory.peak_bytes_in_use(), st.plan.pinned_bytes);
  }
}

std::vector<step_case> step_cases() {
  std::vector<step_case> out;
  for (const placement_case& p : placements()) {
    for (const kernels::dtype t : {kernels::dtype::fp16, kernels::dtype::bf16, kernels::dtype::fp32}) {
      out.push_back({p, t});
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(step, optimizer_step_bits, ::testing::ValuesIn(step_cases()), [](const auto& test) {
  return test.param.where.name + "_" + std::string(kernels::dtype_name(test.param.dtype));
});

TEST(optimizer_step, WithoutReadAheadOrWriteBehindTheBitsAreTheSame) {
  for (const fractions_per_state& f : {everywhere({.nvme = 1.0}), split_three_ways()}) {
    stack st(kernels::dtype::bf16, f);
    const states start = initial_states(st.layout, 2);
    const states expected = reference_steps(st.layout, start, adam_at(1), 2);
    for (const auto& [read, write] : {std::pair{false, true}, std::pair{true, false}, std::pair{false, false}}) {
      write_all(st, start);
      optimizer_step_options o = st.options();
      o.pipeline_read = read;
      o.pipeline_write = write;
      auto step = st.make_step(o);
      step->run(adam_at(1));
      step->run(adam_at(2));
      EXPECT_TRUE(holds(st, expected)) << "pipeline_read " << read << ", pipeline_write " << write;
      if (!read && !write) {
        EXPECT_EQ(step->last().max_pieces_in_flight, 1U) << "one piece at a time";
      }
    }
  }
}

// The pieces of the large shards (70000 elements: three pieces) go through few slots: the pipeline
// waits for writes to give slots back, and still gives the same bits.
TEST(optimizer_step, TheFewestSlotsStillGiveTheSameBits) {
  stack st(kernels::dtype::fp16, everywhere({.nvme = 1.0}));
  const states start = initial_states(st.layout, 3);
  write_all(st, start);
  optimizer_step_options o = st.options();
  o.buffer_count = 5;  // one piece's slots (every state on nvme: five)
  o.buffer_bytes = static_cast<std::size_t>(32768 * 4);
  auto step = st.make_step(o);
  step->run(adam_at(1));
  EXPECT_TRUE(holds(st, reference_steps(st.layout, start, adam_at(1), 1)));
  EXPECT_EQ(step->last().max_pieces_in_flight, 1U);
  o.buffer_count = 4;
  EXPECT_THROW((void)st.make_step(o), config_error) << "four slots cannot hold one piece's five states";
}

// A fault in the middle of the step: at a piece of parameter 3 (m1.p0) of exp_avg, read from its
// home or written to its shadow.
struct failure_case {
  io::io_op op;
  int error;
};

class optimizer_step_failure : public ::testing::TestWithParam<failure_case> {};

TEST_P(optimizer_step_failure, LeavesEveryStateAsBeforeNamesItAndTheRetryGivesTheUndisturbedBits) {
  const failure_case fc = GetParam();
  for (const fractions_per_state& f : {everywhere({.nvme = 1.0}), split_three_ways()}) {
    stack st(kernels::dtype::fp16, f);
    const states start = initial_states(st.layout, 4);
    write_all(st, start);
    auto step = st.make_step(st.options());
    step->run(adam_at(1));
    const states before = reference_steps(st.layout, start, adam_at(1), 1);
    ASSERT_TRUE(holds(st, before));

    // The last parameter (m1.p1, 33000 elements: two pieces) has its states on nvme in both
    // placements; fault its second piece's exp_avg. Its home holds `before`; after the first
    // step its shadow holds `start` (the old home).
    const parameter_id p = 4;
    ASSERT_EQ(st.tiers->location(p, state_kind::exp_avg).where, tier::nvme);
    const std::uint64_t at = st.file_offset_of(fc.op == io::io_op::read ? before.at({p, state_kind::exp_avg})
                                                                        : start.at({p, state_kind::exp_avg})) +
                             32768 * 4;
    st.faults->add({.op = fc.op, .begin = at, .end = at + 1, .inject_errno = fc.error});
    try {
      step->run(adam_at(2));
      FAIL() << "the step did not fail";
    } catch (const io_error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("exp_avg of parameter 'm1.p1'"), std::string::npos) << m;
      EXPECT_NE(m.find(st.store->folders()[0].string()), std::string::npos) << m;
      EXPECT_NE(m.find("offset " + std::to_string(32768 * 4)), std::string::npos) << m;
      EXPECT_EQ(e.os_errno(), fc.error);
    }
    EXPECT_EQ(st.faults->fired(), 1);
    EXPECT_TRUE(holds(st, before)) << "every state as before the failed step";
    step->run(adam_at(2));
    EXPECT_TRUE(holds(st, reference_steps(st.layout, start, adam_at(1), 2))) << "the retry is the undisturbed step";
  }
}

INSTANTIATE_TEST_SUITE_P(step, optimizer_step_failure,
                         ::testing::Values(failure_case{io::io_op::read, EIO}, failure_case{io::io_op::write, ENOSPC}),
                         [](const auto& test) { return test.param.op == io::io_op::read ? "read" : "write"; });

TEST(optimizer_step, AStateNotResidentIsAUsageErrorNamingItAndNothingChanges) {
  stack st(kernels::dtype::fp16, split_three_ways());
  const states start = initial_states(st.layout, 5);
  write_all(st, start);
  st.tiers->mark_released(2, state_kind::exp_avg_sq);
  auto step = st.make_step(st.options());
  try {
    step->run(adam_at(1));
    FAIL() << "a released state must be refused";
  } catch (const usage_error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("exp_avg_sq of parameter 'm0.p2'"), std::string::npos) << m;
    EXPECT_NE(m.find("released"), std::string::npos) << m;
  }
  st.tiers->mark_written(2, state_kind::exp_avg_sq);
  EXPECT_TRUE(holds(st, start)) << "nothing moved, nothing held";
  EXPECT_THROW(step->run(kernels::adam_config{.beta1 = 1.5f}), usage_error) << "bad settings, before anything moves";
  EXPECT_TRUE(holds(st, start));
}

TEST(optimizer_step, ACommittedStepSwapsHomeAndShadow) {
  stack st(kernels::dtype::fp16, everywhere({.nvme = 1.0}));
  write_all(st, initial_states(st.layout, 6));
  const io::swap_extent home = st.tiers->location(0, state_kind::master).extent;
  const io::swap_extent shadow = st.tiers->shadow(0, state_kind::master);
  auto step = st.make_step(st.options());
  step->run(adam_at(1));
  EXPECT_EQ(st.tiers->location(0, state_kind::master).extent.id, shadow.id);
  EXPECT_EQ(st.tiers->shadow(0, state_kind::master).id, home.id);
  EXPECT_EQ(st.tiers->shadow(0, state_kind::gradient).bytes, 0U) << "the gradient is only read";
}

// Each stage alone (and any two) changes no state; all three are the step.
TEST(optimizer_step, StagesAloneChangeNothingAndAllThreeAreTheStep) {
  for (const fractions_per_state& f : {everywhere({.nvme = 1.0}), split_three_ways(), everywhere({.host = 1.0})}) {
    stack st(kernels::dtype::fp16, f);
    const states start = initial_states(st.layout, 7);
    write_all(st, start);
    auto step = st.make_step(st.options());
    for (const step_stages which : {step_stages{.read = true, .adam = false, .write = false},
                                    step_stages{.read = false, .adam = true, .write = false},
                                    step_stages{.read = false, .adam = false, .write = true},
                                    step_stages{.read = true, .adam = false, .write = true},
                                    step_stages{.read = true, .adam = true, .write = false}}) {
      step->run_stages(adam_at(1), which);
      EXPECT_TRUE(holds(st, start)) << which.read << which.adam << which.write;
      const optimizer_step_stats& s = step->last();
      EXPECT_EQ(s.adam_seconds > 0 || s.bytes_stepped > 0, which.adam);
    }
    step->run_stages(adam_at(1), step_stages{});
    EXPECT_TRUE(holds(st, reference_steps(st.layout, start, adam_at(1), 1)));
  }
}

// Memory only, three kinds of shard (asserted below): m0.p0 and m0.p1 all in device memory (two
// kernels); m0.p2 its working copy and gradient in device memory, the rest in host memory; m1.p0
// only its working copy in device memory; m1.p1 all in host memory.
fractions_per_state device_and_host() {
  return {
      tier_fractions{.device = 0.76, .host = 0.24},  // working
      tier_fractions{.device = 0.5, .host = 0.5},    // gradient
      tier_fractions{.device = 0.47, .host = 0.53},  // master
      tier_fractions{.device = 0.47, .host = 0.53},  // exp_avg
      tier_fractions{.device = 0.47, .host = 0.53},  // exp_avg_sq
  };
}

// What the fake device fails, the nth time from the step's start: a copy (refused), a host task's
// launch (refused), or a stream's sync (its work reported failed).
enum class device_fault { copy, launch, stream_sync };

void inject(testing::fake_device& dev, device_fault fault, int nth) {
  switch (fault) {
    case device_fault::copy: dev.fail_copy(nth); break;
    case device_fault::launch: dev.refuse_launch(nth); break;
    case device_fault::stream_sync: dev.fail_stream_sync(nth); break;
  }
}

struct device_failure_case {
  std::string name;
  fractions_per_state fractions;
  device_fault fault;
};

void PrintTo(const device_failure_case& c, std::ostream* os) {  // NOLINT(readability-identifier-naming)
  *os << c.name << ", fault " << static_cast<int>(c.fault);
}

class optimizer_step_device_failure : public ::testing::TestWithParam<device_failure_case> {};

// Whether the step writes `p`'s rewritten device states in place with nothing logged (the one
// exception to all-or-nothing, optimizer_step.hpp): nothing on nvme, and every state in device
// memory or only the working copy there.
bool written_unlogged(stack& st, parameter_id p) {
  bool all_device = true;
  bool others_in_host = true;
  for (const state_kind s : all_states) {
    if (state_bytes(st.layout.parameter(p), s) == 0) continue;
    const tier t = st.tiers->location(p, s).where;
    if (t == tier::nvme) return false;
    all_device = all_device && t == tier::device;
    if (s != state_kind::working) others_in_host = others_in_host && t == tier::host;
  }
  return all_device || (others_in_host && st.tiers->location(p, state_kind::working).where == tier::device);
}

// Every fallible device call of the step in turn. A failure before the step writes the shards it
// does not log leaves every state as it was, and the retried step gives the undisturbed bits; a
// failure while it writes them leaves every other shard as it was and refuses every later run,
// naming the failure, so nothing is stepped twice.
TEST_P(optimizer_step_device_failure, EachFailureLeavesTheStatesAsBeforeOrRefusesEveryLaterRun) {
  const device_failure_case& c = GetParam();
  stack st(kernels::dtype::bf16, c.fractions, false);
  if (c.name == "device_and_host") {
    const auto at = [&](parameter_id p, state_kind s) { return st.tiers->location(p, s).where; };
    for (const state_kind s : all_states) {
      ASSERT_EQ(at(0, s), tier::device) << state_kind_name(s);
      ASSERT_EQ(at(1, s), tier::device) << state_kind_name(s);
      ASSERT_EQ(at(4, s), tier::host) << state_kind_name(s);
    }
    ASSERT_EQ(at(2, state_kind::working), tier::device);
    ASSERT_EQ(at(2, state_kind::gradient), tier::device);
    ASSERT_EQ(at(2, state_kind::master), tier::host);
    ASSERT_EQ(at(3, state_kind::working), tier::device);
    ASSERT_EQ(at(3, state_kind::gradient), tier::host);
  }
  const states start = initial_states(st.layout, 7);
  const states once = reference_steps(st.layout, start, adam_at(1), 1);
  states logged;  // the states of the shards a failure must always leave as they were
  for (const auto& [key, data] : start) {
    if (!written_unlogged(st, key.first)) logged.emplace(key, data);
  }
  int failures = 0;
  int refusals = 0;
  for (int nth = 1;; ++nth) {
    ASSERT_LT(nth, 1000) << "the step never ran undisturbed";
    write_all(st, start);
    auto step = st.make_step(st.options());  // a refused step stays refused: a new one each time
    inject(st.fake(), c.fault, nth);
    bool failed = false;
    try {
      step->run(adam_at(1));
    } catch (const device_error&) {
      failed = true;
    }
    inject(st.fake(), c.fault, 0);
    if (!failed) {
      EXPECT_TRUE(holds(st, once)) << "the undisturbed step";
      break;
    }
    ++failures;
    EXPECT_TRUE(holds(st, logged)) << "after a failure of device call " << nth;
    const bool all_as_before = holds(st, start);
    try {
      step->run(adam_at(1));
      EXPECT_TRUE(all_as_before) << "a step that changed unlogged states before failing ran again";
      EXPECT_TRUE(holds(st, once)) << "the step retried after a failure of device call " << nth;
    } catch (const device_error& e) {
      ++refusals;
      EXPECT_THAT(e.what(), ::testing::HasSubstr("refused: an earlier step failed")) << "device call " << nth;
      EXPECT_TRUE(holds(st, logged)) << "the refused run changed a state";
    }
  }
  EXPECT_GT(failures, 0) << "the step made no such device call";
  if (c.name == "device_and_host") {
    EXPECT_GT(refusals, 0) << "no failure reached the unlogged shards";
    // The split shard m0.p2 copies and syncs before the unlogged shards are written: failures there
    // are undone, not refused.
    if (c.fault != device_fault::launch) {
      EXPECT_LT(refusals, failures) << "a failure before them was refused";
    }
  }
  if (logged.size() == start.size()) {
    EXPECT_EQ(refusals, 0) << "every shard is logged, yet a failure refused later runs";
  }
}

std::string device_failure_name(const ::testing::TestParamInfo<device_failure_case>& info) {
  constexpr std::array<std::string_view, 3> faults = {"copy", "launch", "stream_sync"};
  return info.param.name + "_" + std::string(faults[static_cast<std::size_t>(info.param.fault)]);
}

INSTANTIATE_TEST_SUITE_P(
    step, optimizer_step_device_failure,
    ::testing::Values(device_failure_case{"device_and_host", device_and_host(), device_fault::copy},
                      device_failure_case{"device_and_host", device_and_host(), device_fault::launch},
                      device_failure_case{"device_and_host", device_and_host(), device_fault::stream_sync},
                      device_failure_case{"split_three_ways", split_three_ways(), device_fault::copy},
                      device_failure_case{"split_three_ways", split_three_ways(), device_fault::stream_sync}),
    device_failure_name);

// The totals add every run, failed ones too; last_step() is the last whole step, which stage runs
// and failed runs leave as it was (the engine's statistics after measure_stages).
TEST(optimizer_step, TotalsAddEveryRunAndOnlyAWholeStepIsTheLastStep) {
  stack st(kernels::dtype::fp16, everywhere({.nvme = 1.0}));
  write_all(st, initial_states(st.layout, 8));
  auto step = st.make_step(st.options());
  EXPECT_EQ(step->last_step().pieces, 0U) << "no step yet";
  step->run(adam_at(1));
  const optimizer_step_stats first = step->last();
  EXPECT_GT(first.bytes_read, 0U);
  EXPECT_GT(first.bytes_written, 0U);
  EXPECT_EQ(step->last_step().seconds, first.seconds);

  step->run_stages(adam_at(2), step_stages{.read = true, .adam = false, .write = true});
  const optimizer_step_stats stages = step->last();
  st.faults->add({.op = io::io_op::read, .inject_errno = EIO});
  EXPECT_THROW(step->run(adam_at(2)), io_error);
  const optimizer_step_stats failed = step->last();
  EXPECT_EQ(step->last_step().seconds, first.seconds) << "the stage run and the failed run are not steps";
  EXPECT_EQ(step->last_step().bytes_written, first.bytes_written);

  const optimizer_step_totals& t = step->totals();
  EXPECT_EQ(t.steps, 1U);
  EXPECT_EQ(t.stage_runs, 1U);
  EXPECT_EQ(t.failed_runs, 1U);
  EXPECT_EQ(t.bytes_read, first.bytes_read + stages.bytes_read + failed.bytes_read);
  EXPECT_EQ(t.bytes_written, first.bytes_written + stages.bytes_written + failed.bytes_written);
  EXPECT_EQ(t.bytes_stepped, first.bytes_stepped + stages.bytes_stepped + failed.bytes_stepped);
  EXPECT_DOUBLE_EQ(t.seconds, first.seconds + stages.seconds + failed.seconds);
}

}  // namespace
}  // namespace zoe::engine
