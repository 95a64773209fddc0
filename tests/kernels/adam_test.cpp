#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <optional>
#include <tuple>

#include <tbb/task_arena.h>
#include <tbb/task_scheduler_observer.h>

#include "kernel_test_support.hpp"
#include "zoe/core/error.hpp"
#include "zoe/kernels/adam.hpp"
#include "zoe/kernels/cast.hpp"

namespace zoe::kernels {
namespace {

constexpr int steps = 100;
constexpr std::size_t elements = 10007;  // not a multiple of any vector width: tails are exercised

struct adam_case {
  float lr;
  float weight_decay;
  bool adamw;
  dtype grad;
  std::optional<dtype> working;
};

std::string case_name(const adam_case& c) {
  std::string s = "lr" + std::string(c.lr > 1e-4f ? "1em3" : "1em5") + (c.weight_decay > 0 ? "_wd" : "_nowd") +
                  (c.adamw ? "_adamw" : "_adam") + "_grad" + std::string(dtype_name(c.grad)) + "_work" +
                  (c.working ? std::string(dtype_name(*c.working)) : "none");
  return s;
}

// The full state of one shard, stepped by the library on one path.
struct shard_state {
  std::vector<float> params, exp_avg, exp_avg_sq;
  std::vector<std::byte> working;

  shard_state(const std::vector<float>& initial, const adam_case& c)
      : params(initial), exp_avg(initial.size()), exp_avg_sq(initial.size()) {
    if (c.working) working.resize(initial.size() * dtype_size(*c.working));
  }

  void step(const adam_config& config, const adam_case& c, const std::vector<std::byte>& grad,
            thread_budget budget = {}) {
    if (!working.empty()) test::poison(working.data(), working.size());
    adam_shard shard{params, exp_avg, exp_avg_sq, const_tensor_view{c.grad, grad.data(), params.size()}, std::nullopt};
    if (c.working) shard.working = tensor_view{*c.working, working.data(), params.size()};
    adam_step(config, shard, budget);
  }

