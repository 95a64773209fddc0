// zoe_engine_desc.host_comm on ranks that are threads of one process: each rank's zoe_host_comm
// callbacks meet in the in-process exchange (tests/engine/host_exchange.hpp) in place of
// torch.distributed. A small model trained 3 steps on 2 ranks, each handing in the mean gradient of
// its half of the global batch, equals the same model trained on 1 rank (no host_comm) with the whole
// batch bit for bit: with 2 ranks any reduction order adds the same (a + b is b + a), and each rank's
// gradient is half of the pairwise sum the one rank forms ((g0 + g1) + (g2 + g3)), scaled by powers
// of two, which round exactly. A host failure comes back as its status naming the call and the
// group; a bad zoe_host_comm or a backend other than host is refused naming the field or the key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "host_exchange.hpp"
#include "zoe/core/error.hpp"
#include "zoe/engine/comm/host_collectives.hpp"
#include "zoe/zoe.h"

namespace {

using ::testing::HasSubstr;
using zoe::testing::host_exchange;
using handle = zoe::engine::host_collectives::group_handle;

// ---- zoe_host_comm over a host_exchange rank, as a C host fills it ----------------------------

template <typename Body>
zoe_status guarded(char* message, size_t capacity, Body&& body) {
  try {
    body();
    return ZOE_SUCCESS;
  } catch (const zoe::error& e) {
    std::snprintf(message, capacity, "%s", e.what());
    return static_cast<zoe_status>(e.category());
  } catch (const std::exception& e) {
    std::snprintf(message, capacity, "%s", e.what());
    return ZOE_ERROR_COMM;
  }
}

zoe::engine::host_collectives& host(void* user) { return *static_cast<zoe::engine::host_collectives*>(user); }
zoe::kernels::dtype dtype_of(zoe_dtype t) { return static_cast<zoe::kernels::dtype>(t); }
zoe::engine::reduce_op op_of(zoe_reduce_op op) { return static_cast<zoe::engine::reduce_op>(op); }

zoe_host_comm c_host_comm(zoe::engine::host_collectives& h) {
  zoe_host_comm c = ZOE_HOST_COMM_INIT;
  c.user = &h;
  c.rank = static_cast<uint32_t>(h.rank());
  c.world_size = static_cast<uint32_t>(h.world_size());
  c.create_group = [](void* u, const uint32_t* ranks, size_t count, void** group, char* m, size_t n) {
    return guarded(m, n, [&] {
      const std::vector<std::size_t> members(ranks, ranks + count);
      *group = host(u).create_group(members);
    });
  };
  c.destroy_group = [](void* u, void* g, char* m, size_t n) {
    return guarded(m, n, [&] { host(u).destroy_group(g); });
  };
  c.all_gather = [](void* u, void* g, const void* s, void* r, size_t b, void* st, char* m, size_t n) {
    return guarded(m, n, [&] { host(u).all_gather(g, s, r, b, st); });
  };
  c.reduce_scatter = [](void* u, void* g, const void* s, void* r, size_t k, zoe_dtype t, zoe_reduce_op o, void* st,
                        char* m, size_t n) {
    return guarded(m, n, [&] { host(u).reduce_scatter(g, s, r, k, dtype_of(t), op_of(o), st); });
  };
  c.all_reduce = [](void* u, void* g, const void* s, void* r, size_t k, zoe_dtype t, zoe_reduce_op o, void* st, char* m,
                    size_t n) {
    return guarded(m, n, [&] { host(u).all_reduce(g, s, r, k, dtype_of(t), op_of(o), st); });
  };
  c.all_to_all = [](void* u, void* g, const void* s, void* r, size_t b, void* st, char* m, size_t n) {
    return guarded(m, n, [&] { host(u).all_to_all(g, s, r, b, st); });
  };
  c.broadcast = [](void* u, void* g, void* buf, size_t b, uint32_t root, void* st, char* m, size_t n) {
    return guarded(m, n, [&] { host(u).broadcast(g, buf, b, root, st); });
  };
  c.point_to_point = [](void* u, void* g, void* buf, size_t b, uint32_t from, uint32_t to, void* st, char* m,
                        size_t n) { return guarded(m, n, [&] { host(u).point_to_point(g, buf, b, from, to, st); }); };
  c.barrier = [](void* u, void* g, char* m, size_t n) { return guarded(m, n, [&] { host(u).barrier(g); }); };
  return c;
}

// ---- the model: y = W x + b, loss 0.5 |y - t|^2 per sample -------------------------------------

constexpr std::size_t in = 4;
constexpr std::size_t out = 3;
constexpr std::size_t batch = 4;  // the global batch

float input(std::size_t sample, std::size_t i) {
  return static_cast<float>(std::sin(0.7 * static_cast<double>(sample) + 1.3 * static_cast<double>(i)));
}
float target(std::size_t sample, std::size_t j) {
  return static_cast<float>(std::cos(0.5 * static_cast<double>(sample) + static_cast<double>(j)));
}

constexpr const char* config =
    R"({"zero_optimization": {"stage": 3}, "gradient_clipping": 0,
        "optimizer": {"type": "Adam", "params": {"lr": 0.01}},
        "zoe": {"device": {"kind": "host", "budget_bytes": 67108864}}})";

