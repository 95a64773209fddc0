// zoe-bench optimizer run as a user runs it: bad flags exit 2 naming the flag, and a tiny model
// prints one JSON line whose figures hang together (bound_s = max(adam_s, rw_s), overlap_efficiency
// = bound_s / step_s, the memcpy fraction with the states in memory).
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "bench_process.hpp"
#include "io_test_support.hpp"

namespace zoe::testing {
namespace {

// 8 tensors of 125000 fp16 elements, each padded to whole 2048-element granules: 126976.
constexpr std::uint64_t tensors = 8;
constexpr std::uint64_t shard_numel = 126'976;
// Adam reads and writes the master and both moments, reads the fp32 gradient, writes the fp16 working copy.
constexpr std::uint64_t step_bytes = tensors * shard_numel * (3 * 4 * 2 + 4 + 2);

class optimizer_command : public ::testing::Test {
 protected:
  std::string nvme() const { return "optimizer --offload nvme --path " + dir_.path().string(); }
  // One round; 64 KiB blocks, so each shard takes several chunks and a step several pieces per tensor.
  static std::string tiny() { return " --steps 1 --params 1M --tensor-size 125k --block-size 64KiB --threads 2"; }
  scratch_dir dir_;
};

nlohmann::json only_json(const run_result& r) {
  const auto lines = json_lines(r.output);
  EXPECT_EQ(lines.size(), 1U) << r.output;
  return lines.empty() ? nlohmann::json::object() : lines.front();
}

void expect_consistent(const nlohmann::json& j) {
  EXPECT_EQ(j.at("bench"), "optimizer");
  for (const char* key : {"step_s", "read_s", "adam_s", "write_s", "rw_s", "bound_s", "overlap_efficiency"}) {
    ASSERT_TRUE(j.contains(key)) << key << ": " << j.dump();
    EXPECT_GE(j.at(key).get<double>(), 0.0) << key;
  }
  EXPECT_GT(j.at("step_s").get<double>(), 0.0) << j.dump();
  EXPECT_GT(j.at("adam_s").get<double>(), 0.0) << j.dump();
  EXPECT_EQ(j.at("bound_s").get<double>(), std::max(j.at("adam_s").get<double>(), j.at("rw_s").get<double>()))
      << j.dump();
  EXPECT_EQ(j.at("overlap_efficiency").get<double>(), j.at("bound_s").get<double>() / j.at("step_s").get<double>())
      << j.dump();
  EXPECT_EQ(j.at("params"), 1'000'000U);
  EXPECT_EQ(j.at("tensors"), tensors);
  EXPECT_EQ(j.at("step_bytes"), step_bytes);
  EXPECT_GT(j.at("pinned_bytes").get<std::uint64_t>(), 0U) << j.dump();
  EXPECT_LE(j.at("pinned_bytes").get<std::uint64_t>(), j.at("planned_pinned_bytes").get<std::uint64_t>());
}

TEST_F(optimizer_command, BadValuesExitTwoNamingTheFlag) {
  for (const auto& [args, flag] :
       std::vector<std::pair<std::string, std::string>>{{" --params 12parsecs", "--params"},
                                                        {" --params 0", "--params"},
                                                        {" --offload disk", "--offload"},
                                                        {" --working gpu", "--working"},
                                                        {" --sub-group-size 0", "--sub-group-size"},
                                                        {" --sub-group-size lots", "--sub-group-size"},
                                                        {" --params 1M --tensor-size 2M", "--tensor-size"},
                                                        {" --steps 0", "--steps"},
                                                        {" --threads 0", "--threads"},
                                                        {" --buffer-count 0", "--buffer-count"},
                                                        {" --block-size 1000", "--block-size"},
                                                        {" --queue-depth 0", "--queue-depth"},
                                                        {" --memcpy-size 0", "--memcpy-size"}}) {
    const auto r = run(nvme() + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find(flag), std::string::npos) << args << ": " << r.output;
  }
  for (const std::string& args :
       {std::string("optimizer --offload nvme"), "optimizer --offload nvme --path " + (dir_ / "nowhere").string()}) {
    const auto r = run(args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find("--path"), std::string::npos) << args << ": " << r.output;
  }
}

TEST_F(optimizer_command, HelpStatesTheDefaultSubGroupAndTheStagesCpuLacks) {
  const auto r = run("optimizer --help");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("1/32 of --params"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("read_s, write_s and rw_s are 0"), std::string::npos) << r.output;
}

TEST_F(optimizer_command, NvmeStatesGiveOneConsistentJsonLine) {
  const auto r = run(nvme() + tiny() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = only_json(r);
  expect_consistent(j);
  EXPECT_EQ(j.at("offload"), "nvme");
  EXPECT_EQ(j.at("working"), "device");
  EXPECT_GT(j.at("read_s").get<double>(), 0.0) << j.dump();
  EXPECT_GT(j.at("write_s").get<double>(), 0.0) << j.dump();
  EXPECT_GT(j.at("rw_s").get<double>(), 0.0) << j.dump();
  // Default: 1M / 32 rounded up to whole 64 KiB chunks of fp16 (32768 elements): one chunk. A
  // sub-group holds whole parameters, so each tensor is a sub-group of its own.
  EXPECT_EQ(j.at("sub_group_size"), 32'768U) << j.dump();
  EXPECT_EQ(j.at("sub_groups"), tensors) << j.dump();
  EXPECT_EQ(j.at("largest_sub_group"), shard_numel) << j.dump();
  // Master and both moments on nvme, each read and written once per step.
  EXPECT_EQ(j.at("nvme_state_bytes"), tensors * shard_numel * 3 * 4);
  EXPECT_EQ(j.at("bytes_read"), j.at("nvme_state_bytes")) << j.dump();
  EXPECT_EQ(j.at("bytes_written"), j.at("nvme_state_bytes")) << j.dump();
  EXPECT_GT(j.at("step_pinned_bytes").get<std::uint64_t>(), 0U) << j.dump();
  EXPECT_FALSE(j.contains("fraction_of_memcpy")) << j.dump();
  // Progress on stderr, one line per round.
  EXPECT_NE(r.output.find("zoe-bench optimizer: round 1/1"), std::string::npos) << r.output;
}

TEST_F(optimizer_command, AGivenSubGroupSizeIsTheOneUsed) {
  // Two tensors per sub-group: one closes once it holds 200000 elements or more.
  const auto r = run(nvme() + tiny() + " --sub-group-size 200k --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = only_json(r);
  EXPECT_EQ(j.at("sub_group_size"), 200'000U) << j.dump();
  EXPECT_EQ(j.at("sub_groups"), tensors / 2) << j.dump();
  EXPECT_EQ(j.at("largest_sub_group"), 2 * shard_numel) << j.dump();
}

TEST_F(optimizer_command, CpuStatesReportZeroIoAndTheMemcpyFraction) {
  // Working copies in pinned host memory too: everything is stepped in place.
  const auto r = run("optimizer --offload cpu --working cpu --memcpy-size 1MiB" + tiny() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = only_json(r);
  expect_consistent(j);
  EXPECT_EQ(j.at("offload"), "cpu");
  EXPECT_EQ(j.at("working"), "cpu");
  for (const char* key : {"read_s", "write_s", "rw_s"}) EXPECT_EQ(j.at(key).get<double>(), 0.0) << key;
  EXPECT_EQ(j.at("bound_s"), j.at("adam_s"));
  EXPECT_EQ(j.at("nvme_state_bytes"), 0U);
  EXPECT_EQ(j.at("bytes_read"), 0U);
  const double step_rate = j.at("step_bytes_per_s").get<double>();
  EXPECT_NEAR(step_rate, static_cast<double>(step_bytes) / j.at("step_s").get<double>(), step_rate * 1e-12);
  EXPECT_GT(j.at("memcpy_bytes_per_s").get<double>(), 0.0) << j.dump();
  EXPECT_EQ(j.at("fraction_of_memcpy").get<double>(), step_rate / j.at("memcpy_bytes_per_s").get<double>());
  EXPECT_EQ(j.at("memcpy").at("pieces"), 2) << j.dump();
}

TEST_F(optimizer_command, ReadableOutputWithoutJson) {
  const auto r = run(nvme() + tiny());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("overlap efficiency"), std::string::npos) << r.output;
  EXPECT_TRUE(json_lines(r.output).empty()) << r.output;
}

}  // namespace
}  // namespace zoe::testing
