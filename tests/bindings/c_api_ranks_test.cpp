// The C API's ranks calls on 1 to 4 ranks under mpirun (label mpi): every rank agrees with its
// launcher, zoe_all_reduce_sum gives every rank the same sums, added in the pairwise tree, and
// ranks that pass different counts all fail naming every rank's count; the traffic counters see bytes leave
// the rank once a step runs (and none at world size 1).
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "zoe/zoe.h"

namespace {

// One module of one parameter on the host device, stage 3: the smallest engine every rank makes.
class ranks_engine : public ::testing::Test {
 protected:
  void SetUp() override {
    zoe_device_options o = ZOE_DEVICE_OPTIONS_INIT;
    o.kind = ZOE_DEVICE_HOST;
    o.budget_bytes = 64u << 20;
    ASSERT_EQ(zoe_device_create(&o, &device_), ZOE_SUCCESS) << zoe_last_error();
    ASSERT_EQ(zoe_stream_create(device_, &stream_), ZOE_SUCCESS) << zoe_last_error();
    zoe_model* model = nullptr;
    ASSERT_EQ(zoe_model_create(&model), ZOE_SUCCESS);
    zoe_module_id module = 0;
    ASSERT_EQ(zoe_model_add_module(model, "layer", &module), ZOE_SUCCESS);
    const std::uint64_t shape[1] = {1000};
    zoe_parameter_desc d = ZOE_PARAMETER_DESC_INIT;
    d.name = "w";
    d.ndim = 1;
    d.shape = shape;
    d.init = ZOE_INIT_UNIFORM;
    d.scale = 1.0F;
    d.seed = 3;
    ASSERT_EQ(zoe_model_add_parameter(model, module, &d, &parameter_), ZOE_SUCCESS) << zoe_last_error();
    zoe_engine_desc e = ZOE_ENGINE_DESC_INIT;
    e.config_json =
        R"({"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
            "optimizer": {"type": "Adam", "params": {"lr": 0.01}}, "zoe": {"comm": {"timeout_s": 60}}})";
    e.config_overrides = overrides_;
    e.model = model;
    e.device = device_;
    const zoe_status made = zoe_engine_create(&e, &engine_);
    zoe_model_destroy(model);
    ASSERT_EQ(made, ZOE_SUCCESS) << zoe_last_error();
  }
  void TearDown() override {
    if (engine_ != nullptr) {
      EXPECT_EQ(zoe_engine_destroy(engine_), ZOE_SUCCESS) << zoe_last_error();
    }
    if (stream_ != nullptr) zoe_stream_destroy(stream_);
    if (device_ != nullptr) zoe_device_destroy(device_);
  }

  const char* overrides_ = nullptr;  // zoe_engine_desc.config_overrides
  zoe_device* device_ = nullptr;
  zoe_stream* stream_ = nullptr;
  zoe_engine* engine_ = nullptr;
  zoe_parameter_id parameter_ = 0;
};

