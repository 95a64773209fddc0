// The C API fuzz target's entry (fuzz/entries/c_api_entry.cpp) on its seed corpus and on every
// crash input the fuzzer found, under the ordinary builds and the sanitizers.
#include <gtest/gtest.h>

#include "c_api_entry.hpp"
#include "fuzz_inputs.hpp"

namespace zoe::fuzz {
namespace {

class c_api_fuzz_inputs : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(c_api_fuzz_inputs, run_without_a_bug) { (void)run_c_api(read_input(GetParam())); }

INSTANTIATE_TEST_SUITE_P(recorded, c_api_fuzz_inputs, ::testing::ValuesIn(testing::fuzz_inputs("c_api")),
                         testing::fuzz_input_name);

// The corpus's training seed takes optimizer steps: the input format reaches zoe_step.
TEST(c_api_fuzz, training_seed_steps) {
  EXPECT_EQ(run_c_api(read_input(std::filesystem::path(ZOE_FUZZ_DIR) / "corpus/c_api/train_two_steps")),
            outcome::accepted);
}

}  // namespace
}  // namespace zoe::fuzz
