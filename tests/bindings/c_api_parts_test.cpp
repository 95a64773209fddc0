// The parts of the C API that need no engine, tested directly: the seeded initializers'
// reproducibility, the handle registry, the translation of exceptions into statuses, and the
// micro-batch state machine's transitions.
#include <cmath>
#include <cstdint>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "handles.hpp"
#include "initializer.hpp"
#include "micro_batch_tracker.hpp"
#include "status.hpp"
#include "zoe/core/error.hpp"

namespace zoe::bindings {
namespace {

// The message of the usage_error `f` throws ("" when it throws none).
template <typename F>
std::string usage_message(F&& f) {
  try {
    f();
  } catch (const usage_error& e) {
    return e.what();
  }
  return "";
}

// ---- initializers ------------------------------------------------------------------------------

TEST(seeded_initializer, EveryPieceEqualsTheSamePieceOfTheWhole) {
  for (const zoe_init init : {ZOE_INIT_UNIFORM, ZOE_INIT_NORMAL}) {
    std::vector<float> whole(1000);
    fill_initial(init, 0.3F, 99, 0, whole);
    for (const std::uint64_t first : {0U, 1U, 17U, 500U, 999U}) {
      std::vector<float> piece(std::min<std::uint64_t>(37, whole.size() - first));
      fill_initial(init, 0.3F, 99, first, piece);
      for (std::size_t j = 0; j < piece.size(); ++j) ASSERT_EQ(piece[j], whole[first + j]) << first + j;
    }
  }
}

TEST(seeded_initializer, UniformStaysInItsHalfOpenIntervalAndCoversIt) {
  std::vector<float> v(100000);
  fill_initial(ZOE_INIT_UNIFORM, 2.0F, 5, 0, v);
  float lo = 2;
  float hi = -2;
  double sum = 0;
  for (const float x : v) {
    ASSERT_GE(x, -2.0F);
    ASSERT_LT(x, 2.0F);
    lo = std::min(lo, x);
    hi = std::max(hi, x);
    sum += x;
  }
  EXPECT_LT(lo, -1.99F);
  EXPECT_GT(hi, 1.99F);
  EXPECT_NEAR(sum / static_cast<double>(v.size()), 0.0, 0.03);  // standard error 2/sqrt(3e5)
}

TEST(seeded_initializer, NormalHasMeanZeroAndTheScaleAsStandardDeviation) {
  std::vector<float> v(100000);
  fill_initial(ZOE_INIT_NORMAL, 0.5F, 11, 0, v);
  double sum = 0;
  double squares = 0;
  for (const float x : v) {
    ASSERT_TRUE(std::isfinite(x));
    sum += x;
    squares += static_cast<double>(x) * x;
  }
  const double n = static_cast<double>(v.size());
  EXPECT_NEAR(sum / n, 0.0, 0.01);                 // standard error 0.5/sqrt(1e5) = 0.0016
  EXPECT_NEAR(std::sqrt(squares / n), 0.5, 0.01);  // relative standard error ~ 1/sqrt(2e5)
}

TEST(seeded_initializer, SeedsGiveDifferentValuesAndZerosAreZero) {
  std::vector<float> a(64);
  std::vector<float> b(64);
  fill_initial(ZOE_INIT_NORMAL, 1.0F, 1, 0, a);
  fill_initial(ZOE_INIT_NORMAL, 1.0F, 2, 0, b);
  EXPECT_NE(a, b);
  fill_initial(ZOE_INIT_ZEROS, 1.0F, 1, 0, a);
  EXPECT_EQ(a, std::vector<float>(64, 0.0F));
}

TEST(seeded_initializer, TheFirstValuesAreSplitmix64sAsDocumented) {
  // splitmix64 seeded with 0: its first output is 0xE220A8397B1DCDAF (Vigna's reference).
  std::vector<float> v(1);
  fill_initial(ZOE_INIT_UNIFORM, 1.0F, 0, 0, v);
  const double u = static_cast<double>(0xE220A8397B1DCDAFULL >> 11) * 0x1.0p-53;
  EXPECT_EQ(v[0], static_cast<float>(2 * u - 1));
}

TEST(seeded_initializer, DataIsRefused) {
  // (An unknown initializer is a value C passes and C++ cannot name: the C test covers it.)
  std::vector<float> v(4);
  EXPECT_NE(usage_message([&] { fill_initial(ZOE_INIT_DATA, 1.0F, 0, 0, v); }).find("ZOE_INIT_DATA"),
            std::string::npos);
}

// ---- statuses ----------------------------------------------------------------------------------

TEST(guarded, TranslatesEachKindOfExceptionAndKeepsTheLastError) {
  EXPECT_EQ(guarded("zoe_a", [] {}), ZOE_SUCCESS);
  EXPECT_EQ(guarded("zoe_b", [] { throw io_error("reading /x at offset 4096", 5); }), ZOE_ERROR_IO);
  EXPECT_STREQ(zoe_last_error(), "zoe_b: reading /x at offset 4096");
  EXPECT_EQ(guarded("zoe_c", [] {}), ZOE_SUCCESS);
  EXPECT_STREQ(zoe_last_error(), "zoe_b: reading /x at offset 4096");  // success leaves it
  EXPECT_EQ(guarded("zoe_d", [] { throw corruption_error("checksum"); }), ZOE_ERROR_CORRUPT);
  EXPECT_EQ(guarded("zoe_e", [] { throw std::bad_alloc(); }), ZOE_ERROR_MEMORY);
  EXPECT_EQ(guarded("zoe_f", [] { throw std::logic_error("bug"); }), ZOE_ERROR_INTERNAL);
  EXPECT_STREQ(zoe_last_error(), "zoe_f: bug");
  EXPECT_EQ(guarded("zoe_g", [] { throw 42; }), ZOE_ERROR_INTERNAL);
  EXPECT_STREQ(zoe_last_error(), "zoe_g: an exception of unknown type");
}

// ---- the handle registry -----------------------------------------------------------------------

TEST(handle_set, KnowsExactlyTheLiveHandles) {
  handle_set set;
  int a = 0;
  int b = 0;
  set.add(&a);
  EXPECT_TRUE(set.contains(&a));
  EXPECT_FALSE(set.contains(&b));
  EXPECT_FALSE(set.remove(&b));
  EXPECT_TRUE(set.remove(&a));
  EXPECT_FALSE(set.contains(&a));
  EXPECT_FALSE(set.remove(&a));
}

TEST(handle_set, AHandleNotLiveIsNamedInTheMessage) {
  int x = 0;
  EXPECT_EQ(usage_message([] { throw_not_live(nullptr, "engine", "zoe_engine"); }), "engine is NULL");
  const std::string m = usage_message([&] { throw_not_live(&x, "stream", "zoe_stream"); });
  EXPECT_NE(m.find("stream handle 0x"), std::string::npos) << m;
  EXPECT_NE(m.find("is not a live zoe_stream (destroyed or never created)"), std::string::npos) << m;
}

// ---- the micro-batch state machine ------------------------------------------------------------

class tracker_test : public ::testing::Test {
 protected:
  micro_batch_tracker t_{{"embed", "head"}, {2, 1}};

