// The coordinator's collectives across ranks, at world size 1: what it gathers, in which buckets and
// in which order must not depend on timing (reads arriving before or after the next call, a tiny
// arena making prefetches back off and fetches evict), or ranks would deadlock; buckets of
// allgather_bucket_size elements travel as one coalesced all-gather and gather the same bytes as
// per-parameter gathers; a backward fetch without hpZ gathers as a forward one; qwZ gathers each
// working type within the quantizer's bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <set>
#include <span>
#include <map>
#include <mutex>
#include <ostream>
#include <random>
#include <vector>

#include "engine_stack.hpp"
#include "quantized_checks.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::testing {
namespace {

using engine::module_id;
using engine::parameter_id;

// One part of a recorded all-gather: its bytes and which parameter it is. The parameters' sizes
// pad to the same granule, so bytes alone would let a swapped order pass; every parameter's home
// holds its own seeded bytes, so a fingerprint of what is sent names the parameter.
struct gathered_part {
  std::size_t bytes = 0;
  std::uint64_t fingerprint = 0;
  bool operator==(const gathered_part&) const = default;
};
// How a failing comparison shows a part: its bytes and its parameter's fingerprint.
[[maybe_unused]] void PrintTo(const gathered_part& p,
                              std::ostream* os) {  // NOLINT(readability-identifier-naming): gtest's name
  *os << p.bytes << " B #" << std::hex << (p.fingerprint & 0xffffU) << std::dec;
}

// The world-size-1 communicator, recording the parts of every all-gather in the order they were
// issued (the sequence every rank must issue alike).
class recording_communicator final : public engine::communicator {
 public:
  explicit recording_communicator(device& dev) : dev_(dev), inner_(engine::make_single_communicator(dev)) {}

  [[nodiscard]] std::size_t rank() const noexcept override { return 0; }
  [[nodiscard]] std::size_t size() const noexcept override { return 1; }
  [[nodiscard]] std::string name() const override { return "recording " + inner_->name(); }
  void all_gather(const void* send, void* recv, std::size_t bytes, stream_view stream) override {
    const engine::gather_part part{.send = send, .recv = recv, .bytes = bytes};
    record({&part, 1}, stream);
    inner_->all_gather(send, recv, bytes, stream);
  }
  void all_gather_coalesced(std::span<const engine::gather_part> parts, stream_view stream) override {
    record(parts, stream);
    inner_->all_gather_coalesced(parts, stream);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t count, kernels::dtype type, engine::reduce_op op,
                      stream_view stream) override {
    inner_->reduce_scatter(send, recv, count, type, op, stream);
  }
  void reduce_scatter_coalesced(std::span<const engine::reduce_part> parts, engine::reduce_op op,
                                stream_view stream) override {
    inner_->reduce_scatter_coalesced(parts, op, stream);
  }
  void all_to_all(const void* send, void* recv, std::size_t bytes, stream_view stream) override {
    inner_->all_to_all(send, recv, bytes, stream);
  }
  void all_reduce(const void* send, void* recv, std::size_t count, kernels::dtype type, engine::reduce_op op,
                  stream_view stream) override {
    inner_->all_reduce(send, recv, count, type, op, stream);
  }
  void broadcast(void* buffer, std::size_t bytes, std::size_t root, stream_view stream) override {
    inner_->broadcast(buffer, bytes, root, stream);
  }
  void point_to_point(void* buffer, std::size_t bytes, std::size_t from, std::size_t to, stream_view stream) override {
    inner_->point_to_point(buffer, bytes, from, to, stream);
  }
  void barrier() override {}
  [[nodiscard]] communicator& node_local() override { return *this; }
  [[nodiscard]] communicator& cross_node() override { return *this; }
  [[nodiscard]] communicator& hpz() override { return *this; }
  [[nodiscard]] engine::comm_stats stats() const override { return inner_->stats(); }
  void abort(std::string_view reason) noexcept override { inner_->abort(reason); }

  ~recording_communicator() override { wait_for_fingerprints(); }
  recording_communicator(const recording_communicator&) = delete;
  recording_communicator& operator=(const recording_communicator&) = delete;

  // Every gather issued so far, once the streams have taken all their fingerprints.
  [[nodiscard]] std::vector<std::vector<gathered_part>> gathers() {
    wait_for_fingerprints();
    const std::lock_guard lock(mutex_);
    return gathers_;
  }

