// The engine on many ranks (label mpi; each case under mpirun on 1 to 4 ranks): ZeRO-3 and stages
// 0, 1 and 2 match one rank fed the same global batch, the clip and skip decisions are global,
// read_state gathers, statistics count the traffic, and each rank swaps into its own folder.
//
// Data parallelism as a trainer runs it: a fixed global batch of samples, each rank handing in the
// mean gradient of its slice, so the ranks' mean (the gradient path's reduce-scatter) is the global
// batch's mean gradient, which the one-rank reference (built on every rank, on its own single
// communicators) hands in directly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <unistd.h>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine_rig.hpp"
#include "io_test_support.hpp"
#include "zoe/core/device.hpp"
#include "zoe/engine/comm/communicator.hpp"
#include "zoe/engine/engine.hpp"
#include "zoe/engine/statistics.hpp"

namespace zoe::engine {
namespace {

using grads_t = std::vector<std::vector<float>>;

// Every rank of one mpirun job swaps under one shared folder, as ranks of a node share its drive
// (created by whichever rank comes first; each rank's store makes a folder of its own inside it).
// The folder is the job's own, named after what every rank of the job shares and no concurrent job
// does: mpirun's pid (the ranks' parent) and its job id, under the suites' real-disk scratch parent.
std::filesystem::path shared_swap_path() {
  const char* job = std::getenv("OMPI_MCA_ess_base_jobid");
  const std::filesystem::path p = testing::scratch_parent() / ("zoe-mpi-engine-" + std::to_string(::getppid()) + "-" +
                                                               (job != nullptr ? std::string(job) : "direct"));
  std::error_code ec;
  std::filesystem::create_directories(p, ec);
  return p;
}

// Removes the job's folder once every rank has run its cases: the same collective calls on every
// rank (a world, a barrier), then rank 0 removes it while no rank still swaps there.
class remove_shared_swap_path final : public ::testing::Environment {
 public:
  void TearDown() override {
    engine_config c;
    c.zoe.comm.backend = "auto";
    auto dev = make_host_device(std::uint64_t{16} << 20);
    const std::unique_ptr<communicator> w = make_communicator(*dev, comm_options_of(c));
    w->barrier();
    if (w->rank() == 0) {
      std::error_code ec;
      std::filesystem::remove_all(shared_swap_path(), ec);
    }
  }
};
[[maybe_unused]] ::testing::Environment* const remover = ::testing::AddGlobalTestEnvironment(
    new remove_shared_swap_path);  // NOLINT(cppcoreguidelines-owning-memory): gtest owns it

// config_on's small stage-3 setup, on the world mpirun gives (auto: mpi under mpirun with more than
// one rank, single otherwise), with gradient clipping off unless a test turns it on.
engine_config ranked_config(const std::string& where, int stage = 3) {
  engine_config c = testing::config_on(where, shared_swap_path());
  c.zero.stage = stage;
  c.zoe.comm.backend = "auto";
  c.zoe.comm.timeout_s = 60;
  return c;
}

// An engine and its host device; `single` builds it on two single communicators of its own (the
// one-rank reference every rank computes beside the ranked engine).
struct engine_on_rank {
  explicit engine_on_rank(const engine_config& c, bool single = false, kernels::dtype working = kernels::dtype::fp32)
      : dev(make_host_device(std::uint64_t{256} << 20)) {
    engine_options o;
    if (single) {
      worlds[0] = make_single_communicator(*dev);
      worlds[1] = make_single_communicator(*dev);
      o.comm = worlds[0].get();
      o.gradient_comm = worlds[1].get();
    }
    e = std::make_unique<offload_engine>(testing::small_model(working), c, *dev, o);
    for (const parameter_layout& p : e->layout().parameters()) e->set_parameter(p.id, initial(p));
  }
  [[nodiscard]] std::size_t rank() { return e->resources().comm().rank(); }
  [[nodiscard]] std::size_t size() { return e->resources().comm().size(); }
  [[nodiscard]] grads_t masters() {
    grads_t out;
    for (const parameter_layout& p : e->layout().parameters()) out.push_back(e->read_state(p.id, state_kind::master));
    return out;
  }
  static std::vector<float> initial(const parameter_layout& p) {
    std::vector<float> v(p.numel);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 37 + p.id * 11) % 101) / 64.0F - 0.75F;
    return v;
  }