TEST_F(ranks_engine, EngineRanksAgreeWithTheLauncher) {
  zoe_ranks launch = ZOE_RANKS_INIT;
  zoe_ranks mine = ZOE_RANKS_INIT;
  ASSERT_EQ(zoe_launcher_ranks(&launch), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_engine_ranks(engine_, &mine), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(mine.rank, launch.rank);
  EXPECT_EQ(mine.world_size, launch.world_size);
  EXPECT_EQ(mine.node, mine.rank / mine.ranks_per_node);
  EXPECT_EQ(mine.local_rank, mine.rank % mine.ranks_per_node);
  EXPECT_EQ(mine.nodes * mine.ranks_per_node, mine.world_size);
}

// The same engine with its ranks grouped as nodes of 2 (zoe.ranks_per_node), on even world sizes.
class ranks_engine_in_pairs : public ranks_engine {
 protected:
  void SetUp() override {
    zoe_ranks launch = ZOE_RANKS_INIT;
    ASSERT_EQ(zoe_launcher_ranks(&launch), ZOE_SUCCESS) << zoe_last_error();
    if (launch.world_size % 2 != 0) GTEST_SKIP() << "nodes of 2 need an even world size";
    overrides_ = R"({"zoe": {"ranks_per_node": 2}})";
    ranks_engine::SetUp();
  }
};

// The engine's view places rank r on node r / 2 of world_size / 2, as communicator.hpp's rule says.
TEST_F(ranks_engine_in_pairs, EngineRanksFollowTheConfiguredNodes) {
  zoe_ranks mine = ZOE_RANKS_INIT;
  ASSERT_EQ(zoe_engine_ranks(engine_, &mine), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(mine.ranks_per_node, 2U);
  EXPECT_EQ(mine.node, mine.rank / 2);
  EXPECT_EQ(mine.local_rank, mine.rank % 2);
  EXPECT_EQ(mine.nodes, mine.world_size / 2);
}

// The ranks' values added in zoe's pairwise tree, written out for the world sizes the test runs on.
double tree_sum(const std::vector<double>& v) {
  switch (v.size()) {
    case 1: return v[0];
    case 2: return v[0] + v[1];
    case 3: return (v[0] + v[1]) + v[2];
    case 4: return (v[0] + v[1]) + (v[2] + v[3]);
    default: ADD_FAILURE() << "no written-out tree for " << v.size() << " ranks"; return 0.0;
  }
}

TEST_F(ranks_engine, AllReduceSumAddsInThePairwiseTreeOnEveryRank) {
  zoe_ranks k = ZOE_RANKS_INIT;
  ASSERT_EQ(zoe_engine_ranks(engine_, &k), ZOE_SUCCESS);
  // Values whose sum depends on the grouping of the additions: 1e16 + 1 + 1 + 1 keeps the small
  // ones only where (1 + 1) is added first, as the tree on 4 ranks does.
  std::vector<double> values = {static_cast<double>(k.rank + 1), k.rank == 0 ? 1e16 : 1.0, -0.5 * k.rank};
  ASSERT_EQ(zoe_all_reduce_sum(engine_, values.data(), values.size()), ZOE_SUCCESS) << zoe_last_error();
  std::vector<double> first;
  std::vector<double> second;
  std::vector<double> third;
  for (std::uint32_t r = 0; r < k.world_size; ++r) {
    first.push_back(static_cast<double>(r + 1));
    second.push_back(r == 0 ? 1e16 : 1.0);
    third.push_back(-0.5 * r);
  }
  const double want_first = tree_sum(first);
  const double want_second = tree_sum(second);
  const double want_third = tree_sum(third);
  EXPECT_EQ(values[0], want_first);
  EXPECT_EQ(values[1], want_second);
  EXPECT_EQ(values[2], want_third);
  // Twice more, and count 0: every rank in the same order.
  ASSERT_EQ(zoe_all_reduce_sum(engine_, nullptr, 0), ZOE_SUCCESS) << zoe_last_error();
  double one = 1.0;
  ASSERT_EQ(zoe_all_reduce_sum(engine_, &one, 1), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(one, static_cast<double>(k.world_size));
}

TEST_F(ranks_engine, DifferentCountsFailOnEveryRankNamingThem) {
  zoe_ranks k = ZOE_RANKS_INIT;
  ASSERT_EQ(zoe_engine_ranks(engine_, &k), ZOE_SUCCESS);
  if (k.world_size == 1) GTEST_SKIP() << "one rank cannot disagree with itself";
  std::vector<double> values(4, 1.0);
  const std::size_t count = k.rank == 1 ? 3 : 2;
  EXPECT_EQ(zoe_all_reduce_sum(engine_, values.data(), count), ZOE_ERROR_USAGE);
  const std::string message = zoe_last_error();
  EXPECT_NE(message.find("rank 1: 3"), std::string::npos) << message;
  EXPECT_NE(message.find("rank 0: 2"), std::string::npos) << message;
  // The values stay as they were, and the world is still usable in step.
  EXPECT_EQ(values[0], 1.0);
  ASSERT_EQ(zoe_all_reduce_sum(engine_, values.data(), 1), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_EQ(values[0], static_cast<double>(k.world_size));
}

TEST_F(ranks_engine, TrafficCountsTheStepsBytes) {
  zoe_ranks k = ZOE_RANKS_INIT;
  ASSERT_EQ(zoe_engine_ranks(engine_, &k), ZOE_SUCCESS);
  zoe_comm_traffic before = ZOE_COMM_TRAFFIC_INIT;
  zoe_comm_traffic after = ZOE_COMM_TRAFFIC_INIT;
  ASSERT_EQ(zoe_engine_traffic(engine_, &before), ZOE_SUCCESS) << zoe_last_error();
  // One step: the module gathered for forward and backward, a gradient of ones reduced.
  ASSERT_EQ(zoe_begin_micro_batch(engine_), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_fetch(engine_, 0, ZOE_PASS_FORWARD, stream_), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_release(engine_, 0, stream_), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_fetch(engine_, 0, ZOE_PASS_BACKWARD, stream_), ZOE_SUCCESS) << zoe_last_error();
  void* grad = nullptr;
  ASSERT_EQ(zoe_module_gradients(engine_, 0, stream_, &grad, 1), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_stream_synchronize(stream_), ZOE_SUCCESS);
  auto* g = static_cast<float*>(grad);
  for (int i = 0; i < 1000; ++i) g[i] = 1.0F;
  ASSERT_EQ(zoe_reduce_gradients(engine_, 0, stream_), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_release(engine_, 0, stream_), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_end_micro_batch(engine_), ZOE_SUCCESS) << zoe_last_error();
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  ASSERT_EQ(zoe_step(engine_, 0.01, &result), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_engine_traffic(engine_, &after), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_GT(after.collectives, before.collectives);
  const std::uint64_t sent = after.intra_node_bytes + after.inter_node_bytes;
  const std::uint64_t sent_before = before.intra_node_bytes + before.inter_node_bytes;
  if (k.world_size == 1) {
    EXPECT_EQ(sent, 0U);
  } else {
    EXPECT_GT(sent, sent_before);
  }
  if (k.nodes == 1) {
    EXPECT_EQ(after.inter_node_bytes, 0U);
  }
}

}  // namespace
