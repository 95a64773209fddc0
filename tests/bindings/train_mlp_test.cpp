// zoe-train-mlp run as a user runs it: its flags, that offloading does not change the math (the
// loss of every step equals --reference's), and that a run killed with SIGKILL after or during a
// checkpoint resumes to exactly the losses of an uninterrupted run. Small models: seconds a case.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "child_process.hpp"
#include "io_test_support.hpp"
#include "train_mlp_child.hpp"
#include "train_mlp_support.hpp"

namespace zoe::testing {
namespace {

// The flags --help lists (its lines "  --flag ..."), read from the binary's own text.
std::vector<std::string> flags_in_help(const std::string& help) {
  std::vector<std::string> out;
  const std::regex flag_line(R"(^  (--[a-z][a-z-]*))");
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, flag_line)) out.push_back(m[1]);
  }
  return out;
}

// --help against the program itself, not against a copy of its text: every flag it lists is one
// the parser knows, and every field of the --json lines a real run prints is defined in it.
TEST(TrainMlp, HelpExitsZeroAndDefinesEveryFlagAndField) {
  const run_result help = run("--help");
  EXPECT_EQ(help.exit_code, 0);
  const std::vector<std::string> flags = flags_in_help(help.output);
  EXPECT_GE(flags.size(), 10U) << help.output;
  for (const std::string& flag : flags) {
    // "1" is the value of a flag that takes one (the trailing --help then stops the run) and an
    // unknown flag of its own after one that takes none: either way the flag itself is known.
    const run_result r = run(flag + " 1 --help");
    EXPECT_EQ(r.output.find(flag + ": unknown flag"), std::string::npos) << flag << ": " << r.output;
  }

  const scratch_dir dir;
  const run_result trained = run(small_model + " --steps 1 --json --dir " + dir.path().string());
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::vector<nlohmann::json> lines = json_lines(trained.output);
  ASSERT_EQ(lines.size(), 2U) << trained.output;  // the step's line and the final one
  for (const nlohmann::json& line : lines) {
    for (const auto& [key, value] : line.items()) {
      EXPECT_NE(help.output.find(key), std::string::npos) << "the --json field " << key << " is not in --help";
    }
  }
  // What a user must learn from it: where the swap files go, why tmpfs is refused, how to run it
  // on many ranks.
  for (const char* fact : {"DIR/swap", "DIR/rank-<r>", "DIR/checkpoints", "tmpfs", "mpirun"}) {
    EXPECT_NE(help.output.find(fact), std::string::npos) << fact;
  }
}

TEST(TrainMlp, BadFlagsExitTwoNamingTheFlag) {
  const std::vector<std::pair<std::string, std::string>> cases = {{"--hidden 0", "--hidden"},
                                                                  {"--layers x", "--layers"},
                                                                  {"--batch -3", "--batch"},
                                                                  {"--bogus", "--bogus"},
                                                                  {"--steps", "--steps"},
                                                                  {"--lr nan", "--lr"},
                                                                  {"--device tpu", "--device"},
                                                                  {"--resume", "--resume"},
                                                                  {"--batch 9 --micro-batches 2", "--batch"},
                                                                  {"--blas-threads 0", "--blas-threads"},
                                                                  {"--ranks-per-node 0", "--ranks-per-node"}};
  for (const auto& [flags, name] : cases) {
    const run_result r = run(flags);
    EXPECT_EQ(r.exit_code, 2) << flags;
    EXPECT_NE(r.output.find(name), std::string::npos) << flags << ": " << r.output;
  }
}

// Offloading changes no arithmetic: every step's loss equals the in-memory reference's within
// 1e-6 relative, with one micro-batch a step and with two (the gradients summed, then averaged).
TEST(TrainMlp, LossEqualsTheReferenceAtEveryStep) {
  for (const char* micro : {"1", "2"}) {
    const scratch_dir dir;
    const std::string flags = small_model + " --steps 5 --json --micro-batches " + micro;
    const run_result offloaded = run(flags + " --dir " + dir.path().string());
    const run_result reference = run(flags + " --reference");
    ASSERT_EQ(offloaded.exit_code, 0) << offloaded.output;
    ASSERT_EQ(reference.exit_code, 0) << reference.output;
    const auto a = steps_of(offloaded.output);
    const auto b = steps_of(reference.output);
    ASSERT_EQ(a.size(), 5U) << offloaded.output;
    ASSERT_EQ(b.size(), 5U) << reference.output;
    SCOPED_TRACE(std::string("micro-batches ") + micro);
    expect_losses_match(a, b, 1e-6);
    // The final line: the device held no more than its budget.
    const std::vector<nlohmann::json> lines = json_lines(offloaded.output);
    ASSERT_FALSE(lines.empty());
    const nlohmann::json& summary = lines.back();
    ASSERT_TRUE(summary.contains("peak_device_bytes")) << summary.dump();
    EXPECT_LE(summary["peak_device_bytes"].get<std::uint64_t>(), summary["device_budget_bytes"].get<std::uint64_t>());
    for (const char* key : {"model_state_bytes", "step_s", "compute_s", "param_io_s", "adam_s", "optimizer_io_s",
                            "bound_s", "peak_rss_bytes", "statistics"}) {
      EXPECT_TRUE(summary.contains(key)) << key;
    }
    // One rank: nothing crosses to another.
    EXPECT_EQ(summary["world_size"], 1);
    EXPECT_EQ(summary["ranks_per_node"], 1);
    EXPECT_EQ(summary["inter_node_bytes_per_step"], 0);
    EXPECT_EQ(summary["intra_node_bytes_per_step"], 0);
  }
}