  std::unique_ptr<device> dev;
  std::unique_ptr<communicator> worlds[2];  // null unless single (then destroyed after the engine)
  std::unique_ptr<offload_engine> e;
};

// Sample s's gradient in step `step`; with `exact`, multiples of 1/16 below 8 in magnitude, so any
// sum of a few of them and its halving are exact in fp32.
grads_t sample_gradient(const model_layout& layout, std::uint64_t step, std::uint64_t s, bool exact) {
  grads_t g = testing::gradients(layout, step * 1000 + s + 1);
  if (exact) {
    for (auto& p : g) {
      for (float& x : p) x = std::round(std::fmin(std::fmax(x, -7.0F), 7.0F) * 16.0F) / 16.0F;
    }
  }
  return g;
}

// The mean gradient of samples [first, first + count) (summed in order, then divided).
grads_t mean_gradient(const model_layout& layout, std::uint64_t step, std::uint64_t first, std::uint64_t count,
                      bool exact) {
  grads_t sum;
  for (std::uint64_t s = first; s < first + count; ++s) {
    const grads_t g = sample_gradient(layout, step, s, exact);
    if (sum.empty()) {
      sum = g;
      continue;
    }
    for (std::size_t p = 0; p < g.size(); ++p) {
      for (std::size_t i = 0; i < g[p].size(); ++i) sum[p][i] += g[p][i];
    }
  }
  for (auto& p : sum) {
    for (float& x : p) x /= static_cast<float>(count);
  }
  return sum;
}

// Runs `steps` steps of a `batch`-sample global batch on the ranked engine and on the one-rank
// reference; returns both engines' masters and checks the step results agree.
struct compared {
  grads_t ranked;
  grads_t reference;
};
// Each step is the configs' gradient_accumulation_steps micro-batches (the same in both), each of
// its own `batch` samples; after_micro_batch(ranked, step, micro-batch) runs after each of the
// ranked engine's.
compared train_both(const engine_config& ranked_cfg, const engine_config& reference_cfg, std::uint64_t batch, int steps,
                    bool exact, kernels::dtype working = kernels::dtype::fp32,
                    const std::function<void(engine_on_rank&, int, std::uint64_t)>& after_micro_batch = {}) {
  engine_on_rank ranked(ranked_cfg, /*single=*/false, working);
  engine_on_rank reference(reference_cfg, /*single=*/true, working);
  const std::size_t n = ranked.size();
  const std::uint64_t slice = batch / n;
  const std::uint64_t micro = ranked_cfg.gradient_accumulation_steps;
  for (int step = 0; step < steps; ++step) {
    for (std::uint64_t mb = 0; mb < micro; ++mb) {
      const std::uint64_t k = static_cast<std::uint64_t>(step) * micro + mb;
      testing::run_micro_batch(*ranked.e, *ranked.dev,
                               mean_gradient(ranked.e->layout(), k, ranked.rank() * slice, slice, exact));
      if (after_micro_batch) after_micro_batch(ranked, step, mb);
      testing::run_micro_batch(*reference.e, *reference.dev, mean_gradient(reference.e->layout(), k, 0, batch, exact));
    }
    const step_result a = ranked.e->step(1e-2);
    const step_result b = reference.e->step(1e-2);
    EXPECT_FALSE(a.skipped);
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-6 * b.grad_norm) << "step " << step;
    EXPECT_NEAR(a.clip_coefficient, b.clip_coefficient, 1e-6) << "step " << step;
  }
  return {ranked.masters(), reference.masters()};
}

void expect_close(const grads_t& a, const grads_t& b, double relative) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t p = 0; p < a.size(); ++p) {
    ASSERT_EQ(a[p].size(), b[p].size()) << "parameter " << p;
    for (std::size_t i = 0; i < a[p].size(); ++i) {
      ASSERT_NEAR(a[p][i], b[p][i], relative * std::fmax(1.0F, std::fabs(b[p][i])))
          << "parameter " << p << " element " << i;
    }
  }
}

