// What a framework's model needs of the C API, at 2 ranks under mpirun (label mpi): frozen and
// grouped parameters train as one rank does with the same global batch (the 2 ranks' micro-batches
// as one rank's 2 accumulated ones), bit for bit; zoe_read_state gives every rank the whole value
// at every stage; a checkpoint keeps rank 0's client bytes and gives them to every rank. The one-rank
// reference runs in each rank's process, on the single backend.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "c_api_rig.hpp"
#include "zoe/zoe.h"

namespace zoe::testing {
namespace {

// embed (frozen, bf16) and layer0.w (group 1) share a module, norm is all frozen, head.w is in
// group 0 and head.b in group 2. The trainable parameters are fp32: the ranks' gradients are summed
// in the working dtype (the reduce-scatter carries it, as DeepSpeed's communication_data_type does
// by default), so a bf16 one's sum over 2 ranks is rounded to bf16 where one rank accumulates its 2
// micro-batches in fp32, and the two differ by that rounding (about 1e-4 of the update here).
const std::vector<c_module> model = {
    {"layer0", {{"embed", {37, 53}, ZOE_BF16, 1, 0}, {"layer0.w", {53, 29}, ZOE_FP32, 0, 1}}},
    {"norm", {{"norm.scale", {29}, ZOE_FP32, 1, 0}}},
    {"head", {{"head.w", {29, 17}, ZOE_FP32, 0, 0}, {"head.b", {17}, ZOE_FP32, 0, 2}}},
};
const zoe_group_hyper settings[3] = {
    {sizeof(zoe_group_hyper), 0.01, 0.1}, {sizeof(zoe_group_hyper), 0.002, 0.0}, {sizeof(zoe_group_hyper), 0.05, 0.3}};

zoe_ranks ranks_of(const c_rig& r) {
  zoe_ranks out = ZOE_RANKS_INIT;
  EXPECT_EQ(zoe_engine_ranks(r.engine(), &out), ZOE_SUCCESS) << zoe_last_error();
  return out;
}

// The same model on this process alone (the single backend), its micro-batches accumulated as the
// ranks' are averaged.
c_rig_options one_rank(c_rig_options o, int micro_batches) {
  o.overrides = R"({"gradient_accumulation_steps": )" + std::to_string(micro_batches) +
                R"(, "zoe": {"comm": {"backend": "single"}}})";
  return o;
}

TEST(model_ranks, FrozenAndGroupedParametersTrainAsOneRankWithTheSameGlobalBatch) {
  for (const c_rig_options& o :
       {c_rig_options{.stage = 3}, c_rig_options{.placement = "nvme", .stage = 3}, c_rig_options{.stage = 2},
        c_rig_options{.placement = "cpu", .stage = 1}, c_rig_options{.stage = 0}}) {
    SCOPED_TRACE("stage " + std::to_string(o.stage) + ", " + o.placement);
    c_rig ranks(model, o);
    ASSERT_NE(ranks.engine(), nullptr);
    const zoe_ranks me = ranks_of(ranks);
    if (me.world_size != 2) GTEST_SKIP() << "a case for 2 ranks";
    c_rig alone(model, one_rank(o, 2));
    ASSERT_NE(alone.engine(), nullptr);
    const std::vector<float> embed = alone.read(0, ZOE_STATE_PARAMETER);
    for (std::uint64_t step = 0; step < 2; ++step) {
      // Rank r's micro-batch is the one rank's r-th.
      ranks.micro_batch(ranks.values(10 + 2 * step + me.rank, 0.05F));
      for (std::uint64_t k = 0; k < 2; ++k) alone.micro_batch(alone.values(10 + 2 * step + k, 0.05F));
      zoe_step_result a = ZOE_STEP_RESULT_INIT;
      zoe_step_result b = ZOE_STEP_RESULT_INIT;
      ASSERT_EQ(zoe_step_groups(ranks.engine(), settings, 3, &a), ZOE_SUCCESS) << zoe_last_error();
      ASSERT_EQ(zoe_step_groups(alone.engine(), settings, 3, &b), ZOE_SUCCESS) << zoe_last_error();
      // The gradient norm is the same bits here too.
      EXPECT_EQ(a.grad_norm, b.grad_norm);
    }
    for (zoe_parameter_id p = 0; p < ranks.parameter_count(); ++p) {
      EXPECT_EQ(ranks.read(p, ZOE_STATE_PARAMETER), alone.read(p, ZOE_STATE_PARAMETER)) << "parameter " << p;
      if (p == 0 || p == 2) continue;  // frozen: no moments
      EXPECT_EQ(ranks.read(p, ZOE_STATE_EXP_AVG), alone.read(p, ZOE_STATE_EXP_AVG)) << "parameter " << p;
      EXPECT_EQ(ranks.read(p, ZOE_STATE_EXP_AVG_SQ), alone.read(p, ZOE_STATE_EXP_AVG_SQ)) << "parameter " << p;
    }
    EXPECT_EQ(ranks.read(0, ZOE_STATE_PARAMETER), embed) << "frozen";
  }
}

TEST(model_ranks, ReadStateGivesEveryRankTheWholeValueAtEveryStage) {
  for (const int stage : {3, 2, 1, 0}) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    c_rig r(model, {.stage = stage});
    ASSERT_NE(r.engine(), nullptr);
    if (ranks_of(r).world_size != 2) GTEST_SKIP() << "a case for 2 ranks";
    // Every rank writes the whole value (its part of it) and reads back the whole of it.
    const auto value = r.values(1, 1.0F);
    const auto moment = r.values(2, 0.1F);
    for (zoe_parameter_id p = 0; p < r.parameter_count(); ++p) {
      ASSERT_EQ(zoe_write_state(r.engine(), p, ZOE_STATE_PARAMETER, value[p].data(), value[p].size()), ZOE_SUCCESS)
          << zoe_last_error();
      if (p == 0 || p == 2) continue;  // frozen
      ASSERT_EQ(zoe_write_state(r.engine(), p, ZOE_STATE_EXP_AVG, moment[p].data(), moment[p].size()), ZOE_SUCCESS)
          << zoe_last_error();
    }
    for (zoe_parameter_id p = 0; p < r.parameter_count(); ++p) {
      std::vector<float> want = value[p];
      if (p == 0) {  // frozen and bf16: only its rounding is kept
        for (float& x : want) x = bf16_rounded(x);
      }
      EXPECT_EQ(r.read(p, ZOE_STATE_PARAMETER), want) << "parameter " << p;
      if (p == 0 || p == 2) continue;
      EXPECT_EQ(r.read(p, ZOE_STATE_EXP_AVG), moment[p]) << "parameter " << p;
    }
  }
}

// A folder every rank names alike: rank 0's process id, summed over the ranks.
std::filesystem::path shared_folder(const c_rig& r) {
  double id = ranks_of(r).rank == 0 ? static_cast<double>(getpid()) : 0.0;
  EXPECT_EQ(zoe_all_reduce_sum(r.engine(), &id, 1), ZOE_SUCCESS) << zoe_last_error();
  return std::filesystem::temp_directory_path() / ("zoe-c-api-mpi-" + std::to_string(static_cast<long>(id)));
}

TEST(model_ranks, ACheckpointKeepsRankZerosClientBytesAndGivesThemToEveryRank) {
  c_rig r(model, {.placement = "nvme"});
  ASSERT_NE(r.engine(), nullptr);
  const zoe_ranks me = ranks_of(r);
  if (me.world_size != 2) GTEST_SKIP() << "a case for 2 ranks";
  const std::filesystem::path root = shared_folder(r);
  r.micro_batch(r.values(3 + me.rank, 0.05F));
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  ASSERT_EQ(zoe_step_groups(r.engine(), settings, 3, &result), ZOE_SUCCESS) << zoe_last_error();
  const std::vector<float> saved = r.read(3, ZOE_STATE_PARAMETER);
  // Each rank passes its own bytes; rank 0's are kept.
  const std::string mine = "scheduler state of rank " + std::to_string(me.rank);
  ASSERT_EQ(zoe_checkpoint_save_client(r.engine(), root.c_str(), "a", mine.data(), mine.size()), ZOE_SUCCESS)
      << zoe_last_error();
  const std::string kept = "scheduler state of rank 0";
  r.micro_batch(r.values(5 + me.rank, 0.05F));
  r.step(0.5);
  ASSERT_EQ(zoe_checkpoint_load(r.engine(), root.c_str(), "a"), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(checkpoint_client(r.engine()), std::vector<unsigned char>(kept.begin(), kept.end()));
  EXPECT_EQ(r.read(3, ZOE_STATE_PARAMETER), saved);
  zoe_group_hyper got[3] = {ZOE_GROUP_HYPER_INIT, ZOE_GROUP_HYPER_INIT, ZOE_GROUP_HYPER_INIT};
  ASSERT_EQ(zoe_checkpoint_groups(r.engine(), got, 3), ZOE_SUCCESS) << zoe_last_error();
  for (int g = 0; g < 3; ++g) {
    EXPECT_EQ(got[g].lr, settings[g].lr) << "group " << g;
    EXPECT_EQ(got[g].weight_decay, settings[g].weight_decay) << "group " << g;
  }
  // A single rank loads the 2 ranks' checkpoint with the same bytes.
  c_rig alone(model, one_rank({}, 1));
  ASSERT_NE(alone.engine(), nullptr);
  ASSERT_EQ(zoe_checkpoint_load(alone.engine(), root.c_str(), "a"), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(checkpoint_client(alone.engine()), std::vector<unsigned char>(kept.begin(), kept.end()));
  EXPECT_EQ(alone.read(3, ZOE_STATE_PARAMETER), saved);
  // Every rank is done with the folder before rank 0 removes it.
  double done = 1;
  ASSERT_EQ(zoe_all_reduce_sum(r.engine(), &done, 1), ZOE_SUCCESS) << zoe_last_error();
  if (me.rank == 0) std::filesystem::remove_all(root);
}

}  // namespace
}  // namespace zoe::testing