std::string last_error() { return zoe_last_error(); }

#define ZOE_ASSERT_OK(call) ASSERT_EQ((call), ZOE_SUCCESS) << #call << ": " << last_error()

struct rank_run {
  zoe_model* model = nullptr;
  zoe_engine* engine = nullptr;
  zoe_module_id module = 0;
  zoe_parameter_id w = 0;
  zoe_parameter_id b = 0;
  ~rank_run() {
    if (engine != nullptr) {
      EXPECT_EQ(zoe_engine_destroy(engine), ZOE_SUCCESS) << last_error();
    }
    if (model != nullptr) {
      EXPECT_EQ(zoe_model_destroy(model), ZOE_SUCCESS) << last_error();
    }
  }
};

// Builds rank `rank`'s model and engine (over `comm` when given); the status of zoe_engine_create.
zoe_status open(rank_run& run, const zoe_host_comm* comm, const char* json = config) {
  EXPECT_EQ(zoe_model_create(&run.model), ZOE_SUCCESS);
  EXPECT_EQ(zoe_model_add_module(run.model, "linear", &run.module), ZOE_SUCCESS);
  const std::array<uint64_t, 2> w_shape{out, in};
  const std::array<uint64_t, 1> b_shape{out};
  zoe_parameter_desc d = ZOE_PARAMETER_DESC_INIT;
  d.name = "w";
  d.ndim = 2;
  d.shape = w_shape.data();
  d.init = ZOE_INIT_UNIFORM;
  d.scale = 0.5F;
  d.seed = 7;
  EXPECT_EQ(zoe_model_add_parameter(run.model, run.module, &d, &run.w), ZOE_SUCCESS);
  d.name = "b";
  d.ndim = 1;
  d.shape = b_shape.data();
  d.seed = 8;
  EXPECT_EQ(zoe_model_add_parameter(run.model, run.module, &d, &run.b), ZOE_SUCCESS);
  zoe_engine_desc desc = ZOE_ENGINE_DESC_INIT;
  desc.config_json = json;
  desc.model = run.model;
  desc.host_comm = comm;
  return zoe_engine_create(&desc, &run.engine);
}

// One step on samples [first, first + count): each sample's gradient, added in the pairwise tree
// over the samples and scaled by 1 / count (the mean over this rank's samples).
void train_step(rank_run& run, std::size_t first, std::size_t count) {
  zoe_device* device = nullptr;
  ZOE_ASSERT_OK(zoe_engine_device(run.engine, &device));
  zoe_stream* stream = nullptr;
  ZOE_ASSERT_OK(zoe_stream_create(device, &stream));
  ZOE_ASSERT_OK(zoe_begin_micro_batch(run.engine));
  ZOE_ASSERT_OK(zoe_fetch(run.engine, run.module, ZOE_PASS_BACKWARD, stream));
  void* w_address = nullptr;
  void* b_address = nullptr;
  ZOE_ASSERT_OK(zoe_parameter_address(run.engine, run.w, &w_address));
  ZOE_ASSERT_OK(zoe_parameter_address(run.engine, run.b, &b_address));
  std::array<void*, 2> grads{};
  ZOE_ASSERT_OK(zoe_module_gradients(run.engine, run.module, stream, grads.data(), grads.size()));
  ZOE_ASSERT_OK(zoe_stream_synchronize(stream));
  const auto* w = static_cast<const float*>(w_address);
  const auto* b = static_cast<const float*>(b_address);
  // Per-sample gradients [dW | db], then the pairwise tree over them.
  std::vector<std::vector<float>> g(count, std::vector<float>(out * in + out));
  for (std::size_t s = 0; s < count; ++s) {
    for (std::size_t j = 0; j < out; ++j) {
      float y = b[j];
      for (std::size_t i = 0; i < in; ++i) y += w[j * in + i] * input(first + s, i);
      const float e = y - target(first + s, j);
      for (std::size_t i = 0; i < in; ++i) g[s][j * in + i] = e * input(first + s, i);
      g[s][out * in + j] = e;
    }
  }
  for (std::size_t width = 1; width < count; width *= 2) {
    for (std::size_t s = 0; s + width < count; s += 2 * width) {
      for (std::size_t k = 0; k < g[s].size(); ++k) g[s][k] += g[s + width][k];
    }
  }
  const float scale = 1.0F / static_cast<float>(count);
  auto* gw = static_cast<float*>(grads[0]);
  auto* gb = static_cast<float*>(grads[1]);
  for (std::size_t k = 0; k < out * in; ++k) gw[k] = g[0][k] * scale;
  for (std::size_t j = 0; j < out; ++j) gb[j] = g[0][out * in + j] * scale;
  ZOE_ASSERT_OK(zoe_reduce_gradients(run.engine, run.module, stream));
  ZOE_ASSERT_OK(zoe_release(run.engine, run.module, stream));
  ZOE_ASSERT_OK(zoe_end_micro_batch(run.engine));
  zoe_step_result result = ZOE_STEP_RESULT_INIT;
  ZOE_ASSERT_OK(zoe_step(run.engine, 0.01, &result));
  EXPECT_EQ(result.skipped, 0);
  ZOE_ASSERT_OK(zoe_stream_destroy(stream));
}