// A world size the case needs, the same decision on every rank (so no rank waits on a skipped one).
bool world_is_one_of(std::initializer_list<std::size_t> sizes) {
  engine_config c;
  c.zoe.comm.backend = "auto";
  auto dev = make_host_device(std::uint64_t{16} << 20);
  const std::unique_ptr<communicator> w = make_communicator(*dev, comm_options_of(c));
  for (const std::size_t s : sizes) {
    if (w->size() == s) return true;
  }
  return false;
}

TEST(engine_ranks, Zero3MatchesOneRankOnTheSameGlobalBatch) {
  // Clipping on, so the global norm decides a clip coefficient every rank must agree on.
  engine_config c = ranked_config("nvme");
  c.gradient_clipping = 0.5;
  const compared r = train_both(c, c, 12, 2, /*exact=*/false);
  expect_close(r.ranked, r.reference, 1e-6);
}

TEST(engine_ranks, Zero3IsBitIdenticalWhenTheMeanIsExact) {
  if (!world_is_one_of({1, 2, 4})) GTEST_SKIP() << "the mean over 3 ranks is not exact";
  const engine_config c = ranked_config("split");
  const compared r = train_both(c, c, 4, 2, /*exact=*/true);
  ASSERT_EQ(r.ranked.size(), r.reference.size());
  for (std::size_t p = 0; p < r.ranked.size(); ++p) EXPECT_EQ(r.ranked[p], r.reference[p]) << "parameter " << p;
}

TEST(engine_ranks, Stages1And2MatchStage3OnOneRank) {
  if (!world_is_one_of({1, 2, 4})) GTEST_SKIP() << "stages 1 and 2 are checked on 2 and 4 ranks";
  // fp16 working copies (replicated on every rank below stage 3) and fp32 ones (the master itself).
  // The exact gradients' means (multiples of 1/64 below 8) are exact in fp16 too.
  for (const kernels::dtype working : {kernels::dtype::fp16, kernels::dtype::fp32}) {
    for (const int stage : {1, 2}) {
      SCOPED_TRACE(::testing::Message() << "stage " << stage << ", " << kernels::dtype_name(working));
      // Optimizer states on NVMe (offload_optimizer holds at every stage).
      const compared r = train_both(ranked_config("nvme", stage), ranked_config("nvme"), 4, 2, /*exact=*/true, working);
      for (std::size_t p = 0; p < r.ranked.size(); ++p) EXPECT_EQ(r.ranked[p], r.reference[p]) << "parameter " << p;
    }
  }
}