  // Runs start+finish of `op` on `m`: "" when allowed, else the refusal's message.
  std::string apply(std::uint32_t m, module_op op) {
    module_op begun = op;
    const std::string refused = usage_message([&] { begun = t_.start(m, op); });
    if (refused.empty()) t_.finish(m, begun, true);
    return refused;
  }
};

TEST_F(tracker_test, AFullMicroBatchPassesAndCountsItsReduces) {
  t_.open();
  for (const std::uint32_t m : {0U, 1U}) {
    EXPECT_EQ(apply(m, module_op::fetch_forward), "");
    EXPECT_EQ(apply(m, module_op::release), "");
  }
  for (const std::uint32_t m : {1U, 0U}) {
    EXPECT_EQ(apply(m, module_op::fetch_backward), "");
    EXPECT_EQ(apply(m, module_op::acquire_gradients), "");
    EXPECT_EQ(apply(m, module_op::reduce_gradients), "");
    EXPECT_EQ(apply(m, module_op::release), "");
  }
  EXPECT_FALSE(t_.any_reduced_in_step());
  t_.expect_can_close();
  t_.close(true);
  EXPECT_TRUE(t_.any_reduced_in_step());
  t_.step_done();
  EXPECT_FALSE(t_.any_reduced_in_step());
}

TEST_F(tracker_test, CallsOutOfOrderAreRefusedNamingTheModule) {
  EXPECT_NE(apply(0, module_op::fetch_backward).find("module 'embed': no micro-batch is open"), std::string::npos);
  EXPECT_NE(apply(0, module_op::acquire_gradients).find("no micro-batch is open"), std::string::npos);
  t_.open();
  EXPECT_NE(apply(2, module_op::fetch_forward).find("module 2 is not a module of this engine (it has 2 modules)"),
            std::string::npos);
  EXPECT_NE(apply(1, module_op::release).find("module 'head' is not fetched"), std::string::npos);
  EXPECT_NE(apply(1, module_op::reduce_gradients).find("were not acquired"), std::string::npos);
  EXPECT_EQ(apply(1, module_op::fetch_forward), "");
  EXPECT_NE(apply(1, module_op::fetch_forward).find("'head' is already fetched (for forward)"), std::string::npos);
  EXPECT_NE(
      apply(1, module_op::acquire_gradients).find("'head' is not fetched for backward (it is fetched for forward)"),
      std::string::npos);
  EXPECT_NE(usage_message([&] { t_.expect_can_close(); }).find("'head' is still fetched"), std::string::npos);
  EXPECT_EQ(apply(1, module_op::release), "");
  EXPECT_EQ(apply(0, module_op::fetch_backward), "");
  EXPECT_EQ(apply(0, module_op::acquire_gradients), "");
  EXPECT_NE(apply(0, module_op::acquire_gradients).find("already acquired"), std::string::npos);
  EXPECT_NE(apply(0, module_op::release).find("acquired and not reduced"), std::string::npos);
  EXPECT_EQ(apply(0, module_op::reduce_gradients), "");
  EXPECT_NE(apply(0, module_op::reduce_gradients).find("already reduced"), std::string::npos);
  EXPECT_EQ(apply(0, module_op::release), "");
  EXPECT_NE(apply(0, module_op::fetch_backward).find("already handed in"), std::string::npos);
  t_.expect_can_close();
}

TEST_F(tracker_test, AForwardFetchOutsideAMicroBatchIsAnInferenceFetchThatKeepsTheEngineFromTraining) {
  EXPECT_EQ(t_.start(1, module_op::fetch_forward), module_op::fetch_inference);
  EXPECT_NE(usage_message([&] { t_.expect_closed(); }).find("module 'head' is fetched for inference"),
            std::string::npos)
      << "a call in progress counts";
  t_.finish(1, module_op::fetch_inference, true);
  EXPECT_NE(usage_message([&] { t_.expect_closed(); }).find("module 'head' is fetched for inference"),
            std::string::npos);
  EXPECT_NE(apply(1, module_op::fetch_forward).find("'head' is already fetched (for inference)"), std::string::npos);
  EXPECT_NE(apply(1, module_op::acquire_gradients).find("no micro-batch is open"), std::string::npos);
  EXPECT_NE(apply(0, module_op::release).find("no micro-batch is open"), std::string::npos)
      << "only a module fetched for inference is released outside a micro-batch";
  EXPECT_EQ(apply(1, module_op::release), "");
  t_.expect_closed();
  t_.open();
  EXPECT_EQ(t_.start(0, module_op::fetch_forward), module_op::fetch_forward) << "inside a micro-batch: training";
  t_.finish(0, module_op::fetch_forward, false);
}

TEST_F(tracker_test, ABackwardFetchReleasedWithoutGradientsKeepsTheMicroBatchOpen) {
  t_.open();
  EXPECT_EQ(apply(1, module_op::fetch_backward), "");
  EXPECT_EQ(apply(1, module_op::release), "");
  EXPECT_NE(usage_message([&] { t_.expect_can_close(); }).find("'head' was fetched for backward"), std::string::npos);
  EXPECT_EQ(apply(1, module_op::fetch_backward), "");
  EXPECT_EQ(apply(1, module_op::acquire_gradients), "");
  EXPECT_EQ(apply(1, module_op::reduce_gradients), "");
  EXPECT_EQ(apply(1, module_op::release), "");
  t_.expect_can_close();
}

TEST_F(tracker_test, AModuleIsBusyDuringACallAndAFailedCallChangesNothing) {
  t_.open();
  t_.start(0, module_op::fetch_forward);
  EXPECT_NE(apply(0, module_op::fetch_forward).find("in progress on another thread"), std::string::npos);
  EXPECT_EQ(apply(1, module_op::fetch_forward), "");  // another module is free
  t_.finish(0, module_op::fetch_forward, false);      // the engine refused: still not fetched
  EXPECT_NE(apply(0, module_op::release).find("'embed' is not fetched"), std::string::npos);
  EXPECT_EQ(apply(0, module_op::fetch_forward), "");
}

TEST_F(tracker_test, OpeningAgainStartsEveryModuleAfresh) {
  t_.open();
  EXPECT_EQ(apply(1, module_op::fetch_backward), "");
  EXPECT_EQ(apply(1, module_op::acquire_gradients), "");
  EXPECT_EQ(apply(1, module_op::reduce_gradients), "");
  EXPECT_EQ(apply(1, module_op::release), "");
  t_.close(false);  // a failed end: not counted
  EXPECT_FALSE(t_.any_reduced_in_step());
  EXPECT_NE(usage_message([&] { t_.expect_open(); }).find("no micro-batch is open"), std::string::npos);
  t_.open();
  EXPECT_NE(usage_message([&] { t_.expect_closed(); }).find("a micro-batch is open"), std::string::npos);
  EXPECT_EQ(apply(1, module_op::fetch_backward), "");
  EXPECT_EQ(apply(1, module_op::acquire_gradients), "");
}

}  // namespace
}  // namespace zoe::bindings
