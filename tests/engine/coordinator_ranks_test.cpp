// The coordinator's gathers and the gradient path's reductions on real ranks (label mpi; each case
// under mpirun): hpZ's backward gathers stay inside the node and give the forward's parameters;
// coalesced gathers give the same parameters as per-parameter ones with one collective per bucket;
// qwZ gathers of fp32, fp16 and bf16 are within the quantizer's bound on every rank; qgZ's
// reduce-scatter gives each owner the mean gradient within its bound.
//
// Every rank knows every full parameter (seeded by its id) and writes its own shard of it home, so
// each rank checks the gathered parameter against the whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <memory>
#include <random>
#include <vector>

#include "quantized_checks.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/engine/comm/quantized_collectives.hpp"
#include "zoe/engine/engine_resources.hpp"
#include "zoe/engine/optim/gradient_path.hpp"
#include "zoe/engine/swap/state_io.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::engine {
namespace {

// Stage 3 with every state on the host (no swap folder needed), the world mpirun gives.
engine_config ranked_config() {
  engine_config c;
  c.zero.stage = 3;
  c.zero.param_persistence_threshold = 0;  // every parameter is freed at its release
  c.zoe.comm.backend = "auto";
  c.zoe.comm.timeout_s = 60;
  for (auto& p : c.zoe.placement) p = tier_fractions{.device = 0.0, .host = 1.0, .nvme = 0.0};
  return c;
}

// Four layers of three parameters, of every working type, sizes that divide nothing.
std::vector<module_spec> ranked_model() {
  std::vector<module_spec> out;
  const kernels::dtype types[] = {kernels::dtype::fp32, kernels::dtype::fp16, kernels::dtype::bf16};
  std::size_t k = 0;
  for (std::size_t m = 0; m < 4; ++m) {
    module_spec spec{"layer" + std::to_string(m), {}};
    for (std::size_t i = 0; i < 3; ++i, ++k) {
      spec.parameters.push_back({"w" + std::to_string(i), {std::uint64_t{1000 + 977 * k}}, types[k % 3]});
    }
    out.push_back(std::move(spec));
  }
  return out;
}

// The full (padded) value of `p` as fp32: zero past its real elements.
std::vector<float> full_values(const parameter_layout& p, std::size_t world) {
  std::mt19937_64 rng(77 + p.id);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::vector<float> v(p.padded_numel(world), 0.0F);
  for (std::size_t i = 0; i < p.numel; ++i) v[i] = normal(rng) * (i % 101 == 0 ? 6.0F : 1.0F);
  // As the working type holds it.
  std::vector<std::byte> typed(v.size() * kernels::dtype_size(p.dtype));
  kernels::cast({kernels::dtype::fp32, v.data(), v.size()}, {p.dtype, typed.data(), v.size()});
  kernels::cast({p.dtype, typed.data(), v.size()}, {kernels::dtype::fp32, v.data(), v.size()});
  return v;
}

std::vector<std::byte> in_type(std::span<const float> v, kernels::dtype type) {
  std::vector<std::byte> out(v.size() * kernels::dtype_size(type));
  kernels::cast({kernels::dtype::fp32, v.data(), v.size()}, {type, out.data(), v.size()});
  return out;
}

struct ranked_path {
  std::unique_ptr<device> dev = make_host_device(std::uint64_t{256} << 20);
  std::unique_ptr<engine_resources> path;
  std::vector<std::vector<float>> full;  // per parameter

  explicit ranked_path(const engine_config& config)
      : path(std::make_unique<engine_resources>(ranked_model(), config, *dev)) {
    const std::size_t world = path->comm().size();
    const std::size_t rank = path->comm().rank();
    for (const parameter_layout& p : path->layout().parameters()) {
      full.push_back(full_values(p, world));
      const std::vector<std::byte> shard =
          in_type(std::span(full.back()).subspan(rank * p.shard_numel, p.shard_numel), p.dtype);
      state_io(path->tiers(), *dev, &path->movers()).write(p.id, working_state(p), shard);
    }
  }