// What each stage reduces, with 4 micro-batches per step (DeepSpeed's stage 1 reduces only at the
// gradient-accumulation boundary; stages 2 and 3 reduce-scatter every micro-batch): the bytes the
// gradient world's reduce-scatters send after each micro-batch, against one reduce-scatter of
// every parameter's gradient (its shard, to each other rank). The trained values match the one-rank
// run fed the same global batches: bit for bit on 2 and 4 ranks, whose exact gradients (multiples
// of 1/16 below 8, a global batch of 4 halved or quartered by the means) leave every order of summation exact in fp32;
// within 1e-6 relative on 3 ranks, where the mean's division by 3 rounds, at a different point of
// each stage's order (after the step's sum at stage 1, after each micro-batch's at 2 and 3): a few
// ulps of each gradient, which 2 Adam steps of lr 1e-2 turn into far less than 1e-6 of a master.
TEST(engine_ranks, EachStageReducesAsDeepSpeedDefinesIt) {
  if (world_is_one_of({1})) GTEST_SKIP() << "nothing is reduced on one rank";
  const bool exact = !world_is_one_of({3});
  constexpr std::uint64_t micro = 4;
  struct run {
    int stage;
    const char* where;
  };
  // Stage 1's local accumulation on the device and in host memory (its gradient state's tier).
  for (const run r : {run{1, "device"}, run{1, "host"}, run{2, "host"}, run{3, "host"}}) {
    SCOPED_TRACE(::testing::Message() << "stage " << r.stage << ", states on " << r.where);
    engine_config c = ranked_config(r.where, r.stage);
    c.gradient_accumulation_steps = micro;
    engine_config reference = ranked_config(r.where);
    reference.gradient_accumulation_steps = micro;
    std::uint64_t seen = 0;
    std::uint64_t calls = 0;
    std::vector<std::uint64_t> bytes_per_micro_batch;
    std::vector<std::uint64_t> calls_per_micro_batch;
    std::uint64_t one_reduction = 0;  // every parameter's reduce-scatter once
    const compared got = train_both(c, reference, exact ? 4 : 12, 2, exact, kernels::dtype::fp32,
                                    [&](engine_on_rank& e, int, std::uint64_t) {
                                      communicator& g = e.e->resources().gradient_comm();
                                      const comm_stats now = g.stats();
                                      const std::uint64_t total = now.of(collective::reduce_scatter).total();
                                      bytes_per_micro_batch.push_back(total - seen);
                                      calls_per_micro_batch.push_back(now.calls - calls);
                                      seen = total;
                                      calls = now.calls;
                                      if (one_reduction > 0) return;
                                      for (const parameter_layout& p : e.e->layout().parameters()) {
                                        one_reduction += (g.size() - 1) * p.shard_numel * sizeof(float);
                                      }
                                    });
    ASSERT_EQ(bytes_per_micro_batch.size(), 2 * micro);
    for (std::size_t i = 0; i < bytes_per_micro_batch.size(); ++i) {
      const bool last = i % micro == micro - 1;
      const std::uint64_t want = r.stage == 1 ? (last ? one_reduction : 0) : one_reduction;
      EXPECT_EQ(bytes_per_micro_batch[i], want) << "micro-batch " << i % micro << " of step " << i / micro;
      // (Later steps' first micro-batches count the step's own collectives before them.)
      if (r.stage == 1 && !last && i < micro) {
        EXPECT_EQ(calls_per_micro_batch[i], 0U) << "micro-batch " << i;
      }
    }
    if (exact) {
      for (std::size_t p = 0; p < got.ranked.size(); ++p)
        EXPECT_EQ(got.ranked[p], got.reference[p]) << "parameter " << p;
    } else {
      expect_close(got.ranked, got.reference, 1e-6);
    }
  }
}

// Stage 1: a module backward reached earlier in the step but not in its last micro-batch is still
// reduced (when the last micro-batch ends), and one reached only in the last is reduced with the
// others; both as the one-rank run has them (bit for bit: the exact gradients of the case above).
TEST(engine_ranks, StageOneReducesAModuleTheLastMicroBatchDidNotReach) {
  if (!world_is_one_of({2, 4})) GTEST_SKIP() << "checked bit for bit on 2 and 4 ranks";
  engine_config c = ranked_config("host", 1);
  c.gradient_accumulation_steps = 3;
  engine_config one = ranked_config("host");
  one.gradient_accumulation_steps = 3;
  engine_on_rank ranked(c);
  engine_on_rank reference(one, /*single=*/true);
  const auto modules = static_cast<module_id>(ranked.e->layout().modules().size());
  ASSERT_GE(modules, 2U);
  const std::uint64_t slice = 4 / ranked.size();
  for (std::uint64_t mb = 0; mb < 3; ++mb) {
    // Module 0 in all but the last micro-batch, the last module only in the last one.
    const std::function<bool(module_id)> reached = [&](module_id m) {
      return m == 0 ? mb < 2 : (m + 1 == modules ? mb == 2 : true);
    };
    testing::run_micro_batch(*ranked.e, *ranked.dev,
                             mean_gradient(ranked.e->layout(), mb, ranked.rank() * slice, slice, true), {}, reached);
    testing::run_micro_batch(*reference.e, *reference.dev, mean_gradient(reference.e->layout(), mb, 0, 4, true), {},
                             reached);
  }
  const step_result a = ranked.e->step(1e-2);
  const step_result b = reference.e->step(1e-2);
  EXPECT_EQ(a.grad_norm, b.grad_norm);
  const grads_t got = ranked.masters();
  const grads_t want = reference.masters();
  for (std::size_t p = 0; p < got.size(); ++p) EXPECT_EQ(got[p], want[p]) << "parameter " << p;
}