 private:
  // The sizes now, in issue order; the fingerprints when the stream reaches the gather, as the
  // shard is only there once its read completes (an FNV-1a hash of the first bytes sent).
  void record(std::span<const engine::gather_part> parts, stream_view stream) {
    std::size_t at = 0;
    {
      const std::lock_guard lock(mutex_);
      at = gathers_.size();
      ++pending_;
      std::vector<gathered_part> sizes;
      for (const engine::gather_part& p : parts) sizes.push_back({.bytes = p.bytes});
      gathers_.push_back(std::move(sizes));
    }
    std::vector<engine::gather_part> copy(parts.begin(), parts.end());
    dev_.launch_host(stream, [this, at, copy = std::move(copy)] {
      std::vector<std::uint64_t> prints;
      for (const engine::gather_part& p : copy) {
        std::uint64_t h = 14695981039346656037ULL;
        const auto* bytes = static_cast<const unsigned char*>(p.send);
        for (std::size_t i = 0; i < std::min<std::size_t>(p.bytes, 64); ++i) h = (h ^ bytes[i]) * 1099511628211ULL;
        prints.push_back(h);
      }
      const std::lock_guard lock(mutex_);
      for (std::size_t i = 0; i < prints.size(); ++i) gathers_[at][i].fingerprint = prints[i];
      if (--pending_ == 0) taken_.notify_all();
    });
  }

  void wait_for_fingerprints() {
    std::unique_lock lock(mutex_);
    taken_.wait(lock, [this] { return pending_ == 0; });
  }

