// The gradient path over the whole stack on the host device: micro-batches accumulated in fp32 into
// gradient homes on the device, in pinned or pageable host memory, on nvme and split over the three,
// each checked bit for bit against sums made on the host; the summary's fixed order; buckets and
// back-pressure; usage errors; and failed nvme reads and writes.
#include "zoe/engine/optim/gradient_path.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "engine_stack.hpp"
#include "zoe/core/error.hpp"
#include "zoe/core/units.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"
#include "zoe/io/swap_channel.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::testing {
namespace {

using engine::gradient_path;
using engine::gradient_path_options;
using engine::gradient_summary;
using engine::module_id;
using engine::parameter_id;
using engine::state_kind;
using engine::tier;
using engine::tier_fractions;

enum class home_kind { device, pinned, pageable, nvme, split };

std::string name_of(home_kind h) {
  switch (h) {
    case home_kind::device: return "device";
    case home_kind::pinned: return "pinned";
    case home_kind::pageable: return "pageable";
    case home_kind::nvme: return "nvme";
    case home_kind::split: return "split";
  }
  return "?";
}

// Working copies on nvme in 16 KiB blocks (nvme_config); the gradient where `h` says.
engine::engine_config config_for(home_kind h, bool overlap_comm = false, std::uint64_t bucket_elements = 500'000'000) {
  engine::engine_config c = nvme_config();
  c.zero.overlap_comm = overlap_comm;
  c.zero.reduce_bucket_size = bucket_elements;
  tier_fractions f;
  switch (h) {
    case home_kind::device: f = {.device = 1}; break;
    case home_kind::pinned: f = {.host = 1}; break;
    case home_kind::pageable: {
      f = {.host = 1};
      engine::offload_optimizer_config o;
      o.device = engine::offload_device::cpu;
      o.pin_memory = false;
      c.zero.offload_optimizer = o;
      break;
    }
    case home_kind::nvme: f = {.nvme = 1}; break;
    case home_kind::split: f = {.device = 0.25, .host = 0.25, .nvme = 0.5}; break;
  }
  c.zoe.placement[static_cast<std::size_t>(state_kind::gradient)] = f;
  // The masters on nvme with the working copies: the fp32 parameter's working copy is its master,
  // and offload_param would otherwise warn that it cannot move it there.
  c.zoe.placement[static_cast<std::size_t>(state_kind::master)] = tier_fractions{.nvme = 1};
  return c;
}

// Two modules of two parameters of ~150k elements (three 64 Ki-element pieces each on nvme), of
// fp16, bf16 and fp32, so every source type is accumulated.
std::vector<engine::module_spec> model() {
  return layered_model(2, 2, 150'000, {kernels::dtype::fp16, kernels::dtype::bf16, kernels::dtype::fp32});
}

gradient_path_options options_of(const engine::footprint_plan& plan) {
  return {.bucket_bytes = plan.gradient_bucket_bytes,
          .bucket_count = static_cast<std::size_t>(plan.gradient_bucket_count),
          .staging_buffer_count = static_cast<std::size_t>(plan.gradient_buffer_count),
          .staging_buffer_bytes = static_cast<std::size_t>(plan.gradient_buffer_bytes)};
}

// qgZ (zero_quantized_gradients) on or off, and the scratch the plan lends it.
engine::engine_config quantized(engine::engine_config c, bool on) {
  c.zero.zero_quantized_gradients = on;
  return c;
}
gradient_path_options quantized(gradient_path_options o, const engine::footprint_plan& plan) {
  o.quantized_scratch_bytes = static_cast<std::size_t>(plan.qgz_scratch_bytes);
  return o;
}

// The stack, a gradient path over it sized by the plan, a stream, and the host's reference sums.
struct bench {
  explicit bench(home_kind h, bool overlap_comm = false, std::uint64_t bucket_elements = 500'000'000,
                 std::shared_ptr<fault_plan> faults = nullptr, bool use_fake_device = false,
                 bool quantized_gradients = false, std::vector<engine::module_spec> modules = model())
      : s({.modules = std::move(modules),
           .config = quantized(config_for(h, overlap_comm, bucket_elements), quantized_gradients),
           .faults = std::move(faults),
           .use_fake_device = use_fake_device}),
        path(s.tiers(), s.comm(), s.dev(), s.pinned(), &s.movers(), quantized(options_of(s.plan()), s.plan())),
        stream(s.dev().create_stream()),
        reference(s.layout().parameters().size()) {
    for (const auto& p : s.layout().parameters()) reference[p.id].assign(p.shard_numel, 0.0f);
  }

  // Micro-batch values of p: N(0, 1) real elements in p's dtype (widened exactly into `widened`),
  // zero padding; `special` replaces element 17.
  std::vector<std::byte> values(parameter_id p, std::uint64_t seed, std::vector<float>& widened,
                                float special = 0.0f) const {
    const auto& prm = s.layout().parameter(p);
    std::mt19937_64 rng(seed * 1000 + p);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(prm.shard_numel, 0.0f);
    for (std::uint64_t i = 0; i < prm.numel; ++i) x[i] = normal(rng);
    if (special != 0.0f) x[17] = special;
    std::vector<std::byte> bytes(x.size() * kernels::dtype_size(prm.dtype));
    kernels::cast(kernels::view(std::span<const float>(x)), kernels::tensor_view{prm.dtype, bytes.data(), x.size()});
    widened.resize(x.size());
    kernels::cast(kernels::const_tensor_view{prm.dtype, bytes.data(), x.size()},
                  kernels::view(std::span<float>(widened)));
    return bytes;
  }

  // Writes module m's gradients of micro-batch `seed` into memory acquire(m) lent.
  void fill(module_id m, const std::vector<void*>& memory, std::uint64_t seed, bool first, float special = 0.0f) {
    const auto& params = s.layout().module(m).parameters;
    ASSERT_EQ(memory.size(), params.size());
    for (std::size_t i = 0; i < params.size(); ++i) {
      std::vector<float> widened;
      const std::vector<std::byte> bytes = values(params[i], seed, widened, special);
      s.dev().copy_async(memory[i], bytes.data(), bytes.size(), copy_kind::host_to_device, stream.view());
      s.dev().synchronize(stream.view());  // `bytes` leaves scope
      std::vector<float>& r = reference[params[i]];
      for (std::size_t k = 0; k < r.size(); ++k) r[k] = first ? widened[k] : r[k] + widened[k];
    }
  }

  void backward(module_id m, std::uint64_t seed, bool first, float special = 0.0f) {
    const std::vector<void*> memory = path.acquire(m, stream.view());
    fill(m, memory, seed, first, special);
    path.reduce(m, stream.view());
  }

  // One step of `k` micro-batches over every module.
  gradient_summary step(std::size_t k, std::uint64_t seed = 1) {
    for (std::size_t mb = 0; mb < k; ++mb) {
      path.begin_micro_batch(mb, k);
      for (const auto& m : s.layout().modules()) backward(m.id, seed * 100 + mb, mb == 0);
      path.end_micro_batch();
    }
    return path.summary();
  }

  // The gradient state of p as its home holds it.
  std::vector<float> gradient(parameter_id p) {
    const engine::state_location& loc = s.tiers().location(p, state_kind::gradient);
    std::vector<float> out(loc.bytes / sizeof(float));
    switch (loc.where) {
      case tier::device: {
        const std::vector<std::byte> b = s.from_device(loc.device, loc.bytes);
        std::memcpy(out.data(), b.data(), loc.bytes);
        break;
      }
      case tier::host: std::memcpy(out.data(), loc.host.data(), loc.bytes); break;
      case tier::nvme: {
        const std::size_t size = round_up(loc.bytes, 4096);
        std::unique_ptr<std::byte, decltype(&std::free)> buffer(static_cast<std::byte*>(std::aligned_alloc(4096, size)),
                                                                &std::free);
        io::swap_channel channel(*s.store());
        const io::swap_request read{io::io_op::read, loc.extent, 0, std::span<std::byte>(buffer.get(), loc.bytes), 0};
        channel.run(std::span<const io::swap_request>(&read, 1));
        std::memcpy(out.data(), buffer.get(), loc.bytes);
        break;
      }
    }
    return out;
  }

  // kernels::sum_of_squares of each reference shard, added in layout order from 0.
  [[nodiscard]] double reference_sum() const {
    double total = 0.0;
    for (const auto& r : reference) total += kernels::sum_of_squares(kernels::view(std::span<const float>(r)));
    return total;
  }

  void expect_gradients_match(const std::string& what) {
    for (const auto& p : s.layout().parameters()) {
      EXPECT_EQ(s.tiers().status(p.id, state_kind::gradient), engine::state_status::resident) << what << " " << p.name;
      const std::vector<float> got = gradient(p.id);
      ASSERT_EQ(got.size(), reference[p.id].size());
      EXPECT_EQ(std::memcmp(got.data(), reference[p.id].data(), got.size() * sizeof(float)), 0)
          << what << ": the gradient of " << p.name << " in "
          << engine::tier_name(s.tiers().location(p.id, state_kind::gradient).where);
    }
  }

  engine_stack s;
  gradient_path path;
  device_stream stream;
  std::vector<std::vector<float>> reference;
};

std::uint64_t bits(double x) {
  std::uint64_t u = 0;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}

class gradient_homes : public ::testing::TestWithParam<home_kind> {};

TEST_P(gradient_homes, ThreeMicroBatchesAccumulateInFp32AsTheHostAddsThem) {
  bench b(GetParam());
  // The placement is the one asked for.
  std::vector<int> per_tier(3, 0);
  for (const auto& p : b.s.layout().parameters()) {
    const auto& loc = b.s.tiers().location(p.id, state_kind::gradient);
    ++per_tier[static_cast<std::size_t>(loc.where)];
    if (loc.where == tier::host) {
      EXPECT_EQ(loc.pinned, GetParam() != home_kind::pageable);
    }
  }
  if (GetParam() == home_kind::split) {
    for (const int n : per_tier) ASSERT_GT(n, 0) << "split puts a gradient in every tier";
  }
  const gradient_summary summary = b.step(3);
  b.expect_gradients_match(name_of(GetParam()));
  EXPECT_FALSE(summary.overflow);
  EXPECT_EQ(bits(summary.sum_of_squares), bits(b.reference_sum()));
  // A second step starts over: micro-batch 0 overwrites.
  for (auto& r : b.reference) std::fill(r.begin(), r.end(), 0.0f);
  const gradient_summary again = b.step(2, 7);
  b.expect_gradients_match(name_of(GetParam()) + ", second step");
  EXPECT_EQ(bits(again.sum_of_squares), bits(b.reference_sum()));
  const engine::gradient_path_stats st = b.path.stats();
  EXPECT_EQ(st.modules_reduced, 2U * 5);
  // Each of the five micro-batches copied every gradient whose home is off the device, once.
  std::uint64_t off_device = 0;
  for (const auto& p : b.s.layout().parameters()) {
    if (b.s.tiers().location(p.id, state_kind::gradient).where != tier::device) {
      off_device += p.shard_numel * kernels::dtype_size(p.dtype);
    }
  }
  EXPECT_EQ(st.bytes_to_host, 5 * off_device);
  if (GetParam() == home_kind::nvme) {
    EXPECT_GT(st.bytes_read, 0U);
    EXPECT_GT(st.bytes_written, 0U);
  }
  // The memory the plan listed, and no more.
  EXPECT_EQ(st.pinned_bytes, b.s.plan().gradient_buffer_count * b.s.plan().gradient_buffer_bytes);
  EXPECT_EQ(st.device_bucket_bytes, b.s.plan().gradient_bucket_count * b.s.plan().gradient_bucket_bytes);
  EXPECT_LE(b.s.pinned().peak_bytes_in_use(), b.s.plan().pinned_bytes);
}

INSTANTIATE_TEST_SUITE_P(gradient_path, gradient_homes,
                         ::testing::Values(home_kind::device, home_kind::pinned, home_kind::pageable, home_kind::nvme,
                                           home_kind::split),
                         [](const auto& param_info) { return name_of(param_info.param); });

// The norm is one fixed order whatever the tiers: the same bits everywhere, near the fp64 sum.
TEST(gradient_path, TheSummaryIsTheSameBitsOnEveryPlacement) {
  std::vector<std::uint64_t> seen;
  long double exact = 0;
  for (const home_kind h :
       {home_kind::device, home_kind::pinned, home_kind::pageable, home_kind::nvme, home_kind::split}) {
    bench b(h);
    seen.push_back(bits(b.step(2, 3).sum_of_squares));
    if (h == home_kind::device) {
      for (const auto& r : b.reference) {
        for (const float x : r) exact += static_cast<long double>(x) * x;
      }
    }
  }
  for (std::size_t i = 1; i < seen.size(); ++i) EXPECT_EQ(seen[i], seen[0]) << "placement " << i;
  double first = 0;
  std::memcpy(&first, seen.data(), sizeof(first));
  EXPECT_NEAR(first, static_cast<double>(exact), 1e-12 * static_cast<double>(exact));
}

TEST(gradient_path, AnInfOrANanAnywhereIsAnOverflow) {
  for (const float special : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    bench b(home_kind::split);
    // Micro-batch 1 of 2, in module 1's parameters (on nvme): the flag comes from a read-modify-write.
    for (std::size_t mb = 0; mb < 2; ++mb) {
      b.path.begin_micro_batch(mb, 2);
      b.backward(0, mb, mb == 0);
      b.backward(1, mb, mb == 0, mb == 1 ? special : 0.0f);
      b.path.end_micro_batch();
    }
    const gradient_summary summary = b.path.summary();
    EXPECT_TRUE(summary.overflow) << special;
    EXPECT_FALSE(std::isfinite(summary.sum_of_squares)) << special;
  }
  bench clean(home_kind::split);
  EXPECT_FALSE(clean.step(1).overflow);
}

// overlap_comm: two buckets of one module each, both lent at once; the second's gradients are
// written while the first is still being reduced.
TEST(gradient_path, OverlapCommLendsTwoBucketsAtOnce) {
  bench b(home_kind::split, true, 1);
  ASSERT_EQ(b.s.plan().gradient_bucket_count, 2U);
  b.path.begin_micro_batch(0, 1);
  const std::vector<void*> m0 = b.path.acquire(0, b.stream.view());
  const std::vector<void*> m1 = b.path.acquire(1, b.stream.view());
  b.fill(0, m0, 5, true);
  b.fill(1, m1, 5, true);
  b.path.reduce(1, b.stream.view());
  b.path.reduce(0, b.stream.view());
  b.path.end_micro_batch();
  EXPECT_EQ(b.path.stats().bucket_waits, 0U);
  EXPECT_EQ(b.path.stats().device_bucket_bytes, 2 * b.s.plan().gradient_bucket_bytes);
  b.expect_gradients_match("two buckets");
  EXPECT_EQ(bits(b.path.summary().sum_of_squares), bits(b.reference_sum()));
}

// The world-size-1 communicator whose coalesced reduce-scatters hold their stream until open() (or
// a minute, so a broken test fails instead of hanging): what has passed shows which buckets'
// reductions have run.
class gated_communicator final : public engine::communicator {
 public:
  gated_communicator(device& dev, engine::communicator& inner) : dev_(dev), inner_(inner) {}

  void open() {
    {
      const std::lock_guard lock(mutex_);
      open_ = true;
    }
    opened_.notify_all();
  }
  [[nodiscard]] std::size_t passed() const noexcept { return passed_.load(); }

  [[nodiscard]] std::size_t rank() const noexcept override { return inner_.rank(); }
  [[nodiscard]] std::size_t size() const noexcept override { return inner_.size(); }
  [[nodiscard]] std::string name() const override { return "gated " + inner_.name(); }
  void all_gather(const void* send, void* recv, std::size_t bytes, stream_view stream) override {
    inner_.all_gather(send, recv, bytes, stream);
  }
  void all_gather_coalesced(std::span<const engine::gather_part> parts, stream_view stream) override {
    inner_.all_gather_coalesced(parts, stream);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t count, kernels::dtype type, engine::reduce_op op,
                      stream_view stream) override {
    inner_.reduce_scatter(send, recv, count, type, op, stream);
  }
  void reduce_scatter_coalesced(std::span<const engine::reduce_part> parts, engine::reduce_op op,
                                stream_view stream) override {
    dev_.launch_host(stream, [this] {
      std::unique_lock lock(mutex_);
      opened_.wait_for(lock, std::chrono::minutes(1), [this] { return open_; });
      ++passed_;
    });
    inner_.reduce_scatter_coalesced(parts, op, stream);
  }
  void all_to_all(const void* send, void* recv, std::size_t bytes, stream_view stream) override {
    inner_.all_to_all(send, recv, bytes, stream);
  }
  void all_reduce(const void* send, void* recv, std::size_t count, kernels::dtype type, engine::reduce_op op,
                  stream_view stream) override {
    inner_.all_reduce(send, recv, count, type, op, stream);
  }
  void broadcast(void* buffer, std::size_t bytes, std::size_t root, stream_view stream) override {
    inner_.broadcast(buffer, bytes, root, stream);
  }
  void point_to_point(void* buffer, std::size_t bytes, std::size_t from, std::size_t to, stream_view stream) override {
    inner_.point_to_point(buffer, bytes, from, to, stream);
  }
  void barrier() override { inner_.barrier(); }
  [[nodiscard]] communicator& node_local() override { return *this; }
  [[nodiscard]] communicator& cross_node() override { return *this; }
  [[nodiscard]] communicator& hpz() override { return *this; }
  [[nodiscard]] engine::comm_stats stats() const override { return inner_.stats(); }
  void abort(std::string_view reason) noexcept override { inner_.abort(reason); }

 private:
  device& dev_;
  engine::communicator& inner_;
  std::mutex mutex_;
  std::condition_variable opened_;
  bool open_ = false;
  std::atomic<std::size_t> passed_{0};
};

// overlap_comm, one module per bucket: acquiring the second module seals the first bucket and
// issues its reduction, and the second bucket is lent and filled while that reduction is still held
// at the gate (not run yet): backward and the reduction overlap. Then both are reduced, one
// collective each, and the gradients are the host's sums.
TEST(gradient_path, OverlapCommFillsOneBucketWhileTheOtherIsReduced) {
  bench b(home_kind::split, true, 1);
  ASSERT_EQ(b.s.plan().gradient_bucket_count, 2U);
  gated_communicator gate(b.s.dev(), b.s.comm());
  gradient_path path(b.s.tiers(), gate, b.s.dev(), b.s.pinned(), &b.s.movers(), options_of(b.s.plan()));
  const std::uint64_t calls = gate.stats().calls;
  path.begin_micro_batch(0, 1);
  const std::vector<void*> m0 = path.acquire(0, b.stream.view());
  b.fill(0, m0, 3, true);
  path.reduce(0, b.stream.view());
  EXPECT_EQ(gate.stats().calls, calls) << "the bucket being filled is not reduced yet";
  const std::vector<void*> m1 = path.acquire(1, b.stream.view());
  EXPECT_EQ(gate.stats().calls, calls + 1) << "moving on to the second bucket issues the first's reduction";
  b.fill(1, m1, 3, true);
  path.reduce(1, b.stream.view());
  EXPECT_EQ(gate.passed(), 0U) << "the first bucket's reduction ran before the second bucket was filled";
  EXPECT_EQ(path.stats().bucket_waits, 0U);
  gate.open();
  path.end_micro_batch();
  EXPECT_EQ(gate.passed(), 2U);
  EXPECT_EQ(gate.stats().calls, calls + 2);
  b.expect_gradients_match("two buckets overlapped");
  EXPECT_EQ(bits(path.summary().sum_of_squares), bits(b.reference_sum()));
}

// Many small parameters: each micro-batch issues one reduce-scatter per bucket it filled (the
// modules in backward's order, a bucket sealed when the next module does not fit), not one per
// parameter, whatever the bucket size, with one bucket or two, and the gradients are the host's sums
// bit for bit.
TEST(gradient_path, OneReduceScatterPerBucketPerMicroBatch) {
  const auto many = [] {
    return layered_model(6, 3, 1000, {kernels::dtype::fp32, kernels::dtype::fp16, kernels::dtype::bf16});
  };
  // reduce_bucket_size 1 gives buckets of the largest module; twice that many fp32 elements' bytes
  // hold two modules (the largest is the last, and every module is within a few elements of it).
  const std::uint64_t largest =
      bench(home_kind::split, false, 1, nullptr, false, false, many()).s.plan().gradient_bucket_bytes;
  const std::uint64_t two_modules = (2 * largest + 3) / 4;
  for (const bool overlap : {false, true}) {
    for (const std::uint64_t elements : {std::uint64_t{1}, two_modules, std::uint64_t{500'000'000}}) {
      bench b(home_kind::split, overlap, elements, nullptr, false, false, many());
      // The buckets backward fills, as the path lends them: each parameter aligned in its bucket.
      std::size_t buckets = 0;
      std::uint64_t used = b.s.plan().gradient_bucket_bytes;
      for (const auto& m : b.s.layout().modules()) {
        std::uint64_t bytes = 0;
        for (const parameter_id id : m.parameters) {
          const auto& p = b.s.layout().parameter(id);
          bytes += round_up(p.padded_numel(1) * kernels::dtype_size(p.dtype), engine::arena_alignment);
        }
        if (used + bytes > b.s.plan().gradient_bucket_bytes) {
          ++buckets;
          used = 0;
        }
        used += bytes;
      }
      const std::string what = "overlap_comm " + std::to_string(overlap) + ", reduce_bucket_size " +
                               std::to_string(elements) + ": " + std::to_string(buckets) + " buckets";
      ASSERT_EQ(b.s.layout().parameters().size(), 18U);
      if (elements == 1) {
        EXPECT_EQ(buckets, 6U) << what;
      } else if (elements == two_modules) {
        EXPECT_EQ(buckets, 3U) << what;
      } else {
        EXPECT_EQ(buckets, 1U) << what;
      }
      for (std::size_t mb = 0; mb < 3; ++mb) {
        const std::uint64_t before = b.s.comm().stats().calls;
        b.path.begin_micro_batch(mb, 3);
        for (const auto& m : b.s.layout().modules()) b.backward(m.id, 40 + mb, mb == 0);
        b.path.end_micro_batch();
        EXPECT_EQ(b.s.comm().stats().calls - before, buckets) << what << ", micro-batch " << mb;
      }
      b.expect_gradients_match(what);
      EXPECT_EQ(bits(b.path.summary().sum_of_squares), bits(b.reference_sum())) << what;
    }
  }
}

// fn() throws a usage_error whose message holds every one of `mentions`.
template <class Fn, class... Text>
void expect_usage_error(Fn&& fn, const Text&... mentions) {
  try {
    fn();
    FAIL() << "no usage_error; expected one mentioning " << (std::string(mentions) + ...);
  } catch (const usage_error& e) {
    for (const std::string& m : {std::string(mentions)...}) {
      EXPECT_NE(std::string(e.what()).find(m), std::string::npos) << m << " in: " << e.what();
    }
  }
}

// One bucket that holds one module: a second acquire waits until the first module is reduced and
// accumulated, then completes.
TEST(gradient_path, AModuleWaitsWhileTheOnlyBucketIsBusy) {
  bench b(home_kind::split, false, 1);
  ASSERT_EQ(b.s.plan().gradient_bucket_count, 1U);
  b.path.begin_micro_batch(0, 1);
  const std::vector<void*> m0 = b.path.acquire(0, b.stream.view());
  std::vector<void*> m1;
  std::atomic<bool> got{false};
  std::thread second([&] {
    m1 = b.path.acquire(1, b.stream.view());
    got = true;
  });
  while (b.path.stats().bucket_waits == 0) std::this_thread::yield();  // it is waiting now
  EXPECT_FALSE(got.load());
  b.fill(0, m0, 9, true);
  b.path.reduce(0, b.stream.view());
  second.join();
  EXPECT_TRUE(got.load());
  b.fill(1, m1, 9, true);
  b.path.reduce(1, b.stream.view());
  b.path.end_micro_batch();
  EXPECT_EQ(b.path.stats().bucket_waits, 1U);
  b.expect_gradients_match("one bucket");
}

// One bucket that holds one module, and one thread that acquires a second module before reducing
// the first: only that thread could free the bucket, so the acquire is refused naming the module
// that holds it (it waited for ever before), and nothing changed: once the first is reduced, the
// second is acquired and the micro-batch sums as usual.
TEST(gradient_path, AnAcquireOnlyItsOwnThreadCouldUnblockIsRefusedNamingTheModule) {
  bench b(home_kind::split, false, 1);
  ASSERT_EQ(b.s.plan().gradient_bucket_count, 1U);
  b.path.begin_micro_batch(0, 1);
  const std::vector<void*> m0 = b.path.acquire(0, b.stream.view());
  const std::string held = "'" + b.s.layout().module(0).name + "'";
  expect_usage_error([&] { (void)b.path.acquire(1, b.stream.view()); }, held, "acquired and not reduced",
                     "reduce_bucket_size");
  b.fill(0, m0, 9, true);
  b.path.reduce(0, b.stream.view());
  b.backward(1, 9, true);
  b.path.end_micro_batch();
  b.expect_gradients_match("refused, then reduced in order");
}

// Two threads each hold a bucket (two buckets of one module each) and each acquires another: the
// first waits (the other thread may still reduce), the second finds every holder waiting and is
// refused; once it reduces its module, the first finds only its own module in the way and is
// refused too. Nothing waits for ever, and after both reduce, the micro-batch completes.
// Deterministic: `first`, once counted in bucket_waits, counts as waiting until its acquire returns
// or throws (it no longer leaves the waiters' list on each wake), and `second` flushes nothing (no
// sealed bucket is ready), so it cannot wake `first` out of the list before it checks.
TEST(gradient_path, ThreadsWaitingOnEachOthersBucketsAreRefusedNotLeftWaiting) {
  bench b(home_kind::pinned, true, 1, nullptr, false, false, layered_model(4, 1, 150'000, {kernels::dtype::fp32}));
  ASSERT_EQ(b.s.plan().gradient_bucket_count, 2U);
  const std::string name0 = "'" + b.s.layout().module(0).name + "'";
  const std::string name1 = "'" + b.s.layout().module(1).name + "'";
  b.path.begin_micro_batch(0, 1);
  std::vector<void*> m0;
  std::vector<void*> m1;
  std::atomic<int> held{0};  // modules acquired by the two threads so far
  std::exception_ptr refused;
  std::thread first([&] {
    m0 = b.path.acquire(0, b.stream.view());
    held = 1;
    while (held.load() != 2) std::this_thread::yield();
    try {
      (void)b.path.acquire(2, b.stream.view());
    } catch (...) {
      refused = std::current_exception();
    }
  });
  while (held.load() != 1) std::this_thread::yield();
  std::thread second([&] {
    m1 = b.path.acquire(1, b.stream.view());
    held = 2;
    while (b.path.stats().bucket_waits == 0) std::this_thread::yield();  // `first` waits now
    expect_usage_error([&] { (void)b.path.acquire(3, b.stream.view()); }, name0, name1, "no other thread");
    b.fill(1, m1, 9, true);
    b.path.reduce(1, b.stream.view());
  });
  second.join();
  first.join();
  ASSERT_TRUE(refused) << "module 2's acquire returned while module 0 held the first bucket";
  expect_usage_error([&] { std::rethrow_exception(refused); }, name0);
  b.fill(0, m0, 9, true);
  b.path.reduce(0, b.stream.view());
  b.backward(2, 9, true);
  b.backward(3, 9, true);
  b.path.end_micro_batch();
  b.expect_gradients_match("two threads refused, then reduced");
}

// Two threads wait for a bucket the main thread holds: they sleep until it reduces, and do not wake
// each other (each entering the wait, or flushing with nothing to issue, woke the other, which did
// the same: the two spun, a whole core between them).
TEST(gradient_path, ThreadsWaitingForABucketSleep) {
  bench b(home_kind::pinned, true, 1, nullptr, false, false, layered_model(4, 1, 150'000, {kernels::dtype::fp32}));
  ASSERT_EQ(b.s.plan().gradient_bucket_count, 2U);
  b.path.begin_micro_batch(0, 1);
  const std::vector<void*> m0 = b.path.acquire(0, b.stream.view());
  const std::vector<void*> m1 = b.path.acquire(1, b.stream.view());
  std::vector<void*> m2;
  std::vector<void*> m3;
  std::thread third([&] { m2 = b.path.acquire(2, b.stream.view()); });
  std::thread fourth([&] { m3 = b.path.acquire(3, b.stream.view()); });
  while (b.path.stats().bucket_waits < 2) std::this_thread::yield();  // both wait now
  const std::clock_t cpu = std::clock();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const double busy = static_cast<double>(std::clock() - cpu) / CLOCKS_PER_SEC;
  EXPECT_LT(busy, 0.1) << "the process ran " << busy << " s of CPU while two threads waited 0.5 s for a bucket";
  b.fill(0, m0, 9, true);
  b.path.reduce(0, b.stream.view());
  b.fill(1, m1, 9, true);
  b.path.reduce(1, b.stream.view());
  third.join();
  b.fill(2, m2, 9, true);
  b.path.reduce(2, b.stream.view());
  fourth.join();
  b.fill(3, m3, 9, true);
  b.path.reduce(3, b.stream.view());
  b.path.end_micro_batch();
  EXPECT_EQ(b.path.stats().bucket_waits, 2U);
  b.expect_gradients_match("two waiters");
}

// A module never acquired adds nothing; in micro-batch 0 its gradient is zeroed, whatever its
// home held before (here: a whole earlier step).
TEST(gradient_path, AModuleNeverAcquiredEndsZero) {
  for (const home_kind h : {home_kind::device, home_kind::pinned, home_kind::nvme, home_kind::split}) {
    bench b(h);
    (void)b.step(1, 11);
    for (auto& r : b.reference) std::fill(r.begin(), r.end(), 0.0f);
    for (std::size_t mb = 0; mb < 2; ++mb) {
      b.path.begin_micro_batch(mb, 2);
      b.backward(0, 20 + mb, mb == 0);
      b.path.end_micro_batch();
    }
    b.expect_gradients_match(name_of(h));
    for (const parameter_id p : b.s.layout().module(1).parameters) {
      for (const float x : b.gradient(p)) ASSERT_EQ(x, 0.0f) << name_of(h);
    }
    EXPECT_EQ(bits(b.path.summary().sum_of_squares), bits(b.reference_sum())) << name_of(h);
  }
}

TEST(gradient_path, UsageErrorsNameWhatIsWrong) {
  bench b(home_kind::pinned);
  const stream_view st = b.stream.view();
  expect_usage_error([&] { (void)b.path.acquire(0, st); }, "no micro-batch is open");
  expect_usage_error([&] { (void)b.path.summary(); }, "summary");
  expect_usage_error([&] { b.path.begin_micro_batch(1, 2); }, "micro-batch 0");
  expect_usage_error([&] { b.path.begin_micro_batch(2, 2); }, "[0, count)");
  b.path.begin_micro_batch(0, 2);
  expect_usage_error([&] { b.path.begin_micro_batch(1, 2); }, "still open");
  expect_usage_error([&] { (void)b.path.acquire(7, st); }, "unknown module 7");
  expect_usage_error([&] { b.path.reduce(0, st); }, "'layer0' was not acquired");
  const std::vector<void*> m0 = b.path.acquire(0, st);
  expect_usage_error([&] { (void)b.path.acquire(0, st); }, "'layer0' was already acquired");
  expect_usage_error([&] { b.path.end_micro_batch(); }, "'layer0' was acquired but not reduced");
  b.fill(0, m0, 1, true);
  b.path.reduce(0, st);
  expect_usage_error([&] { b.path.reduce(0, st); }, "'layer0' was already reduced");
  b.path.end_micro_batch();
  expect_usage_error([&] { b.path.begin_micro_batch(0, 2); }, "micro-batch 1 of 2 comes next");
  expect_usage_error([&] { b.path.begin_micro_batch(1, 3); }, "micro-batch 1 of 2 comes next");
  b.path.begin_micro_batch(1, 2);
  b.path.end_micro_batch();
  (void)b.path.summary();
}

// A failed read or write of an nvme home is rethrown by end_micro_batch naming the parameter, the
// swap path and the offset. The parameter's gradient is then released and dirty (its home may
// hold part of the micro-batch), and the step must start again from micro-batch 0, which works.
TEST(gradient_path, AFailedNvmeReadOrWriteNamesTheParameterPathAndOffset) {
  for (const io::io_op op : {io::io_op::read, io::io_op::write}) {
    auto faults = std::make_shared<fault_plan>();
    bench b(home_kind::nvme, false, 500'000'000, faults);
    b.path.begin_micro_batch(0, 2);
    b.backward(0, 1, true);
    b.backward(1, 1, true);
    b.path.end_micro_batch();
    // The first read-modify-write's read or write fails: that of layer0.w0, the first parameter.
    faults->add({.op = op, .inject_errno = EIO});
    b.path.begin_micro_batch(1, 2);
    b.backward(0, 2, false);
    b.backward(1, 2, false);
    try {
      b.path.end_micro_batch();
      FAIL() << "the failed " << (op == io::io_op::read ? "read" : "write") << " was not reported";
    } catch (const io_error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("layer0.w0"), std::string::npos) << m;
      EXPECT_NE(m.find(b.s.store()->folders()[0].string()), std::string::npos) << m;
      EXPECT_NE(m.find("offset"), std::string::npos) << m;
      EXPECT_EQ(e.os_errno(), EIO);
    }
    EXPECT_EQ(faults->fired(), 1);
    EXPECT_EQ(b.s.tiers().status(0, state_kind::gradient), engine::state_status::released);
    EXPECT_TRUE(b.s.tiers().dirty(0, state_kind::gradient));
    expect_usage_error([&] { b.path.begin_micro_batch(1, 2); }, "micro-batch 0");
    for (auto& r : b.reference) std::fill(r.begin(), r.end(), 0.0f);
    const gradient_summary again = b.step(2, 4);
    b.expect_gradients_match("after the failure");
    EXPECT_EQ(bits(again.sum_of_squares), bits(b.reference_sum()));
  }
}

// Random schedules through the mover with faults: steps of 1 to 3 micro-batches, the modules in a
// random order in each, and now and then a read or a write of an nvme home failing at a random
// place. A failure is reported by end_micro_batch naming the parameter, the swap path and the
// offset; the step is then run again from micro-batch 0 (the caller still has its inputs), and
// every step that completes leaves exactly the reference gradients and sum: nothing is lost or
// counted twice.
class gradient_path_faults : public ::testing::TestWithParam<std::uint64_t> {};

TEST_P(gradient_path_faults, RandomSchedulesWithFailedReadsAndWritesLoseNothing) {
  std::mt19937_64 rng(GetParam());
  auto faults = std::make_shared<fault_plan>();
  bench b(home_kind::nvme, false, 500'000'000, faults);
  std::vector<module_id> order;
  for (const auto& m : b.s.layout().modules()) order.push_back(m.id);
  int failures = 0;
  for (std::uint64_t step = 1; step <= 6; ++step) {
    const std::size_t k = 1 + static_cast<std::size_t>(rng() % 3);
    for (int attempt = 0;; ++attempt) {
      ASSERT_LT(attempt, 20) << "step " << step << " kept failing";
      if (rng() % 2 == 0) {
        const io::io_op op = rng() % 2 == 0 ? io::io_op::read : io::io_op::write;
        faults->add({.op = op, .begin = rng() % (2 * MiB), .inject_errno = EIO});
      }
      bool failed = false;
      for (std::size_t mb = 0; mb < k && !failed; ++mb) {
        b.path.begin_micro_batch(mb, k);
        std::shuffle(order.begin(), order.end(), rng);
        for (const module_id m : order) b.backward(m, step * 100 + mb, mb == 0);
        try {
          b.path.end_micro_batch();
        } catch (const io_error& e) {
          const std::string what = e.what();
          EXPECT_NE(what.find("the gradient of parameter 'layer"), std::string::npos) << what;
          EXPECT_NE(what.find(b.s.store()->folders()[0].string()), std::string::npos) << what;
          EXPECT_NE(what.find("offset"), std::string::npos) << what;
          EXPECT_EQ(e.os_errno(), EIO);
          failed = true;
          ++failures;
        }
      }
      if (failed) continue;  // again from micro-batch 0
      faults->clear();       // the test's own reads of the homes below must not fail
      b.expect_gradients_match("step " + std::to_string(step));
      EXPECT_EQ(bits(b.path.summary().sum_of_squares), bits(b.reference_sum())) << "step " << step;
      break;
    }
  }
  EXPECT_EQ(failures, faults->fired());
  EXPECT_GT(failures, 0) << "the schedule never failed: it tests nothing";
}

INSTANTIATE_TEST_SUITE_P(Seeds, gradient_path_faults, ::testing::Values(1, 2, 3, 4));

// A reduce() that throws once it has begun (here: another mover holds the module's second
// parameter; a refused launch or a failed reduction would do the same) fails the micro-batch: it
// leaves no gradient in flight, gives its bucket back (a single bucket here, so a leaked one would
// block the next acquire for good), end_micro_batch reports it, and the step starts over.
TEST(gradient_path, AReduceThatThrowsFailsTheMicroBatchAndLeavesNothingInFlight) {
  bench b(home_kind::device, false, 1);
  ASSERT_EQ(b.s.plan().gradient_bucket_count, 1U);
  const stream_view st = b.stream.view();
  const std::vector<parameter_id>& params = b.s.layout().module(0).parameters;
  ASSERT_GE(params.size(), 2U);
  b.path.begin_micro_batch(0, 1);
  const std::vector<void*> m0 = b.path.acquire(0, st);
  b.fill(0, m0, 1, true);
  ASSERT_TRUE(b.s.tiers().begin_move(params[1], state_kind::gradient, engine::move_kind::write));
  expect_usage_error([&] { b.path.reduce(0, st); }, "in flight elsewhere");
  b.s.tiers().abort_move(params[1], state_kind::gradient);
  expect_usage_error([&] { b.path.end_micro_batch(); }, "in flight elsewhere");
  for (const parameter_id p : params) {
    ASSERT_NE(b.s.tiers().status(p, state_kind::gradient), engine::state_status::in_flight) << p;
  }
  expect_usage_error([&] { b.path.begin_micro_batch(1, 2); }, "micro-batch 0");
  for (auto& r : b.reference) std::fill(r.begin(), r.end(), 0.0f);
  const gradient_summary again = b.step(1, 6);
  b.expect_gradients_match("after the failed reduce");
  EXPECT_EQ(bits(again.sum_of_squares), bits(b.reference_sum()));
}

// The device reports a fault when the path waits for a module's reduction and accumulation (as a
// CUDA event sync reports a kernel that faulted): end_micro_batch throws it, and the device homes
// whose kernels that module queued are released and dirty, not in flight for good, so the step
// starts over and works.
TEST(gradient_path, AFailedWaitForTheDeviceLeavesItsHomesReleasedNotInFlight) {
  bench b(home_kind::device, false, 500'000'000, nullptr, true);
  ASSERT_NE(b.s.fake(), nullptr);
  b.path.begin_micro_batch(0, 1);
  b.s.fake()->fail_event_syncs(true);
  b.backward(0, 1, true);
  EXPECT_THROW(b.path.end_micro_batch(), zoe::error);
  b.s.fake()->fail_event_syncs(false);
  for (const parameter_id p : b.s.layout().module(0).parameters) {
    ASSERT_EQ(b.s.tiers().status(p, state_kind::gradient), engine::state_status::released) << p;
    EXPECT_TRUE(b.s.tiers().dirty(p, state_kind::gradient)) << p;
  }
  for (auto& r : b.reference) std::fill(r.begin(), r.end(), 0.0f);
  const gradient_summary again = b.step(1, 8);
  b.expect_gradients_match("after the failed wait");
  EXPECT_EQ(bits(again.sum_of_squares), bits(b.reference_sum()));
}

// On a GPU the path keeps each device home's sum of squares and inf/NaN flag in device scratch
// until the step's last micro-batch ends: the plan must list that memory with the buckets, or the
// device budget it checks does not cover what the path takes. (The fake device reports a GPU, so
// the path takes its CUDA branch; nothing is launched.)
TEST(gradient_path, TheDeviceMemoryItTakesOnAGpuIsInThePlan) {
  bench b(home_kind::device, false, 500'000'000, nullptr, true);
  fake_device& fake = *b.s.fake();
  std::uint64_t planned = 0;
  for (const engine::plan_item& item : b.s.plan().items) {
    // The gradient path's own items (not the homes: "gradient in device memory").
    if (item.memory == engine::memory_kind::device && item.what.starts_with("gradient") &&
        item.what.find(" in ") == std::string::npos) {
      planned += item.bytes;
    }
  }
  fake.report_kind(device_kind::cuda);
  const std::uint64_t before = fake.usage().current_bytes;
  {
    const gradient_path gpu(b.s.tiers(), b.s.comm(), fake, b.s.pinned(), &b.s.movers(), options_of(b.s.plan()));
    EXPECT_LE(fake.usage().current_bytes - before, planned);
  }
  fake.report_kind(device_kind::host);
}

// qgZ: the reduction is the quantized reduce-scatter (int4 blocks of qgz_default_block elements,
// each element within half its block's step, max |x| / 7 / 2, plus the rounding to its type), in
// every home; off, the same bench is bit-exact (the tests above).
TEST(GradientPath, QuantizedGradientsAreWithinTheQuantizersBound) {
  for (const home_kind h : {home_kind::device, home_kind::split}) {
    bench b(h, false, 500'000'000, nullptr, false, true);
    ASSERT_GT(b.s.plan().qgz_scratch_bytes, 0U);
    b.step(1);
    for (const auto& p : b.s.layout().parameters()) {
      const std::vector<float> got = b.gradient(p.id);
      const std::vector<float>& x = b.reference[p.id];
      ASSERT_EQ(got.size(), x.size());
      bool changed = false;
      for (std::size_t first = 0; first < x.size(); first += engine::qgz_default_block) {
        const std::size_t end = std::min<std::size_t>(first + engine::qgz_default_block, x.size());
        float max_abs = 0;
        for (std::size_t i = first; i < end; ++i) max_abs = std::max(max_abs, std::fabs(x[i]));
        for (std::size_t i = first; i < end; ++i) {
          const float rounding = p.dtype == kernels::dtype::bf16   ? std::fabs(x[i]) / 128
                                 : p.dtype == kernels::dtype::fp16 ? std::fabs(x[i]) / 1024
                                                                   : 0.0F;
          ASSERT_LE(std::fabs(got[i] - x[i]), max_abs / 7 / 2 * 1.001F + rounding + 1e-6F)
              << name_of(h) << " " << p.name << " element " << i;
          changed = changed || got[i] != x[i];
        }
      }
      EXPECT_TRUE(changed) << p.name << ": the reduction was not quantized";
    }
  }
}

}  // namespace
}  // namespace zoe::testing