// Stage 0 (plain data parallelism): every rank holds every state whole (a full replica) and steps
// every element; the gradients are all-reduced (mean, in the pairwise tree), in the step's last
// micro-batch only once each rank accumulated its own (DeepSpeed's engine reduces at the
// accumulation boundary), so the gradient world's only traffic is one all-reduce of every whole
// gradient per step, and the coordinator's world carries nothing (nothing to gather). The trained
// values equal the one-rank run fed the same global batches, bit for bit on 1, 2 and 4 ranks (the
// exact gradients of EachStageReducesAsDeepSpeedDefinesIt), with the states on the device, in
// host memory and on NVMe, fp32 and fp16 working copies.
// The optimizer step inside backward (optimizer_step.hpp, "Speculation") on this world: every
// state after four steps of two micro-batches each (one committed, one clipped, one skipped for an
// overflow on rank 0 alone, one committed again) is the same bits with zoe.optimizer_in_backward on
// as off, and every rank commits the same shards; the others are dropped, or not speculated at all
// (forgone) from the first of the rank's own final gradients that shows the step clips or skips.
struct speculated_run {
  std::vector<grads_t> states;  // working, master, exp_avg, exp_avg_sq
  speculation_totals speculation;
};

speculated_run train_speculating(const std::string& where, bool in_backward) {
  engine_config c = ranked_config(where);
  c.zoe.optimizer_in_backward = in_backward;
  c.gradient_clipping = 1.0;
  c.gradient_accumulation_steps = 2;
  c.fp16.enabled = true;
  c.fp16.initial_scale_power = 8;  // unit gradients times 256 are normal fp16 numbers
  c.fp16.hysteresis = 1;
  engine_on_rank r(c, /*single=*/false, kernels::dtype::fp16);
  const std::uint64_t slice = 2;
  const std::array<float, 4> scale = {0.001F, 1.0F, 0.001F, 0.001F};  // step 1 is clipped
  for (std::size_t step = 0; step < scale.size(); ++step) {
    for (std::uint64_t mb = 0; mb < 2; ++mb) {
      grads_t g = mean_gradient(r.e->layout(), step * 2 + mb, r.rank() * slice, slice, /*exact=*/false);
      for (auto& p : g) {
        for (float& x : p) x *= scale[step];
      }
      if (step == 2 && mb == 1 && r.rank() == 0) g[1][3] = std::numeric_limits<float>::infinity();
      testing::run_micro_batch(*r.e, *r.dev, g);
    }
    const step_result out = r.e->step(r.e->lr());
    EXPECT_EQ(out.skipped, step == 2) << "step " << step;
    EXPECT_EQ(out.clip_coefficient < 1.0, step == 1) << "step " << step;
  }
  speculated_run run;
  for (const state_kind k : {state_kind::working, state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq}) {
    grads_t values;
    for (const parameter_layout& p : r.e->layout().parameters()) values.push_back(r.e->read_state(p.id, k));
    run.states.push_back(std::move(values));
  }
  run.speculation = r.e->optimizer().speculation();
  return run;
}

TEST(engine_ranks, TheStepInsideBackwardEqualsTheStepAfterItBitForBit) {
  for (const std::string where : {"nvme", "host"}) {
    SCOPED_TRACE(where);
    const speculated_run ahead = train_speculating(where, true);
    const speculated_run after = train_speculating(where, false);
    ASSERT_EQ(ahead.states.size(), after.states.size());
    for (std::size_t k = 0; k < ahead.states.size(); ++k) EXPECT_EQ(ahead.states[k], after.states[k]) << "state " << k;
    const std::uint64_t shards = testing::small_model(kernels::dtype::fp16).size() * 2;  // two parameters a module
    EXPECT_EQ(ahead.speculation.committed, 2 * shards) << "steps 0 and 3";
    EXPECT_EQ(ahead.speculation.dropped + ahead.speculation.forgone, 2 * shards)
        << "steps 1 (clipped) and 2 (an overflow)";
    EXPECT_EQ(ahead.speculation.speculated, ahead.speculation.committed + ahead.speculation.dropped);
    EXPECT_EQ(after.speculation.speculated, 0U);
  }
}

