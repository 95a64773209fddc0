// The order of zoe_module_gradients and zoe_reduce_gradients with gradient buckets sized to the
// largest module (zero_optimization.reduce_bucket_size small, as zoe.torch's tests and example set
// it): a module whose gradients stay acquired while backward goes on (a tied parameter's, which
// torch accumulates only after its last use) leaves no bucket that can drain. zoe_module_gradients
// then fails with ZOE_ERROR_USAGE naming that module instead of waiting for a hand-in that only
// the waiting thread could make (it waited for ever); once the caller hands it in, the refused
// module is acquired and the step equals the one the ordinary order takes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "c_api_rig.hpp"
#include "zoe/zoe.h"

namespace zoe::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A GPT's backward in miniature: the tied embedding "wte" is needed first (by the head) and gets
// its gradient last (after the embedding's backward); the blocks' modules come in between.
std::vector<c_module> tied_model() {
  return {{"wte", {{"wte.weight", {256, 64}}}},
          {"fc1", {{"fc1.weight", {64, 256}}, {"fc1.bias", {256}}}},
          {"fc2", {{"fc2.weight", {256, 64}}, {"fc2.bias", {64}}}},
          {"ln_f", {{"ln_f.weight", {64}}, {"ln_f.bias", {64}}}}};
}
constexpr std::uint64_t largest_module = 64 * 256 + 256;  // fc1's elements
constexpr zoe_module_id wte = 0;

// zoe.torch's sizing (bindings/python/tests/torch_training.py): buckets, prefetch and the live
// parameters sized to the largest module (the live ones at 4x: the tied module stays fetched through
// backward, and each small parameter's gathered copy takes a whole NVMe block), NVMe offload.
c_rig_options torch_sizing(bool overlap_comm) {
  const std::string largest = std::to_string(largest_module);
  return {.placement = "nvme",
          .stage = 3,
          .overrides = R"({"zero_optimization": {"reduce_bucket_size": )" + largest + R"(, "overlap_comm": )" +
                       (overlap_comm ? "true" : "false") + R"(, "allgather_bucket_size": )" + largest +
                       R"(, "stage3_max_live_parameters": )" + std::to_string(4 * largest_module) +
                       R"(, "stage3_prefetch_bucket_size": )" + largest + R"(, "stage3_max_reuse_distance": 0}})"};
}

class gradient_order : public ::testing::TestWithParam<bool> {};

TEST_P(gradient_order, GradientsHeldAcrossBackwardAreRefusedNamingTheModuleNotWaitedForEver) {
  c_rig held(tied_model(), torch_sizing(GetParam()));
  c_rig ordinary(tied_model(), torch_sizing(GetParam()));
  ASSERT_NE(held.engine(), nullptr);
  ASSERT_NE(ordinary.engine(), nullptr);
  const auto grads = held.values(7, 0.05F);

  // zoe.torch's order before the fix: wte's gradients acquired when the head's backward begins,
  // handed in after every other module's.
  held.forward();
  ASSERT_EQ(zoe_fetch(held.engine(), wte, ZOE_PASS_BACKWARD, held.stream()), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(held.hand_in(wte, grads), ZOE_SUCCESS) << zoe_last_error();
  int refused = 0;
  for (zoe_module_id m = 3; m >= 1; --m) {
    ASSERT_EQ(zoe_fetch(held.engine(), m, ZOE_PASS_BACKWARD, held.stream()), ZOE_SUCCESS) << zoe_last_error();
    zoe_status st = held.hand_in(m, grads);
    if (st != ZOE_SUCCESS) {
      ++refused;
      EXPECT_EQ(st, ZOE_ERROR_USAGE);
      EXPECT_THAT(std::string(zoe_last_error()), AllOf(HasSubstr("'wte'"), HasSubstr("reduce_bucket_size")));
      // The refusal changed nothing: wte handed in, the refused module's gradients come.
      ASSERT_EQ(zoe_reduce_gradients(held.engine(), wte, held.stream()), ZOE_SUCCESS) << zoe_last_error();
      ASSERT_EQ(zoe_release(held.engine(), wte, held.stream()), ZOE_SUCCESS) << zoe_last_error();
      st = held.hand_in(m, grads);
      ASSERT_EQ(st, ZOE_SUCCESS) << zoe_last_error();
    }
    ASSERT_EQ(zoe_reduce_gradients(held.engine(), m, held.stream()), ZOE_SUCCESS) << zoe_last_error();
    ASSERT_EQ(zoe_release(held.engine(), m, held.stream()), ZOE_SUCCESS) << zoe_last_error();
  }
  EXPECT_EQ(refused, 1) << "the buckets hold the largest module once: one acquisition finds none to drain";
  ASSERT_EQ(zoe_end_micro_batch(held.engine()), ZOE_SUCCESS) << zoe_last_error();

  ordinary.micro_batch(grads);
  EXPECT_EQ(held.step(0.01).grad_norm, ordinary.step(0.01).grad_norm);
  for (zoe_parameter_id p = 0; p < grads.size(); ++p) {
    EXPECT_EQ(held.read(p, ZOE_STATE_PARAMETER), ordinary.read(p, ZOE_STATE_PARAMETER)) << "parameter " << p;
  }
}

// Handed in right after they are written (zoe.torch's order now), every module's gradients find a
// bucket however small.
TEST_P(gradient_order, GradientsHandedInAtOnceNeedOneBucketOfTheLargestModule) {
  c_rig r(tied_model(), torch_sizing(GetParam()));
  ASSERT_NE(r.engine(), nullptr);
  const auto grads = r.values(7, 0.05F);
  r.forward();
  ASSERT_EQ(zoe_fetch(r.engine(), wte, ZOE_PASS_BACKWARD, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  for (zoe_module_id m = 3; m >= 1; --m) {
    ASSERT_EQ(zoe_fetch(r.engine(), m, ZOE_PASS_BACKWARD, r.stream()), ZOE_SUCCESS) << zoe_last_error();
    ASSERT_EQ(r.hand_in(m, grads), ZOE_SUCCESS) << zoe_last_error();
    ASSERT_EQ(zoe_reduce_gradients(r.engine(), m, r.stream()), ZOE_SUCCESS) << zoe_last_error();
    ASSERT_EQ(zoe_release(r.engine(), m, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  }
  ASSERT_EQ(r.hand_in(wte, grads), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_reduce_gradients(r.engine(), wte, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_release(r.engine(), wte, r.stream()), ZOE_SUCCESS) << zoe_last_error();
  ASSERT_EQ(zoe_end_micro_batch(r.engine()), ZOE_SUCCESS) << zoe_last_error();
  EXPECT_GT(r.step(0.01).grad_norm, 0.0);
}

INSTANTIATE_TEST_SUITE_P(bucket_counts, gradient_order, ::testing::Bool(),
                         [](const auto& p) { return p.param ? "overlap_comm" : "one_bucket"; });

}  // namespace
}  // namespace zoe::testing
