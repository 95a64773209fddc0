// The gathered-parameter arena's compaction under a model with one large block (GPT-2's tied
// embedding: fetched first and last in forward and in backward) in the arena the plan sizes for a
// prefetch bucket of about a layer, smaller than every parameter: a wait compacts only when pinning
// its module where it lies would leave no room for the largest parameter not gathered, a prefetch
// takes a hole or backs off, and only a demand fetch that finds no hole compacts. Counted, not timed.
#include <gtest/gtest.h>

#include <vector>

#include "engine_stack.hpp"
#include "zoe/core/str.hpp"

namespace zoe::testing {
namespace {

using engine::module_id;

constexpr module_id layers = 8;

// "embed" (one parameter of five layers' bytes, as GPT-2 small's tied embedding is of 5.4 of its
// blocks) and `layers` layers of three parameters of different sizes.
std::vector<engine::module_spec> embedding_and_layers() {
  std::vector<engine::module_spec> m = {{"embed", {{"embed.w", {400'000}}}}};
  for (module_id i = 0; i < layers; ++i) {
    m.push_back(
        {str("layer", i),
         {{str("layer", i, ".a"), {30'000}}, {str("layer", i, ".b"), {10'000}}, {str("layer", i, ".c"), {40'000}}}});
  }
  return m;
}

// The tied embedding's schedule: embed, the layers, embed (the head); backward the other way round.
std::vector<module_id> tied_forward_backward() {
  std::vector<module_id> order = {0};
  for (module_id m = 1; m <= layers; ++m) order.push_back(m);
  order.push_back(0);
  order.push_back(0);
  for (module_id m = layers; m >= 1; --m) order.push_back(m);
  order.push_back(0);
  return order;
}

TEST(CoordinatorCompaction, ALargeBlockInAnArenaSmallerThanTheModelIsNotSlidAtEveryWait) {
  engine::engine_config config = nvme_config(4);
  config.zero.param_persistence_threshold = 0;
  config.zero.prefetch_bucket_size = 100'000;  // about a layer ahead
  config.zero.max_reuse_distance = 0;          // the embedding is gathered again for each use
  engine_stack s({.modules = embedding_and_layers(), .config = config});
  std::uint64_t all = 0;
  for (const auto& p : s.layout().parameters()) all += s.coord().full_bytes(p.id);
  ASSERT_LT(s.plan().arena_bytes, all) << "the arena must be smaller than every parameter";
  for (const auto& p : s.layout().parameters()) s.write_home(p.id, s.shard_data(p.id, p.id));
  constexpr std::uint64_t steps = 6;
  for (std::uint64_t step = 0; step < steps; ++step) {
    s.coord().begin_step();
    for (const module_id m : tied_forward_backward()) {
      s.coord().fetch(m).wait();
      s.coord().release(m);
    }
    s.coord().end_step();
  }
  const engine::coordinator_stats st = s.coord().stats();
  EXPECT_GT(st.prefetches, 0U);
  // The arena holds the embedding beside any one module and a bucket ahead: at most one slide a step
  // (for the embedding, when prefetches left the free space in pieces), never one per wait.
  EXPECT_LE(st.arena.compactions, steps) << st.fetches << " fetches; " << st.arena.bytes_moved << " bytes moved";
}

}  // namespace
}  // namespace zoe::testing