TEST(engine_ranks, StageZeroAllReducesWholeGradientsAndEqualsOneRankBitForBit) {
  if (!world_is_one_of({1, 2, 4})) GTEST_SKIP() << "checked bit for bit on 1, 2 and 4 ranks";
  struct run {
    const char* where;
    std::uint64_t micro;
    kernels::dtype working;
  };
  for (const run r : {run{"device", 1, kernels::dtype::fp32}, run{"host", 3, kernels::dtype::fp32},
                      run{"nvme", 3, kernels::dtype::fp32}, run{"host", 1, kernels::dtype::fp16},
                      run{"device", 3, kernels::dtype::fp16}}) {
    SCOPED_TRACE(::testing::Message() << "states on " << r.where << ", " << r.micro << " micro-batches, "
                                      << kernels::dtype_name(r.working));
    engine_config c = ranked_config(r.where, 0);
    c.gradient_accumulation_steps = r.micro;
    engine_config reference = ranked_config(r.where);
    reference.gradient_accumulation_steps = r.micro;
    std::uint64_t seen = 0;
    std::vector<std::uint64_t> all_reduced;  // the all-reduce bytes after each micro-batch
    std::uint64_t one_reduction = 0;         // every whole gradient's all-reduce once
    const compared got =
        train_both(c, reference, 4, 2, /*exact=*/true, r.working, [&](engine_on_rank& e, int, std::uint64_t) {
          const model_layout& layout = e.e->layout();
          EXPECT_EQ(layout.options().world_size, 1U) << "one shard";
          EXPECT_EQ(layout.ranks(), e.size()) << "held by every rank";
          communicator& g = e.e->resources().gradient_comm();
          const comm_stats now = g.stats();
          EXPECT_EQ(now.of(collective::reduce_scatter).total(), 0U);
          EXPECT_EQ(now.total_bytes(), now.of(collective::all_reduce).total()) << "nothing but the all-reduces";
          EXPECT_EQ(total_stats(e.e->resources().comm()).total_bytes(), 0U) << "the coordinator gathers nothing";
          all_reduced.push_back(now.of(collective::all_reduce).total() - seen);
          seen = now.of(collective::all_reduce).total();
          if (one_reduction > 0 || g.size() == 1) return;
          for (const parameter_layout& p : layout.parameters()) {
            for (std::size_t dest = 0; dest < g.size(); ++dest) {
              one_reduction += bytes_to(collective::all_reduce, g.size(), g.rank(), dest,
                                        p.shard_numel * kernels::dtype_size(p.dtype), 0, kernels::dtype_size(p.dtype));
            }
          }
        });
    ASSERT_EQ(all_reduced.size(), 2 * r.micro);
    for (std::size_t i = 0; i < all_reduced.size(); ++i) {
      const bool last = i % r.micro == r.micro - 1;
      EXPECT_EQ(all_reduced[i], last ? one_reduction : 0)
          << "micro-batch " << i % r.micro << " of step " << i / r.micro;
    }
    for (std::size_t p = 0; p < got.ranked.size(); ++p) EXPECT_EQ(got.ranked[p], got.reference[p]) << "parameter " << p;
  }
}

// A stage-0 checkpoint is rank 0's replica, written with no transfers between the ranks; it loads
// into stage 0 on every rank and into one rank's stage 3 alike.
TEST(engine_ranks, StageZeroSavesRankZerosReplicaAndLoadsOnEveryRank) {
  const std::filesystem::path root = shared_swap_path() / "stage0-checkpoint";
  engine_on_rank trained(ranked_config("host", 0));
  testing::run_micro_batch(*trained.e, *trained.dev,
                           mean_gradient(trained.e->layout(), 0, trained.rank(), 1, /*exact=*/true));
  (void)trained.e->step(1e-2);
  const grads_t want = trained.masters();
  communicator& g = trained.e->resources().gradient_comm();
  const std::uint64_t sent_before = g.stats().of(collective::point_to_point).total();
  const std::string tag = trained.e->save_checkpoint(root);
  EXPECT_EQ(g.stats().of(collective::point_to_point).total(), sent_before) << "no rank sends its replica";

  engine_on_rank replicas(ranked_config("nvme", 0));
  replicas.e->load_checkpoint(root, tag);
  EXPECT_EQ(replicas.masters(), want) << "rank " << replicas.rank();
  engine_on_rank one(ranked_config("device"), /*single=*/true);
  one.e->load_checkpoint(root, tag);
  EXPECT_EQ(one.masters(), want) << "rank " << replicas.rank();
}

