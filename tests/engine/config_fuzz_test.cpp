// The config fuzz target's entry (fuzz/entries/config_entry.cpp) on its seed corpus and on every
// crash input the fuzzer found, under the ordinary builds and the sanitizers.
#include <gtest/gtest.h>

#include <string_view>

#include "config_entry.hpp"
#include "fuzz_inputs.hpp"

namespace zoe::fuzz {
namespace {

std::span<const std::uint8_t> bytes_of(std::string_view text) {
  return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};  // NOLINT(*-reinterpret-cast)
}

class config_fuzz_inputs : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(config_fuzz_inputs, run_without_a_bug) { (void)run_config(read_input(GetParam())); }

INSTANTIATE_TEST_SUITE_P(recorded, config_fuzz_inputs, ::testing::ValuesIn(testing::fuzz_inputs("config")),
                         testing::fuzz_input_name);

// The entry reaches the footprint plan for a configuration zoe accepts, and stops at the parser
// for one it refuses: the corpus exercises the whole path.
TEST(config_fuzz, accepted_configuration_is_planned) {
  EXPECT_EQ(run_config(bytes_of(R"({"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}})")),
            outcome::accepted);
  EXPECT_EQ(run_config(bytes_of(R"({"zero_optimization": {"stage": 9}})")), outcome::refused);
  EXPECT_EQ(run_config(bytes_of("{\"zero_optimization\": ")), outcome::refused);
}

}  // namespace
}  // namespace zoe::fuzz
