// zoe-bench params run as a user runs it: bad flags exit 2 naming the flag, and a small run prints
// one JSON line with the figures the issue asks for, within the footprint plan.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bench_process.hpp"
#include "io_test_support.hpp"

namespace zoe::testing {
namespace {

class params_command : public ::testing::Test {
 protected:
  std::string base() const { return "params --path " + dir_.path().string() + " --steps 1"; }
  scratch_dir dir_;
};

TEST_F(params_command, BadValuesExitTwoNamingTheFlag) {
  for (const auto& [args, flag] :
       std::vector<std::pair<std::string, std::string>>{{" --params 12parsecs", "--params"},
                                                        {" --params 3 --layers 4", "--params"},
                                                        {" --layers 0", "--layers"},
                                                        {" --compute-ms -1", "--compute-ms"},
                                                        {" --dtype fp8", "--dtype"},
                                                        {" --block-size 1000", "--block-size"},
                                                        {" --queue-depth 0", "--queue-depth"}}) {
    const auto r = run(base() + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find(flag), std::string::npos) << args << ": " << r.output;
  }
  const auto missing = run("params --path " + (dir_ / "nowhere").string());
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("--path"), std::string::npos) << missing.output;
}

TEST_F(params_command, PrintsOneJsonLineWithinThePlan) {
  const auto r = run(base() + " --params 4M --layers 4 --buffer-count 2 --buffer-size 1000000 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lines = json_lines(r.output);
  ASSERT_EQ(lines.size(), 1U) << r.output;
  const nlohmann::json& j = lines[0];
  EXPECT_EQ(j["bench"], "params");
  for (const char* key : {"swap_in_gib_per_s", "io_gib_per_s", "wait_fraction", "compute_ms", "raw_layer_ms"}) {
    ASSERT_TRUE(j.contains(key)) << key;
    EXPECT_GE(j[key].get<double>(), 0.0) << key;
  }
  EXPECT_GT(j["swap_in_gib_per_s"].get<double>(), 0.0);
  EXPECT_LE(j["wait_fraction"].get<double>(), 1.0);
  // The compute defaults to 1.5x the raw read of one layer, measured in the run.
  EXPECT_DOUBLE_EQ(j["compute_ms"].get<double>(), 1.5 * j["raw_layer_ms"].get<double>());
  EXPECT_LE(j["peak_pinned_bytes"].get<std::uint64_t>(), j["planned_pinned_bytes"].get<std::uint64_t>());
  EXPECT_GT(j["peak_pinned_bytes"].get<std::uint64_t>(), 0U);
  EXPECT_LE(j["peak_device_bytes"].get<std::uint64_t>(), j["device_budget_bytes"].get<std::uint64_t>());
  // 16 fp16 tensors of 250000 elements, each padded to whole 4 KiB granules of 2048 elements.
  EXPECT_EQ(j["bytes_per_step"].get<std::uint64_t>(), 16U * 251'904 * 2);
}

TEST_F(params_command, ReadableOutputWithoutJson) {
  const auto r = run(base() + " --params 1M --layers 2 --compute-ms 0 --buffer-count 2 --buffer-size 1000000");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("swap-in"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("raw reads"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace zoe::testing