// The final line puts the step beside what bounds it: io_s is the step's NVMe bytes replayed alone
// through the raw I/O engine, the faster of reads and writes at once and one direction after the
// other (so it may be below either part timed alone through the swap store), floor_s the larger of compute and I/O, and
// the bytes a step moved, by zoe's count and the kernel's. Relations between the figures, not their values: the values
// are timings.
TEST(TrainMlp, FinalLineCarriesTheFloorAndTheBytesPerStep) {
  const scratch_dir dir;
  const run_result r = run(small_model + " --steps 3 --json --dir " + dir.path().string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<nlohmann::json> lines = json_lines(r.output);
  ASSERT_FALSE(lines.empty());
  const nlohmann::json& s = lines.back();
  for (const char* key : {"io_s", "floor_s", "step_over_floor", "nvme_read_bytes_per_step", "nvme_write_bytes_per_step",
                          "kernel_read_bytes_per_step", "kernel_write_bytes_per_step"}) {
    ASSERT_TRUE(s.contains(key)) << key << ": " << s.dump();
  }
  const double io = s["io_s"].get<double>();
  const double floor = s["floor_s"].get<double>();
  EXPECT_GT(io, 0.0);  // the step moved NVMe bytes (below), and their replay took time
  EXPECT_GE(floor, io);
  EXPECT_GE(floor, s["compute_s"].get<double>());
  EXPECT_EQ(floor, std::max(io, s["compute_s"].get<double>()));  // one of the two, as printed
  EXPECT_GT(s["step_over_floor"].get<double>(), 0.0);
  // Parameters and optimizer states live on NVMe in the built-in configuration: every step reads
  // and writes there, and zoe's totals say the same as the statistics of the whole run.
  EXPECT_GT(s["nvme_read_bytes_per_step"].get<double>(), 0.0);
  EXPECT_GT(s["nvme_write_bytes_per_step"].get<double>(), 0.0);
  EXPECT_LE(std::llround(s["nvme_read_bytes_per_step"].get<double>() * 3),
            s["statistics"]["nvme_read_bytes"].get<long long>());
  // The kernel's count: -1 only where /proc/self/io cannot be read.
  if (std::ifstream("/proc/self/io").good()) {
    EXPECT_GE(s["kernel_read_bytes_per_step"].get<double>(), 0.0);
    EXPECT_GE(s["kernel_write_bytes_per_step"].get<double>(), 0.0);
  } else {
    EXPECT_EQ(s["kernel_read_bytes_per_step"].get<double>(), -1.0);
  }
}

// A DeepSpeed user's own file: stage 3 with parameters and optimizer states on NVMe, DeepSpeed's
// keys alone (no zoe block, so zoe.activations gives the activation store no room). The demo keeps
// the activations itself, says so, and trains the reference's losses.
TEST(TrainMlp, PlainDeepSpeedFileTrainsWithTheProgramKeepingActivations) {
  const scratch_dir dir;
  const std::string path = (dir.path() / "deepspeed.json").string();
  const std::string swap = dir.path().string();
  {
    std::ofstream file(path);
    file << R"({
  "train_batch_size": 8,
  "train_micro_batch_size_per_gpu": 8,
  "gradient_accumulation_steps": 1,
  "gradient_clipping": 1.0,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.01}},
  "zero_optimization": {
    "stage": 3,
    "offload_param": {"device": "nvme", "nvme_path": ")"
         << swap << R"(", "pin_memory": true, "buffer_count": 4, "buffer_size": 1e6},
    "offload_optimizer": {"device": "nvme", "nvme_path": ")"
         << swap << R"(", "pin_memory": true},
    "stage3_param_persistence_threshold": 1e4
  },
  "aio": {"block_size": 1048576, "queue_depth": 8, "thread_count": 1, "single_submit": false, "overlap_events": true}
})";
  }
  const std::string flags = small_model + " --steps 3 --json";
  const run_result offloaded = run(flags + " --config " + path + " --dir " + swap);
  const run_result reference = run(flags + " --reference");
  ASSERT_EQ(offloaded.exit_code, 0) << offloaded.output;
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  EXPECT_NE(offloaded.output.find("activations kept by the program"), std::string::npos) << offloaded.output;
  const auto a = steps_of(offloaded.output);
  ASSERT_EQ(a.size(), 3U) << offloaded.output;
  expect_losses_match(a, steps_of(reference.output), 1e-6);
}