  // The index of the first differing byte of any state, or -1.
  [[nodiscard]] long first_difference(const shard_state& o) const {
    const std::size_t bytes = params.size() * 4;
    for (const auto& [a, b, n] :
         {std::tuple{params.data(), o.params.data(), bytes}, std::tuple{exp_avg.data(), o.exp_avg.data(), bytes},
          std::tuple{exp_avg_sq.data(), o.exp_avg_sq.data(), bytes}}) {
      if (const long at = test::first_difference(a, b, n); at != -1) return at;
    }
    return test::first_difference(working.data(), o.working.data(), working.size());
  }
};

adam_config config_for(const adam_case& c, int step) {
  adam_config config;
  config.lr = c.lr;
  config.weight_decay = c.weight_decay;
  config.adamw = c.adamw;
  config.step = step;
  config.grad_scale = 0.5f;  // e.g. loss scale 2, no clipping
  return config;
}

class adam_paths : public ::testing::TestWithParam<std::tuple<cpu_path, adam_case>> {};

TEST_P(adam_paths, HundredStepsBitIdenticalToScalar) {
  const auto [path, c] = GetParam();
  auto rng = test::rng_for_test();
  const std::vector<float> initial = test::normal_values(rng, elements, 0.5f);
  shard_state scalar(initial, c);
  shard_state simd(initial, c);
  for (int t = 1; t <= steps; ++t) {
    // Gradients vary over four decades, so some moments are tiny and others large.
    std::vector<float> g = test::normal_values(rng, elements, 1.0f);
    for (std::size_t i = 0; i < g.size(); i += 3) g[i] *= 1e-3f;
    const std::vector<std::byte> grad = test::encode(g, c.grad);
    {
      const test::path_guard p(cpu_path::scalar);
      scalar.step(config_for(c, t), c, grad);
    }
    {
      const test::path_guard p(path);
      simd.step(config_for(c, t), c, grad);
    }
    ASSERT_EQ(test::first_difference(scalar.params.data(), simd.params.data(), elements * 4), -1) << "step " << t;
    ASSERT_EQ(test::first_difference(scalar.exp_avg.data(), simd.exp_avg.data(), elements * 4), -1) << "step " << t;
    ASSERT_EQ(test::first_difference(scalar.exp_avg_sq.data(), simd.exp_avg_sq.data(), elements * 4), -1)
        << "step " << t;
    ASSERT_EQ(test::first_difference(scalar.working.data(), simd.working.data(), scalar.working.size()), -1)
        << "step " << t;
  }
  EXPECT_NE(test::first_difference(initial.data(), simd.params.data(), elements * 4), -1) << "nothing moved";
}

const adam_case identity_cases[] = {
    {1e-3f, 0.0f, true, dtype::fp32, std::nullopt},  {1e-3f, 0.01f, true, dtype::fp16, dtype::fp16},
    {1e-3f, 0.01f, false, dtype::bf16, dtype::bf16}, {1e-5f, 0.0f, true, dtype::fp16, dtype::bf16},
    {1e-5f, 0.01f, true, dtype::fp32, dtype::fp16},  {1e-5f, 0.1f, false, dtype::fp32, std::nullopt},
    {1e-3f, 0.0f, false, dtype::bf16, dtype::fp16},  {1e-5f, 0.0f, true, dtype::bf16, std::nullopt},
};

INSTANTIATE_TEST_SUITE_P(kernels, adam_paths,
                         ::testing::Combine(::testing::ValuesIn(test::simd_paths()),
                                            ::testing::ValuesIn(identity_cases)),
                         [](const auto& param_info) {
                           return std::string(cpu_path_name(std::get<0>(param_info.param))) + "_" +
                                  case_name(std::get<1>(param_info.param));
                         });

// The thread budget changes who computes, never what: budgets 1 and 2 give the default's bits, on
// a shard long enough to split into pieces, on every path.
TEST(adam, EveryThreadBudgetGivesTheSameBits) {
  constexpr std::size_t n = (std::size_t{1} << 18) + 7;  // four pieces and a ragged end
  const adam_case c{1e-3f, 0.01f, true, dtype::fp16, dtype::bf16};
  auto rng = test::rng_for_test();
  const std::vector<float> initial = test::normal_values(rng, n, 0.5f);
  const std::vector<std::byte> grad = test::encode(test::normal_values(rng, n, 1.0f), c.grad);
  // Four threads, whatever the machine, so a budget of 2 is a real limit.
  test::on_threads(4, [&] {
    for (const cpu_path path : available_cpu_paths()) {
      const test::path_guard p(path);
      shard_state by_default(initial, c);
      shard_state one(initial, c);
      shard_state two(initial, c);
      for (int t = 1; t <= 3; ++t) {
        by_default.step(config_for(c, t), c, grad);
        one.step(config_for(c, t), c, grad, {.max_threads = 1});
        two.step(config_for(c, t), c, grad, {.max_threads = 2});
        ASSERT_EQ(one.first_difference(by_default), -1) << cpu_path_name(path) << " budget 1, step " << t;
        ASSERT_EQ(two.first_difference(by_default), -1) << cpu_path_name(path) << " budget 2, step " << t;
      }
    }
  });
}

// Counts the worker threads that join one arena.
class worker_counter : public tbb::task_scheduler_observer {
 public:
  explicit worker_counter(tbb::task_arena& arena) : tbb::task_scheduler_observer(arena) { observe(true); }
  ~worker_counter() override { observe(false); }
  worker_counter(const worker_counter&) = delete;
  worker_counter& operator=(const worker_counter&) = delete;
  void on_scheduler_entry(bool is_worker) override {
    if (is_worker) ++workers;
  }
  std::atomic<int> workers{0};
};

// A budget of 1 keeps TBB out: called from inside an arena that has a worker to spare, no worker
// joins it (a parallel loop there would hand the worker pieces).
TEST(adam, ABudgetOfOneRunsOnTheCallingThreadAlone) {
  constexpr std::size_t n = std::size_t{1} << 20;  // sixteen pieces, were it split
  const adam_case c{1e-3f, 0.0f, true, dtype::fp32, std::nullopt};
  auto rng = test::rng_for_test();
  shard_state state(test::normal_values(rng, n, 0.5f), c);
  const std::vector<std::byte> grad = test::encode(test::normal_values(rng, n, 1.0f), c.grad);
  tbb::task_arena arena(2);
  arena.initialize();
  const worker_counter counter(arena);
  arena.execute([&] {
    for (int t = 1; t <= 5; ++t) state.step(config_for(c, t), c, grad, {.max_threads = 1});
  });
  EXPECT_EQ(counter.workers.load(), 0) << "a TBB worker took part in an adam_step with a budget of 1";
}

// Long ranges write the 16-bit working copy with streaming stores after an element-wise head up to
// the store alignment: the bits must not change, whatever the alignment of the working copy.
TEST(adam, LongShardsBitIdenticalToScalarWhateverTheWorkingCopyAlignment) {
  constexpr std::size_t n = (std::size_t{1} << 20) + 4099;  // ranges past the streaming threshold, ragged
  auto rng = test::rng_for_test();
  const std::vector<float> initial = test::normal_values(rng, n, 0.5f);
  const std::vector<std::byte> grad = test::encode(test::normal_values(rng, n, 1.0f), dtype::fp32);
  // Two threads, whatever the machine: each piece stays long enough to be streamed.
  test::on_threads(2, [&] {
    for (const cpu_path path : test::simd_paths()) {
      for (const dtype w : {dtype::fp16, dtype::bf16}) {
        for (const std::size_t shift : {std::size_t{0}, std::size_t{1}, std::size_t{7}}) {
          std::vector<float> out_params[2], out_m[2], out_v[2];
          std::vector<std::byte> out_working[2];
          for (int run = 0; run < 2; ++run) {
            const test::path_guard p(run == 0 ? cpu_path::scalar : path);
            std::vector<float> params(initial), m(n, 0.0f), v(n, 0.0f);
            std::vector<std::byte> working((n + shift) * 2);
            for (int t = 1; t <= 2; ++t) {
              test::poison(working.data(), working.size());
              adam_shard shard{params, m, v, const_tensor_view{dtype::fp32, grad.data(), n},
                               tensor_view{w, working.data() + shift * 2, n}};
              adam_config config;
              config.step = t;
              config.weight_decay = 0.01f;
              adam_step(config, shard);
            }
            out_params[run] = params;
            out_m[run] = m;
            out_v[run] = v;
            out_working[run].assign(working.begin() + static_cast<std::ptrdiff_t>(shift * 2), working.end());
          }
          const std::string where =
              std::string(cpu_path_name(path)) + " " + std::string(dtype_name(w)) + " shift " + std::to_string(shift);
          ASSERT_EQ(test::first_difference(out_params[0].data(), out_params[1].data(), n * 4), -1) << where;
          ASSERT_EQ(test::first_difference(out_m[0].data(), out_m[1].data(), n * 4), -1) << where;
          ASSERT_EQ(test::first_difference(out_v[0].data(), out_v[1].data(), n * 4), -1) << where;
          ASSERT_EQ(test::first_difference(out_working[0].data(), out_working[1].data(), n * 2), -1) << where;
        }
      }
    }
  });
}

// Every binary16 value as a gradient, widened in the SIMD vector body (65536 elements, a multiple
// of every vector width): infinities, NaNs of every payload and subnormals step the state to the
// same bits as on the scalar path.
TEST(adam, EveryHalfGradientStepsBitIdenticalToScalar) {
  constexpr std::size_t n = 0x10000;
  std::vector<std::uint16_t> halves(n);
  for (std::size_t h = 0; h < n; ++h) halves[h] = static_cast<std::uint16_t>(h);
  auto rng = test::rng_for_test();
  const std::vector<float> initial = test::normal_values(rng, n, 0.5f);
  const adam_case c{1e-3f, 0.01f, false, dtype::fp16, dtype::fp16};
  std::vector<std::byte> grad(n * 2);
  std::memcpy(grad.data(), halves.data(), grad.size());
  shard_state expected(initial, c);
  {
    const test::path_guard p(cpu_path::scalar);
    expected.step(config_for(c, 1), c, grad);
  }
  for (const cpu_path path : test::simd_paths()) {
    const test::path_guard p(path);
    shard_state got(initial, c);
    got.step(config_for(c, 1), c, grad);
    const std::string where(cpu_path_name(path));
    EXPECT_EQ(test::first_difference(expected.params.data(), got.params.data(), n * 4), -1) << where;
    EXPECT_EQ(test::first_difference(expected.exp_avg.data(), got.exp_avg.data(), n * 4), -1) << where;
    EXPECT_EQ(test::first_difference(expected.exp_avg_sq.data(), got.exp_avg_sq.data(), n * 4), -1) << where;
    EXPECT_EQ(test::first_difference(expected.working.data(), got.working.data(), n * 2), -1) << where;
  }
}

class adam_reference : public ::testing::TestWithParam<adam_case> {};

// The scalar path against the same algorithm in float64 from the same inputs. fp32 rounds each
// step, so the allowed gap grows with the step count: half an ulp of the weight per step, plus a
// relative error on the update itself.
TEST_P(adam_reference, ScalarPathTracksFloat64WithinAStepGrowingBound) {
  const adam_case c = GetParam();
  auto rng = test::rng_for_test();
  const std::vector<float> initial = test::normal_values(rng, elements, 0.5f);
  shard_state state(initial, c);
  std::vector<double> p(initial.begin(), initial.end()), m(elements, 0.0), v(elements, 0.0);
  const double b1 = 0.9, b2 = 0.999, eps = 1e-8, lr = c.lr, wd = c.weight_decay;
  const test::path_guard scalar(cpu_path::scalar);
  double worst_ratio = 0;
  for (int t = 1; t <= steps; ++t) {
    const std::vector<std::byte> grad = test::encode(test::normal_values(rng, elements, 1.0f), c.grad);
    const std::vector<float> g = test::decode(grad, c.grad);
    state.step(config_for(c, t), c, grad);
    const double bc1 = 1.0 - std::pow(b1, t);
    const double bc2 = 1.0 - std::pow(b2, t);
    for (std::size_t i = 0; i < elements; ++i) {
      double gi = 0.5 * g[i];
      if (!c.adamw) gi += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double update = lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + eps);
      p[i] = p[i] - (c.adamw ? lr * wd * p[i] : 0.0) - update;
      const double bound = t * (std::ldexp(std::abs(p[i]), -24) + 1e-5 * lr);
      const double gap = std::abs(static_cast<double>(state.params[i]) - p[i]);
      worst_ratio = std::max(worst_ratio, gap / bound);
      ASSERT_LE(gap, bound) << "step " << t << " element " << i;
    }
    if (c.working) {
      const std::vector<float> w = test::decode(state.working, *c.working);
      for (std::size_t i = 0; i < elements; ++i) {
        const std::uint16_t expected =
            *c.working == dtype::bf16 ? bf16_from_float(state.params[i]) : fp16_from_float(state.params[i]);
        ASSERT_EQ(test::bits_of(w[i]),
                  test::bits_of(*c.working == dtype::bf16 ? float_from_bf16(expected) : float_from_fp16(expected)))
            << "working copy, step " << t << " element " << i;
      }
    }
  }
  RecordProperty("worst_gap_over_bound", std::to_string(worst_ratio));
}

const adam_case reference_cases[] = {
    {1e-3f, 0.0f, true, dtype::fp32, dtype::fp16},   {1e-3f, 0.01f, true, dtype::fp32, std::nullopt},
    {1e-5f, 0.0f, true, dtype::fp16, dtype::bf16},   {1e-5f, 0.01f, true, dtype::bf16, std::nullopt},
    {1e-3f, 0.01f, false, dtype::fp32, dtype::bf16}, {1e-5f, 0.01f, false, dtype::fp16, std::nullopt},
};

INSTANTIATE_TEST_SUITE_P(kernels, adam_reference, ::testing::ValuesIn(reference_cases),
                         [](const auto& param_info) { return case_name(param_info.param); });

TEST(adam, RejectsBadShapesAndSettingsNamingThem) {
  std::vector<float> p(8, 1.0f), m(8), v(7), g(8, 1.0f);
  adam_shard shard{p, m, v, view(std::span<const float>(g)), std::nullopt};
  try {
    adam_step({}, shard);
    FAIL() << "accepted 7 exp_avg_sq elements for 8 params";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("exp_avg_sq"), std::string::npos) << e.what();
  }
  v.resize(8);
  shard.exp_avg_sq = v;
  adam_config bad;
  bad.step = 0;
  EXPECT_THROW(adam_step(bad, shard), usage_error);
  bad = {};
  bad.beta2 = 1.0f;
  EXPECT_THROW(adam_step(bad, shard), usage_error);
  std::vector<float> fp32_working(8);
  shard.working = view(std::span<float>(fp32_working));
  try {
    adam_step({}, shard);
    FAIL() << "accepted an fp32 working copy";
  } catch (const usage_error& e) {
    EXPECT_NE(std::string(e.what()).find("working"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zoe::kernels