TEST(engine_ranks, AnInfOnOneRankSkipsTheStepOnEveryRank) {
  engine_on_rank ranked(ranked_config("host"));
  const grads_t before = ranked.masters();
  grads_t g = mean_gradient(ranked.e->layout(), 0, ranked.rank(), 1, false);
  // Only the last rank sees the inf, in an element another rank owns at world size > 1 (the
  // first element of the first parameter is in rank 0's shard).
  if (ranked.rank() + 1 == ranked.size()) g[0][0] = std::numeric_limits<float>::infinity();
  testing::run_micro_batch(*ranked.e, *ranked.dev, g);
  const step_result r = ranked.e->step(1e-2);
  EXPECT_TRUE(r.skipped) << "rank " << ranked.rank();
  EXPECT_EQ(r.optimizer_steps, 0);
  EXPECT_EQ(ranked.masters(), before) << "rank " << ranked.rank();
}

TEST(engine_ranks, ReadStateGathersEveryRanksShard) {
  engine_on_rank ranked(ranked_config("split"));
  for (const parameter_layout& p : ranked.e->layout().parameters()) {
    EXPECT_EQ(p.shard_numel * ranked.size(), p.padded_numel(ranked.size()));
    const std::vector<float> want = engine_on_rank::initial(p);
    EXPECT_EQ(ranked.e->read_state(p.id, state_kind::master), want) << p.name;
    EXPECT_EQ(ranked.e->read_state(p.id, state_kind::working), want) << p.name;
  }
}

TEST(engine_ranks, StatisticsCountTheTrafficOfEveryGroup) {
  // 4 ranks run as 2 "nodes" of 2, so both kinds of traffic show; fewer share one node.
  engine_config c = ranked_config("device");
  const bool two_nodes = world_is_one_of({4});
  if (two_nodes) c.zoe.ranks_per_node = 2;
  engine_on_rank ranked(c);
  testing::run_micro_batch(*ranked.e, *ranked.dev, mean_gradient(ranked.e->layout(), 0, ranked.rank(), 1, false));
  (void)ranked.e->step(1e-2);
  const nlohmann::json s = nlohmann::json::parse(statistics_json(*ranked.e));
  const nlohmann::json& comm = s.at("comm");
  EXPECT_EQ(comm.at("world_size"), ranked.size());
  EXPECT_EQ(comm.at("rank"), ranked.rank());
  EXPECT_GT(comm.at("calls").get<std::uint64_t>(), 0u);
  const nlohmann::json& groups = comm.at("groups");
  const auto bytes = [](const nlohmann::json& g, const char* kind) {
    return g.at(kind).at("intra_node_bytes").get<std::uint64_t>() +
           g.at(kind).at("inter_node_bytes").get<std::uint64_t>();
  };
  if (ranked.size() == 1) {
    EXPECT_EQ(comm.at("intra_node_bytes"), 0u);
    EXPECT_EQ(comm.at("inter_node_bytes"), 0u);
    EXPECT_EQ(groups.at("node_local").at("same_as"), "world");
  } else {
    // The coordinator's gathers on its world, the reductions on the gradient world.
    EXPECT_GT(bytes(groups.at("world"), "all_gather"), 0u);
    EXPECT_GT(bytes(groups.at("gradient_world"), "reduce_scatter"), 0u);
    EXPECT_EQ(bytes(groups.at("world"), "reduce_scatter"), 0u);
    EXPECT_GT(comm.at("intra_node_bytes").get<std::uint64_t>(), 0u);
    if (two_nodes) {
      EXPECT_GT(comm.at("inter_node_bytes").get<std::uint64_t>(), 0u);
    } else {
      EXPECT_EQ(comm.at("inter_node_bytes"), 0u) << "one node: nothing crosses";
    }
  }
}

TEST(engine_ranks, EachRankSwapsIntoItsOwnFolderUnderTheSharedPath) {
  engine_on_rank ranked(ranked_config("nvme"));
  const io::swap_store* store = ranked.e->resources().store();
  ASSERT_NE(store, nullptr);
  const std::filesystem::path folder = store->folders().at(0);
  EXPECT_EQ(folder.parent_path(), shared_swap_path());
  EXPECT_TRUE(folder.filename().string().starts_with("zoe-swap-rank-" + std::to_string(ranked.rank()) + "-")) << folder;
}

}  // namespace
}  // namespace zoe::engine