  void copy(void* dst, const void* src, std::size_t bytes, copy_kind kind) {
    const device_stream s = dev->create_stream();
    dev->copy_async(dst, src, bytes, kind, s.view());
    dev->synchronize(s.view());
  }

  // The gathered parameter `p` (fetched and waited) as fp32.
  std::vector<float> gathered(parameter_id p) {
    const parameter_layout& pl = path->layout().parameter(p);
    const std::size_t n = pl.padded_numel(path->comm().size());
    std::vector<std::byte> raw(n * kernels::dtype_size(pl.dtype));
    copy(raw.data(), path->coord().address(p), raw.size(), copy_kind::device_to_host);
    std::vector<float> out(n);
    kernels::cast({pl.dtype, raw.data(), n}, {kernels::dtype::fp32, out.data(), n});
    return out;
  }

  // Fetches every module in `order` with `pass`, checks each parameter with `check`, releases.
  template <typename Check>
  void pass(const std::vector<module_id>& order, fetch_pass which, Check check) {
    for (const module_id m : order) {
      const fetch_handle h = path->coord().fetch(m, which);
      h.wait();
      for (const parameter_id p : path->layout().module(m).parameters) check(p, gathered(p));
      path->coord().release(m);
    }
  }
};

const std::vector<module_id> forward_order{0, 1, 2, 3};
const std::vector<module_id> backward_order{3, 2, 1, 0};

TEST(CoordinatorRanks, HpzBackwardGathersStayInsideTheNode) {
  engine_config config = ranked_config();
  config.zoe.ranks_per_node = 2;
  config.zero.zero_hpz_partition_size = 2;
  // No prefetch and no reuse: every backward fetch gathers its parameters again.
  config.zero.prefetch_bucket_size = 0;
  config.zero.max_reuse_distance = 0;
  if (const char* w = std::getenv("OMPI_COMM_WORLD_SIZE"); w == nullptr || std::string(w) != "4") {
    GTEST_SKIP() << "needs 4 ranks (2 nodes of 2)";
  }
  ranked_path r(config);
  ASSERT_EQ(r.path->comm().size(), 4U);
  ASSERT_EQ(r.path->comm().hpz().size(), 2U);
  EXPECT_GT(r.path->plan().hpz_secondary_bytes, 0U);
  const auto exact = [&](parameter_id p, const std::vector<float>& got) {
    EXPECT_EQ(got, r.full[p]) << r.path->layout().parameter(p).name;
  };
  for (int step = 0; step < 2; ++step) {
    r.path->coord().begin_step();
    r.pass(forward_order, fetch_pass::forward, exact);
    const comm_stats before = total_stats(r.path->comm());
    const coordinator_stats st_before = r.path->coord().stats();
    r.pass(backward_order, fetch_pass::backward, exact);
    const comm_stats after = total_stats(r.path->comm());
    EXPECT_EQ(after.total().inter_node, before.total().inter_node) << "step " << step;
    EXPECT_GT(after.total().intra_node, before.total().intra_node) << "step " << step;
    // Every backward gather came from the secondary shards (the last forward module stays gathered
    // for its backward use right after: the trace walk keeps it).
    const coordinator_stats st = r.path->coord().stats();
    EXPECT_GT(st.hpz_gathers - st_before.hpz_gathers, 0U);
    EXPECT_EQ(st.hpz_gathers - st_before.hpz_gathers,
              st.gathers + st.prefetches - st_before.gathers - st_before.prefetches);
    r.path->coord().end_step();
  }
  // New homes drop the secondary shards: the next backward fetch without a forward gathers over
  // the world (crossing nodes) and still gives the parameters.
  r.path->coord().drop_gathered();
  r.path->coord().begin_step();
  const comm_stats before = total_stats(r.path->comm());
  r.pass(backward_order, fetch_pass::backward, exact);
  EXPECT_GT(total_stats(r.path->comm()).total().inter_node, before.total().inter_node);
  r.path->coord().end_step();
}

TEST(CoordinatorRanks, CoalescedGathersGiveTheSameParametersWithOneCollectivePerBucket) {
  std::vector<std::vector<std::vector<float>>> seen;
  std::vector<std::uint64_t> collectives;
  for (const std::uint64_t bucket : {std::uint64_t{0}, std::uint64_t{20'000}}) {
    engine_config config = ranked_config();
    config.zero.allgather_bucket_size = bucket;
    ranked_path r(config);
    std::vector<std::vector<float>> got(r.full.size());
    const std::uint64_t calls_before = r.path->comm().stats().calls;
    for (int step = 0; step < 2; ++step) {
      r.path->coord().begin_step();
      r.pass(forward_order, fetch_pass::forward, [&](parameter_id p, const std::vector<float>& g) {
        EXPECT_EQ(g, r.full[p]) << r.path->layout().parameter(p).name << " bucket " << bucket;
        got[p] = g;
      });
      r.pass(backward_order, fetch_pass::backward, [&](parameter_id p, const std::vector<float>& g) {
        EXPECT_EQ(g, r.full[p]) << r.path->layout().parameter(p).name << " bucket " << bucket;
      });
      r.path->coord().end_step();
    }
    const coordinator_stats st = r.path->coord().stats();
    // The coordinator's world carries its gathers only: one collective per bucket.
    EXPECT_EQ(r.path->comm().stats().calls - calls_before, st.collectives);
    if (bucket == 0) {
      EXPECT_EQ(st.collectives, st.gathers + st.prefetches);
    } else {
      EXPECT_LT(st.collectives, st.gathers + st.prefetches);
    }
    seen.push_back(std::move(got));
    collectives.push_back(st.collectives);
  }
  EXPECT_EQ(seen[0], seen[1]);
  EXPECT_GT(collectives[0], collectives[1]);
}

TEST(CoordinatorRanks, QuantizedGathersOfEveryWorkingTypeAreWithinTheQuantizersBound) {
  engine_config config = ranked_config();
  config.zero.zero_quantized_weights = true;
  config.zero.allgather_bucket_size = 20'000;
  ranked_path r(config);
  const std::size_t world = r.path->comm().size();
  std::vector<kernels::dtype> seen;
  const auto bounded = [&](parameter_id p, const std::vector<float>& got) {
    const parameter_layout& pl = r.path->layout().parameter(p);
    seen.push_back(pl.dtype);
    // Each rank's shard is quantized on its own, in blocks of qwz_default_block.
    for (std::size_t owner = 0; owner < world; ++owner) {
      const std::size_t first = owner * pl.shard_numel;
      const std::span<const float> x = std::span<const float>(r.full[p]).subspan(first, pl.shard_numel);
      const std::vector<double> bound = testing::qwz_bounds(x, pl.dtype);
      for (std::size_t i = 0; i < x.size(); ++i) {
        ASSERT_LE(std::fabs(static_cast<double>(got[first + i]) - x[i]), bound[i])
            << pl.name << " element " << first + i;
      }
    }
  };
  r.path->coord().begin_step();
  r.pass(forward_order, fetch_pass::forward, bounded);
  r.pass(backward_order, fetch_pass::backward, bounded);
  r.path->coord().end_step();
  EXPECT_NE(std::find(seen.begin(), seen.end(), kernels::dtype::fp32), seen.end());
  EXPECT_NE(std::find(seen.begin(), seen.end(), kernels::dtype::fp16), seen.end());
  EXPECT_NE(std::find(seen.begin(), seen.end(), kernels::dtype::bf16), seen.end());
  // One message per bucket: the world's all-gathers are the coordinator's collectives (a lone rank
  // only quantizes, without a collective).
  if (world > 1) {
    EXPECT_EQ(r.path->comm().stats().calls, r.path->coord().stats().collectives);
  }
}

// The gradient each rank hands in for `p`: seeded by the rank, so every rank knows every rank's.
std::vector<float> rank_gradient(const parameter_layout& p, std::size_t world, std::size_t rank) {
  std::mt19937_64 rng(5000 + 97 * rank + p.id);
  std::normal_distribution<float> normal(0.0F, 1.0F);
  std::vector<float> v(p.padded_numel(world), 0.0F);
  for (std::size_t i = 0; i < p.numel; ++i) v[i] = normal(rng) * (i % 89 == 0 ? 5.0F : 1.0F);
  std::vector<std::byte> typed(v.size() * kernels::dtype_size(p.dtype));
  kernels::cast({kernels::dtype::fp32, v.data(), v.size()}, {p.dtype, typed.data(), v.size()});
  kernels::cast({p.dtype, typed.data(), v.size()}, {kernels::dtype::fp32, v.data(), v.size()});
  return v;
}

TEST(GradientRanks, QuantizedReductionGivesTheMeanWithinTheQuantizersBound) {
  engine_config config = ranked_config();
  config.zero.zero_quantized_gradients = true;
  const char* w = std::getenv("OMPI_COMM_WORLD_SIZE");
  const std::size_t launched = w == nullptr ? 1 : static_cast<std::size_t>(std::stoul(w));
  if (launched % 2 == 0) config.zoe.ranks_per_node = 2;  // 2 x 2 on 4 ranks, 1 x 2 on 2
  ranked_path r(config);
  engine_resources& path = *r.path;
  communicator& comm = path.gradient_comm();
  const std::size_t world = comm.size();
  const std::size_t rank = comm.rank();
  const std::size_t per_node = comm.node_local().size();
  ASSERT_GT(path.plan().qgz_scratch_bytes, 0U);
  gradient_path gradients(path.tiers(), comm, *r.dev, path.pinned(), &path.movers(),
                          {.bucket_bytes = path.plan().gradient_bucket_bytes,
                           .bucket_count = static_cast<std::size_t>(path.plan().gradient_bucket_count),
                           .staging_buffer_count = static_cast<std::size_t>(path.plan().gradient_buffer_count),
                           .staging_buffer_bytes = static_cast<std::size_t>(path.plan().gradient_buffer_bytes),
                           .quantized_scratch_bytes = static_cast<std::size_t>(path.plan().qgz_scratch_bytes)});
  const device_stream stream = r.dev->create_stream();
  gradients.begin_micro_batch(0, 1);
  for (const module_layout& m : path.layout().modules()) {
    const std::vector<void*> memory = gradients.acquire(m.id, stream.view());
    for (std::size_t i = 0; i < m.parameters.size(); ++i) {
      const parameter_layout& p = path.layout().parameter(m.parameters[i]);
      const std::vector<std::byte> typed = in_type(rank_gradient(p, world, rank), p.dtype);
      r.dev->copy_async(memory[i], typed.data(), typed.size(), copy_kind::host_to_device, stream.view());
      r.dev->synchronize(stream.view());
    }
    gradients.reduce(m.id, stream.view());
  }
  gradients.end_micro_batch();
  for (const parameter_layout& p : path.layout().parameters()) {
    std::vector<std::vector<float>> all;
    for (std::size_t q = 0; q < world; ++q) all.push_back(rank_gradient(p, world, q));
    const state_location& home = path.tiers().location(p.id, state_kind::gradient);
    ASSERT_EQ(home.where, tier::host);
    std::vector<float> got(p.shard_numel);
    std::memcpy(got.data(), home.host.data(), got.size() * sizeof(float));
    // The ranks' gradients as the working type holds them (what each rank handed in).
    for (std::vector<float>& g : all) {
      const std::vector<std::byte> typed = in_type(g, p.dtype);
      kernels::cast({p.dtype, typed.data(), g.size()}, {kernels::dtype::fp32, g.data(), g.size()});
    }
    const std::size_t first = rank * p.shard_numel;
    std::vector<std::span<const float>> blocks;
    for (const std::vector<float>& g : all) blocks.push_back(std::span<const float>(g).subspan(first, p.shard_numel));
    const testing::qgz_expectation expected = testing::qgz_expected(blocks, per_node, p.dtype, reduce_op::mean);
    for (std::size_t i = 0; i < p.shard_numel; ++i) {
      ASSERT_LE(std::fabs(got[i] - expected.want[i]), expected.limit[i])
          << p.name << " element " << first + i << " of " << world << " ranks";
    }
  }
}

}  // namespace
}  // namespace zoe::engine