// Under a launcher of several ranks (its environment, as mpirun sets it), what the ranks cannot do
// is refused before any engine is made, naming the flag and the world size.
TEST(TrainMlp, ManyRanksRefuseWhatTheyCannotShare) {
  const std::string launch = "OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_SIZE=4 ";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"--batch 6", {"--batch 6", "world size 4"}},
      {"--batch 8 --micro-batches 4", {"--batch 8", "gradient_accumulation_steps 4", "world size 4"}},
      {"--batch 8 --reference", {"--reference", "4 ranks"}}};
  for (const auto& [flags, words] : cases) {
    const run_result r = run_shell(launch + demo + " --hidden 8 --layers 1 --steps 1 --device host " + flags + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << flags << ": " << r.output;
    for (const std::string& w : words) EXPECT_NE(r.output.find(w), std::string::npos) << flags << ": " << r.output;
  }
}

TEST(TrainMlp, SigkillAfterACheckpointResumesBitForBit) {
  const long steps = 8;
  const scratch_dir whole_dir;
  const run_result whole =
      run(small_model + " --json --steps " + std::to_string(steps) + " --dir " + whole_dir.path().string());
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto uninterrupted = steps_of(whole.output);
  ASSERT_EQ(uninterrupted.size(), static_cast<std::size_t>(steps));

  const scratch_dir dir;
  {
    child c(split(small_model + " --json --steps " + std::to_string(steps) + " --checkpoint-every 2 --dir " +
                  dir.path().string()));
    ASSERT_TRUE(c.started());
    ASSERT_TRUE(c.wait_for_line("checkpoint step 2 saved"));
    c.kill_now();
  }
  const run_result resumed =
      run(small_model + " --json --resume --steps " + std::to_string(steps) + " --dir " + dir.path().string());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  const auto after = steps_of(resumed.output);
  ASSERT_FALSE(after.empty());
  EXPECT_GE(after.begin()->first, 3);  // it continued from a checkpoint, not from the start
  expect_resumed_run_matches(after, uninterrupted, steps);
}

TEST(TrainMlp, SigkillDuringSavesLeavesALoadableCheckpoint) {
  const long steps = 6;
  const scratch_dir whole_dir;
  const run_result whole =
      run(small_model + " --json --steps " + std::to_string(steps) + " --dir " + whole_dir.path().string());
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  const auto uninterrupted = steps_of(whole.output);

  // A checkpoint after every step. The save of step 2 starts right after its loss line is printed,
  // so kills a few milliseconds after that line land inside the save (in its staging folder, its
  // renames, or the switch of `latest`); the delays only vary where: the assertions hold wherever
  // it lands.
  for (const int delay_us : {0, 1000, 5000, 15000, 25000, 40000}) {
    const scratch_dir dir;
    {
      child c(split(small_model + " --json --steps " + std::to_string(steps) + " --checkpoint-every 1 --dir " +
                    dir.path().string()));
      ASSERT_TRUE(c.started());
      ASSERT_TRUE(c.wait_for_line("{\"step\": 2,"));
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      c.kill_now();
    }
    const run_result resumed =
        run(small_model + " --json --resume --steps " + std::to_string(steps) + " --dir " + dir.path().string());
    ASSERT_EQ(resumed.exit_code, 0) << "delay " << delay_us << " us: " << resumed.output;
    const auto after = steps_of(resumed.output);
    if (after.empty()) {
      // The kill came after the last checkpoint: nothing was left to run.
      EXPECT_NE(resumed.output.find("step " + std::to_string(steps)), std::string::npos) << resumed.output;
      continue;
    }
    expect_resumed_run_matches(after, uninterrupted, steps);
  }
}

}  // namespace
}  // namespace zoe::testing