std::vector<float> state_of(rank_run& run, zoe_state state) {
  std::vector<float> v(out * in + out);
  EXPECT_EQ(zoe_read_state(run.engine, run.w, state, v.data(), out * in), ZOE_SUCCESS) << last_error();
  EXPECT_EQ(zoe_read_state(run.engine, run.b, state, v.data() + out * in, out), ZOE_SUCCESS) << last_error();
  return v;
}

struct trained {
  std::vector<float> parameters;
  std::vector<float> exp_avg_sq;
};

trained train(rank_run& run, std::size_t rank, std::size_t ranks) {
  for (int step = 0; step < 3; ++step) train_step(run, rank * batch / ranks, batch / ranks);
  return {state_of(run, ZOE_STATE_PARAMETER), state_of(run, ZOE_STATE_EXP_AVG_SQ)};
}

TEST(CApiHostComm, TwoThreadRanksTrainBitForBitLikeOneRankWithTheGlobalBatch) {
  trained one;
  {
    rank_run run;
    ASSERT_EQ(open(run, nullptr), ZOE_SUCCESS) << last_error();
    one = train(run, 0, 1);
  }
  host_exchange ex(2);
  std::array<trained, 2> two;
  const zoe_comm_traffic no_traffic = ZOE_COMM_TRAFFIC_INIT;
  const zoe_ranks no_ranks = ZOE_RANKS_INIT;
  std::array<zoe_comm_traffic, 2> traffic{no_traffic, no_traffic};
  std::array<zoe_ranks, 2> ranks{no_ranks, no_ranks};
  ex.run([&](std::size_t r) {
    const zoe_host_comm comm = c_host_comm(*ex.rank(r));
    rank_run run;
    ASSERT_EQ(open(run, &comm), ZOE_SUCCESS) << last_error();
    two[r] = train(run, r, 2);
    ZOE_ASSERT_OK(zoe_engine_traffic(run.engine, &traffic[r]));
    ZOE_ASSERT_OK(zoe_engine_ranks(run.engine, &ranks[r]));
  });
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(two[r].parameters, one.parameters) << "rank " << r;
    EXPECT_EQ(two[r].exp_avg_sq, one.exp_avg_sq) << "rank " << r;
    EXPECT_EQ(ranks[r].rank, r);
    EXPECT_EQ(ranks[r].world_size, 2U);
    EXPECT_GT(traffic[r].intra_node_bytes, 0U) << "rank " << r;
    EXPECT_EQ(traffic[r].inter_node_bytes, 0U);
  }
  EXPECT_GT(ex.calls(0, "all_gather"), 0U);
  EXPECT_GT(ex.calls(0, "reduce_scatter"), 0U);
  EXPECT_EQ(ex.groups_alive(), 0U);  // every world destroyed its groups
}

TEST(CApiHostComm, AHostFailureIsItsStatusNamingTheCallTheGroupAndTheRank) {
  host_exchange ex(2);
  ex.fail_call("create_group", 0, "the process group is gone");
  ex.run([&](std::size_t r) {
    const zoe_host_comm comm = c_host_comm(*ex.rank(r));
    rank_run run;
    EXPECT_EQ(open(run, &comm), ZOE_ERROR_COMM);
    EXPECT_THAT(last_error(), HasSubstr("create_group on host (world) of world ranks 0-1 (world rank " +
                                        std::to_string(r) + "): the process group is gone"));
    EXPECT_EQ(run.engine, nullptr);
  });
}

TEST(CApiHostComm, ABadHostCommOrAnotherBackendIsRefusedNamingIt) {
  host_exchange ex(2);
  zoe_host_comm comm = c_host_comm(*ex.rank(0));
  comm.all_to_all = nullptr;
  {
    rank_run run;
    EXPECT_EQ(open(run, &comm), ZOE_ERROR_USAGE);
    EXPECT_THAT(last_error(), HasSubstr("zoe_host_comm.all_to_all is NULL"));
  }
  comm = c_host_comm(*ex.rank(0));
  comm.rank = 2;
  {
    rank_run run;
    EXPECT_EQ(open(run, &comm), ZOE_ERROR_USAGE);
    EXPECT_THAT(last_error(), HasSubstr("zoe_host_comm.rank 2 is not below zoe_host_comm.world_size 2"));
  }
  comm = c_host_comm(*ex.rank(0));
  {
    rank_run run;
    const std::string mpi = R"({"zoe": {"comm": {"backend": "mpi"}, "device": {"kind": "host"}}})";
    EXPECT_EQ(open(run, &comm, mpi.c_str()), ZOE_ERROR_CONFIG);
    EXPECT_THAT(last_error(), HasSubstr("zoe.comm.backend: 'mpi'"));
  }
  EXPECT_EQ(ex.calls(0, "create_group"), 0U);
}

}  // namespace
