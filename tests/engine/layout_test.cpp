// The registry and its padded partition layout: shards of every world size hold whole granules,
// every state stays 4 KiB-aligned, padding is accounted, and bad input names what is wrong.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "usage_message.hpp"
#include "zoe/core/error.hpp"
#include "zoe/engine/model/layout.hpp"

namespace zoe::engine {
namespace {

using zoe::testing::usage_message;

using kernels::dtype;
using ::testing::AllOf;
using ::testing::HasSubstr;

// The shapes a layout must survive: a scalar, one element, primes, a prime product, granule edges,
// and a parameter of 2^40 elements.
std::vector<module_spec> awkward_model(dtype type) {
  return {
      {"tiny", {{"scalar", {}, type}, {"one", {1}, type}, {"prime", {7}, type}}},
      {"primes", {{"grid", {13, 17}, type}, {"big_prime", {1'000'003}, type}}},
      {"edges", {{"granule", {2048}, type}, {"granule_plus", {2049}, type}, {"wide", {4096, 4097}, type}}},
      {"huge", {{"weight", {1ULL << 20, 1ULL << 20}, type}}},
  };
}

std::uint64_t state_bytes(std::uint64_t shard_numel, dtype type) { return shard_numel * kernels::dtype_size(type); }

void expect_well_formed(const model_layout& layout) {
  const std::size_t world = layout.options().world_size;
  std::uint64_t total = 0;
  std::uint64_t total_shard = 0;
  for (const parameter_layout& p : layout.parameters()) {
    SCOPED_TRACE(p.name + " at world size " + std::to_string(world));
    const std::uint64_t g = layout.granule(p.dtype);
    EXPECT_EQ(p.shard_numel % g, 0U);
    EXPECT_EQ(g % layout.options().quant_block, 0U) << "shards hold whole quantization blocks";
    // Every state of the shard (working and gradient in p.dtype; master and moments in fp32) starts
    // on an alignment boundary when states are laid end to end.
    EXPECT_EQ(state_bytes(p.shard_numel, p.dtype) % layout.options().alignment_bytes, 0U);
    EXPECT_EQ(state_bytes(p.shard_numel, dtype::fp32) % layout.options().alignment_bytes, 0U);
    // Padding covers the parameter and is less than one granule per rank.
    EXPECT_GE(p.padded_numel(world), p.numel);
    EXPECT_LT(p.padded_numel(world) - p.numel, world * g);
    EXPECT_LT((p.shard_numel - g) * world, p.numel) << "a shard one granule smaller would be enough";
    std::uint64_t real = 0;
    for (std::size_t r = 0; r < world; ++r) {
      EXPECT_LE(p.real_numel(r), p.shard_numel);
      if (r > 0) {
        EXPECT_LE(p.real_numel(r), p.real_numel(r - 1)) << "real elements fill ranks in order";
      }
      real += p.real_numel(r);
    }
    EXPECT_EQ(real, p.numel) << "padding accounted: real elements across ranks sum to numel";
    EXPECT_EQ(p.real_numel(world), 0U);
    total += p.numel;
    total_shard += p.shard_numel;
  }
  EXPECT_EQ(layout.total_numel(), total);
  EXPECT_EQ(layout.total_shard_numel(), total_shard);
}

TEST(layout, EveryWorldSizeFrom1To8KeepsShardsAlignedAndPaddingAccounted) {
  for (const dtype type : {dtype::fp16, dtype::bf16, dtype::fp32}) {
    for (std::size_t world = 1; world <= 8; ++world) {
      for (const std::size_t quant_block : {8UL, 24UL, 2048UL, 3000UL}) {
        const model_layout layout(awkward_model(type), {world, 4096, quant_block});
        expect_well_formed(layout);
      }
    }
  }
}

TEST(layout, ShardSizesOfKnownShapes) {
  const model_layout one(awkward_model(dtype::fp16), {1, 4096, 2048});
  const model_layout four(awkward_model(dtype::fp16), {4, 4096, 2048});
  // scalar, one, prime: one granule each whatever the world size.
  for (parameter_id p = 0; p < 3; ++p) {
    EXPECT_EQ(one.parameter(p).shard_numel, 2048U);
    EXPECT_EQ(four.parameter(p).shard_numel, 2048U);
  }
  EXPECT_EQ(one.parameter(0).numel, 1U) << "a scalar has one element";
  EXPECT_EQ(one.parameter(5).shard_numel, 2048U) << "exactly one granule";
  EXPECT_EQ(one.parameter(6).shard_numel, 4096U) << "one element over a granule takes another";
  EXPECT_EQ(four.parameter(6).shard_numel, 2048U);
  EXPECT_EQ(one.parameter(8).numel, 1ULL << 40);
  EXPECT_EQ(four.parameter(8).shard_numel, 1ULL << 38) << "2^40 elements split evenly over 4 ranks";
  EXPECT_EQ(four.parameter(4).real_numel(0), 251'904U);  // 1'000'003 / 4 rounded up to 123 granules
  EXPECT_EQ(four.parameter(4).real_numel(3), 1'000'003U - 3 * 251'904U);
}

// Stage 0's layout: one shard, the whole parameter, held by every rank of the world.
TEST(layout, ReplicasHoldTheOneWholeShardOnEveryRank) {
  const model_layout one(awkward_model(dtype::fp16), {1, 4096, 2048});
  const model_layout replicated(awkward_model(dtype::fp16), {.world_size = 1, .replicas = 4});
  EXPECT_EQ(replicated.ranks(), 4U);
  EXPECT_EQ(one.ranks(), 1U);
  for (std::size_t r = 0; r < 4; ++r) EXPECT_EQ(replicated.shard_of(r), 0U) << "rank " << r;
  for (const parameter_layout& p : replicated.parameters()) {
    EXPECT_EQ(p.shard_numel, one.parameter(p.id).shard_numel) << p.name;
    EXPECT_EQ(p.real_numel(0), p.numel) << p.name;
  }
  const model_layout four(awkward_model(dtype::fp16), {4, 4096, 2048});
  EXPECT_EQ(four.ranks(), 4U);
  EXPECT_EQ(four.shard_of(3), 3U);
  EXPECT_THAT(usage_message([] { (void)model_layout(awkward_model(dtype::fp16), {.world_size = 2, .replicas = 2}); }),
              AllOf(HasSubstr("layout_options.replicas"), HasSubstr("world_size 2")));
  EXPECT_THAT(usage_message([] { (void)model_layout(awkward_model(dtype::fp16), {.world_size = 1, .replicas = 0}); }),
              HasSubstr("layout_options.replicas"));
}

TEST(layout, GranuleIsTheLcmOfTheAlignedElementCountAndTheQuantBlock) {
  EXPECT_EQ(model_layout({}, {1, 4096, 2048}).granule(dtype::fp16), 2048U);
  EXPECT_EQ(model_layout({}, {1, 4096, 2048}).granule(dtype::fp32), 2048U) << "1024 for alignment, 2048 for blocks";
  EXPECT_EQ(model_layout({}, {1, 4096, 8}).granule(dtype::fp32), 1024U);
  EXPECT_EQ(model_layout({}, {1, 4096, 8}).granule(dtype::bf16), 2048U);
  EXPECT_EQ(model_layout({}, {1, 4096, 24}).granule(dtype::fp16), 6144U);
  EXPECT_EQ(model_layout({}, {1, 512, 8}).granule(dtype::fp16), 256U);
  EXPECT_EQ(model_layout({}, {1, 1, 8}).granule(dtype::fp32), 8U) << "no alignment: quantization blocks only";
}

TEST(layout, IdsAreRegistrationOrderAndModulesSumTheirParameters) {
  const model_layout layout(awkward_model(dtype::fp16), {2, 4096, 2048});
  ASSERT_EQ(layout.modules().size(), 4U);
  ASSERT_EQ(layout.parameters().size(), 9U);
  parameter_id next = 0;
  for (const module_layout& m : layout.modules()) {
    EXPECT_EQ(&layout.module(m.id), &m);
    std::uint64_t numel = 0;
    std::uint64_t shard = 0;
    for (const parameter_id p : m.parameters) {
      EXPECT_EQ(p, next++);
      EXPECT_EQ(layout.parameter(p).module, m.id);
      numel += layout.parameter(p).numel;
      shard += layout.parameter(p).shard_numel;
    }
    EXPECT_EQ(m.numel, numel);
    EXPECT_EQ(m.shard_numel, shard);
  }
  EXPECT_EQ(layout.module(1).name, "primes");
  EXPECT_EQ(layout.parameter(3).name, "grid");
  EXPECT_EQ(layout.parameter(3).shape, (std::vector<std::uint64_t>{13, 17}));
}

TEST(layout, ParameterNamesRepeatAcrossModulesAndModulesMayBeEmpty) {
  const model_layout layout({{"a", {{"weight", {8}}}}, {"b", {{"weight", {8}}}}, {"act", {}}}, {});
  EXPECT_EQ(layout.parameters().size(), 2U);
  EXPECT_TRUE(layout.module(2).parameters.empty());
  EXPECT_EQ(layout.module(2).shard_numel, 0U);
}

TEST(layout, RealNumelOfAnyRankNeverOverflows) {
  const model_layout layout({{"m", {{"w", {5000}}}}}, {3, 4096, 2048});
  const parameter_layout& p = layout.parameter(0);
  EXPECT_EQ(p.real_numel(std::numeric_limits<std::size_t>::max()), 0U);
  EXPECT_EQ(p.real_numel(0) + p.real_numel(1) + p.real_numel(2), 5000U);
}

TEST(layout, ErrorsNameTheModuleOrParameter) {
  EXPECT_THAT(usage_message([] { model_layout({{"", {}}}, {}); }), HasSubstr("module 0 has an empty name"));
  EXPECT_THAT(usage_message([] {
                model_layout({{"attn", {}}, {"attn", {}}}, {});
              }),
              HasSubstr("module 'attn' is named twice"));
  EXPECT_THAT(usage_message([] {
                model_layout({{"attn", {{"q", {8}}, {"", {8}}}}}, {});
              }),
              AllOf(HasSubstr("module 'attn'"), HasSubstr("parameter 1 has an empty name")));
  EXPECT_THAT(usage_message([] {
                model_layout({{"attn", {{"q", {8}}, {"q", {8}}}}}, {});
              }),
              AllOf(HasSubstr("module 'attn', parameter 'q'"), HasSubstr("named twice")));
  EXPECT_THAT(usage_message([] {
                model_layout({{"mlp", {{"up", {16, 0, 4}}}}}, {});
              }),
              AllOf(HasSubstr("module 'mlp', parameter 'up'"), HasSubstr("zero dimension (dimension 1 of 3)")));
  EXPECT_THAT(usage_message([] {
                model_layout({{"mlp", {{"up", {1ULL << 32, 1ULL << 32}}}}}, {});
              }),
              AllOf(HasSubstr("module 'mlp', parameter 'up'"), HasSubstr("overflow")));
  // Fits 64 bits as elements, not as the fp32 bytes of the padded parameter.
  EXPECT_THAT(usage_message([] {
                model_layout({{"mlp", {{"down", {1ULL << 62}}}}}, {});
              }),
              AllOf(HasSubstr("module 'mlp', parameter 'down'"), HasSubstr("overflow")));
  // Each parameter fits; the model's total does not.
  EXPECT_THAT(usage_message([] {
                std::vector<parameter_spec> seven;
                for (int i = 0; i < 7; ++i) seven.push_back({"w" + std::to_string(i), {1ULL << 61}});
                model_layout({{"a", seven}, {"b", {{"w", {1ULL << 61}}}}}, {});
              }),
              AllOf(HasSubstr("module 'b', parameter 'w'"), HasSubstr("overflow")));
  EXPECT_THAT(usage_message([] {
                model_layout({{"mlp", {{"up", {8}, dtype::fp16, false, max_parameter_group + 1}}}}, {});
              }),
              AllOf(HasSubstr("module 'mlp', parameter 'up'"), HasSubstr("group 65536 is above 65535")));
  EXPECT_EQ(model_layout({{"mlp", {{"up", {8}, dtype::fp16, false, max_parameter_group}}}}, {}).group_count(), 65536U);
}

TEST(layout, ErrorsNameTheOption) {
  EXPECT_THAT(usage_message([] { model_layout({}, {0, 4096, 2048}); }), HasSubstr("layout_options.world_size"));
  EXPECT_THAT(usage_message([] {
                model_layout({}, {1, 3000, 2048});
              }),
              AllOf(HasSubstr("layout_options.alignment_bytes"), HasSubstr("3000")));
  EXPECT_THAT(usage_message([] { model_layout({}, {1, 0, 2048}); }), HasSubstr("layout_options.alignment_bytes"));
  EXPECT_THAT(usage_message([] {
                model_layout({}, {1, 4096, 12});
              }),
              AllOf(HasSubstr("layout_options.quant_block"), HasSubstr("12")));
  EXPECT_THAT(usage_message([] { model_layout({}, {1, 4096, 0}); }), HasSubstr("layout_options.quant_block"));
}

TEST(layout, UnknownIdsAreUsageErrors) {
  const model_layout layout(awkward_model(dtype::fp16), {});
  EXPECT_THAT(usage_message([&] { (void)layout.module(4); }), HasSubstr("unknown module id 4 (the layout has 4"));
  EXPECT_THAT(usage_message([&] { (void)layout.parameter(9); }), HasSubstr("unknown parameter id 9 (the layout has 9"));
}

}  // namespace
}  // namespace zoe::engine