  device& dev_;
  std::unique_ptr<engine::communicator> inner_;
  std::mutex mutex_;
  std::condition_variable taken_;
  std::size_t pending_ = 0;  // fingerprints not yet taken
  std::vector<std::vector<gathered_part>> gathers_;
};

// Eight layers of three parameters whose sizes differ, so the recorded sizes tell them apart.
std::vector<engine::module_spec> order_model() {
  return layered_model(8, 3, 5'000, {kernels::dtype::fp16, kernels::dtype::bf16, kernels::dtype::fp32});
}

engine::engine_config order_config() {
  engine::engine_config c = nvme_config();
  c.zero.param_persistence_threshold = 0;
  return c;
}

// How a test's calls wait: at world size > 1 a rank's reads arrive whenever they do; here the
// calls are the same and only the waits differ, which moves where each read stands when the next
// fetch, release, eviction or end_step looks.
enum class waits : std::uint8_t { every_fetch, never, every_other };

// The fingerprint recording_communicator takes of a shard: FNV-1a of its first 64 bytes.
std::uint64_t fingerprint_of(std::span<const std::byte> shard) {
  std::uint64_t h = 14695981039346656037ULL;
  for (std::size_t i = 0; i < std::min<std::size_t>(shard.size(), 64); ++i) {
    h = (h ^ static_cast<unsigned char>(shard[i])) * 1099511628211ULL;
  }
  return h;
}

struct run_result {
  std::vector<std::vector<gathered_part>> gathers;
  engine::coordinator_stats stats;
  std::map<std::uint64_t, module_id> module_of;  // fingerprint -> the module of its parameter
};

// Three steps (the first records the trace), then a step that ends after half its fetches (its
// prefetches are freed unused, some still reading), then a full step again.
run_result run_schedule(waits how, std::uint64_t arena_bytes, std::uint64_t bucket_numel) {
  engine_stack s({.modules = order_model(), .config = order_config()});
  std::map<std::uint64_t, module_id> module_of;
  for (const auto& p : s.layout().parameters()) {
    const std::vector<std::byte> shard = s.shard_data(p.id, 100 + p.id);
    module_of[fingerprint_of(shard)] = p.module;
    s.write_home(p.id, shard);
  }
  recording_communicator comm(s.dev());
  engine::coordinator_options o;
  o.arena_bytes = arena_bytes;
  o.limits = engine::prefetch_limits::from(order_config().zero);
  o.limits.prefetch_bucket_size = 40'000;
  o.allgather_bucket_numel = bucket_numel;
  o.rank_independent_order = true;
  engine::coordinator c(s.tiers(), s.swapper(), comm, s.dev(), o);
  std::vector<module_id> order;
  for (module_id m = 0; m < 8; ++m) order.push_back(m);
  for (module_id m = 8; m-- > 0;) order.push_back(m);
  const auto step = [&](std::size_t fetches) {
    c.begin_step();
    for (std::size_t i = 0; i < fetches; ++i) {
      const module_id m = order[i];
      const engine::fetch_handle h = c.fetch(m, i < 8 ? engine::fetch_pass::forward : engine::fetch_pass::backward);
      if (how == waits::every_fetch || (how == waits::every_other && i % 2 == 0)) h.wait();
      c.release(m);
    }
    c.end_step();
  };
  for (int i = 0; i < 3; ++i) step(order.size());
  step(order.size() / 2);
  step(order.size());
  c.drop_gathered();
  return {comm.gathers(), c.stats(), std::move(module_of)};
}

std::uint64_t arena_for(std::uint64_t modules) {
  // A layer's three parameters, fp32 at most, aligned.
  return (modules * 3 * (5'100 * 4 + 256) + 255) / 256 * 256;
}

TEST(CoordinatorOrder, TheGathersAreTheSameWhateverTheTiming) {
  for (const std::uint64_t arena : {arena_for(2), arena_for(4), arena_for(32)}) {
    const run_result a = run_schedule(waits::every_fetch, arena, 14'000);
    const run_result b = run_schedule(waits::never, arena, 14'000);
    const run_result c = run_schedule(waits::every_other, arena, 14'000);
    // The fingerprints tell the 24 parameters apart (or a swapped order would still compare equal).
    std::set<std::uint64_t> parameters;
    for (const auto& g : a.gathers) {
      for (const gathered_part& part : g) parameters.insert(part.fingerprint);
    }
    EXPECT_EQ(parameters.size(), 24U) << "arena " << arena;
    EXPECT_EQ(a.gathers, b.gathers) << "arena " << arena;
    EXPECT_EQ(a.gathers, c.gathers) << "arena " << arena;
    EXPECT_EQ(a.stats.collectives, a.gathers.size());
    EXPECT_EQ(a.stats.prefetch_backoffs, b.stats.prefetch_backoffs);
    EXPECT_EQ(a.stats.evictions, b.stats.evictions);
    EXPECT_EQ(a.stats.prefetches, c.stats.prefetches);
    EXPECT_GT(a.stats.prefetches, 0U) << "arena " << arena;
    if (arena == arena_for(2)) {
      EXPECT_GT(a.stats.prefetch_backoffs + a.stats.evictions, 0U);
    }
  }
}

TEST(CoordinatorOrder, BucketsHoldAtMostTheBucketSizeAndOneCollectiveEach) {
  const std::uint64_t bucket = 14'000;
  const run_result r = run_schedule(waits::never, arena_for(32), bucket);
  std::size_t parts = 0;
  bool coalesced = false;
  for (const auto& g : r.gathers) {
    parts += g.size();
    coalesced = coalesced || g.size() > 1;
    if (g.size() > 1) {
      std::size_t numel = 0;
      // Parts are full parameters at world size 1: their elements are at least bytes / 4.
      for (const gathered_part& part : g) numel += part.bytes / 4;
      EXPECT_LE(numel, bucket);
    }
  }
  EXPECT_TRUE(coalesced);
  EXPECT_EQ(parts, r.stats.gathers + r.stats.prefetches);
  EXPECT_EQ(r.stats.collectives, r.gathers.size());
  // A bucket of 0 elements: every parameter alone, as many collectives as parameters gathered.
  const run_result one = run_schedule(waits::never, arena_for(32), 0);
  for (const auto& g : one.gathers) EXPECT_EQ(g.size(), 1U);
  EXPECT_EQ(one.gathers.size(), one.stats.gathers + one.stats.prefetches);
}

// A bucket is issued once all its reads arrived: one that held the next modules' prefetches too
// would keep the module fetched first waiting for reads it does not need. However large the
// bucket size, a collective gathers one module's parameters.
TEST(CoordinatorOrder, ABucketGathersOneModulesParametersOnly) {
  const run_result r = run_schedule(waits::never, arena_for(32), 1'000'000);
  ASSERT_EQ(r.module_of.size(), 24U);  // the fingerprints tell the parameters apart
  bool coalesced = false;
  for (const auto& g : r.gathers) {
    coalesced = coalesced || g.size() > 1;
    std::set<module_id> modules;
    for (const gathered_part& part : g) {
      ASSERT_TRUE(r.module_of.contains(part.fingerprint));
      modules.insert(r.module_of.at(part.fingerprint));
    }
    EXPECT_EQ(modules.size(), 1U) << "a collective of " << g.size() << " parameters";
  }
  EXPECT_TRUE(coalesced);  // a module's three parameters still travel together
  EXPECT_GT(r.stats.prefetches, 0U);
}

// Coalesced gathers leave every parameter byte-exact, as per-parameter ones do, forward and backward.
TEST(CoordinatorOrder, CoalescedAndSingleGathersGiveTheSameParameters) {
  for (const std::uint64_t bucket : {std::uint64_t{0}, std::uint64_t{14'000}, std::uint64_t{1'000'000}}) {
    engine::engine_config config = order_config();
    config.zero.allgather_bucket_size = bucket;
    engine_stack s({.modules = order_model(), .config = config});
    std::vector<std::vector<std::byte>> data;
    for (const auto& p : s.layout().parameters()) {
      data.push_back(s.shard_data(p.id, 7 + p.id));
      s.write_home(p.id, data.back());
    }
    for (int step = 0; step < 2; ++step) {
      s.coord().begin_step();
      for (const engine::fetch_pass pass : {engine::fetch_pass::forward, engine::fetch_pass::backward}) {
        for (module_id m = 0; m < 8; ++m) {
          const module_id at = pass == engine::fetch_pass::forward ? m : static_cast<module_id>(7 - m);
          const engine::fetch_handle h = s.coord().fetch(at, pass);
          h.wait();
          for (const parameter_id p : s.layout().module(at).parameters) {
            EXPECT_TRUE(same_bytes(s.from_device(s.coord().address(p), s.shard_bytes(p)), data[p]))
                << s.layout().parameter(p).name << " bucket " << bucket;
          }
          s.coord().release(at);
        }
      }
      s.coord().end_step();
    }
    EXPECT_EQ(s.coord().stats().hpz_gathers, 0U);  // no hpZ group at world size 1
    if (bucket == 0) {
      EXPECT_EQ(s.coord().stats().collectives, s.coord().stats().gathers + s.coord().stats().prefetches);
    }
    if (bucket == 1'000'000) {
      EXPECT_LT(s.coord().stats().collectives, s.coord().stats().gathers + s.coord().stats().prefetches);
    }
  }
}

// Values of a parameter as fp32, and its shard in its working type.
std::vector<float> values_for(const engine::parameter_layout& p, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::vector<float> v(p.shard_numel, 0.0F);
  for (std::size_t i = 0; i < p.numel; ++i) v[i] = normal(rng) * (i % 97 == 0 ? 8.0F : 1.0F);
  return v;
}

std::vector<std::byte> in_type(const std::vector<float>& v, kernels::dtype type) {
  std::vector<std::byte> out(v.size() * kernels::dtype_size(type));
  kernels::cast({kernels::dtype::fp32, v.data(), v.size()}, {type, out.data(), v.size()});
  return out;
}

std::vector<float> as_fp32(const std::vector<std::byte>& raw, kernels::dtype type, std::size_t n) {
  std::vector<float> out(n);
  kernels::cast({type, raw.data(), n}, {kernels::dtype::fp32, out.data(), n});
  return out;
}

TEST(CoordinatorOrder, QuantizedGathersOfEveryWorkingTypeAreWithinTheQuantizersBound) {
  engine::engine_config config = order_config();
  config.zero.zero_quantized_weights = true;
  config.zero.allgather_bucket_size = 14'000;
  engine_stack s({.modules = order_model(), .config = config});
  ASSERT_GT(s.plan().qwz_scratch_bytes, 0U);
  std::vector<std::vector<float>> values;
  for (const auto& p : s.layout().parameters()) {
    values.push_back(values_for(p, 50 + p.id));
    // The home holds the value in its working type; the bound is against that value.
    const std::vector<std::byte> shard = in_type(values.back(), p.dtype);
    values.back() = as_fp32(shard, p.dtype, p.shard_numel);
    s.write_home(p.id, shard);
  }
  s.coord().begin_step();
  std::vector<kernels::dtype> seen;
  for (module_id m = 0; m < 8; ++m) {
    const engine::fetch_handle h = s.coord().fetch(m);
    h.wait();
    for (const parameter_id p : s.layout().module(m).parameters) {
      const engine::parameter_layout& pl = s.layout().parameter(p);
      seen.push_back(pl.dtype);
      const std::vector<float> got =
          as_fp32(s.from_device(s.coord().address(p), s.shard_bytes(p)), pl.dtype, pl.shard_numel);
      // Against the value as its working type holds it (the home's), within qwZ's bound.
      const std::vector<float> x = as_fp32(in_type(values[p], pl.dtype), pl.dtype, pl.shard_numel);
      const std::vector<double> bound = engine::testing::qwz_bounds(x, pl.dtype);
      bool changed = false;
      for (std::size_t i = 0; i < x.size(); ++i) {
        ASSERT_LE(std::fabs(static_cast<double>(got[i]) - x[i]), bound[i]) << pl.name << " element " << i;
        changed = changed || got[i] != x[i];
      }
      EXPECT_TRUE(changed) << pl.name << ": the gather was not quantized";
    }
    s.coord().release(m);
  }
  s.coord().end_step();
  EXPECT_NE(std::find(seen.begin(), seen.end(), kernels::dtype::fp32), seen.end());
  EXPECT_NE(std::find(seen.begin(), seen.end(), kernels::dtype::fp16), seen.end());
  EXPECT_NE(std::find(seen.begin(), seen.end(), kernels::dtype::bf16), seen.end());
}

}  // namespace
}  // namespace zoe::testing
