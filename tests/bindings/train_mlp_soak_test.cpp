// The crash soak (label soak): zoe-train-mlp with a checkpoint after every step, killed with SIGKILL
// at a seeded random moment, then resumed with --resume, round after round. Every round must resume
// from a checkpoint that loads, no older than the last one the killed run reported saved, and the
// resumed run's losses (and the killed run's own, up to its death) must equal the uninterrupted
// run's bit for bit. The kill moments are drawn uniformly over the window from the first checkpoint
// to the end of an uninterrupted run, so they land in steps, in saves, in the switch of `latest`
// and in the teardown alike; the assertions hold wherever they land. Nothing is asserted on time.
// The demo's states are on NVMe and zoe.optimizer_in_backward is on by default, so every step's
// backward runs the speculative step (its shadow writes, its pending memory): a kill in backward
// lands in one. The killed run's swap folder stays behind, and the resumed run reaps it (its own
// goes when it exits): after each round the run folder's swap folder holds no zoe-swap-* folder.
//
// ZOE_SOAK_ROUNDS sets the rounds (5 by default, as scripts/test runs it; 50 for the full soak),
// ZOE_SOAK_SEED the seed (printed, with every kill time, so a failing round can be replayed).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "child_process.hpp"
#include "io_test_support.hpp"
#include "train_mlp_child.hpp"
#include "train_mlp_support.hpp"

namespace zoe::testing {
namespace {

// A tiny model: a round (a killed run and its resumed run) takes about a second.
const std::string tiny_model = " --hidden 32 --layers 2 --batch 8 --seed 7 --lr 0.01 --device host";
constexpr long steps = 8;

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const unsigned long long x = std::strtoull(v, &end, 10);
  if (*end != '\0') throw std::invalid_argument(std::string(name) + " is not a whole number: '" + v + "'");
  return x;
}

// The highest n of the "checkpoint step <n> saved" lines (0 when none).
long last_saved(const std::string& output) {
  static const std::regex saved(R"(^checkpoint step ([0-9]+) saved)");
  long last = 0;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, saved)) last = std::max(last, std::stol(m[1]));
  }
  return last;
}

// The zoe-swap-* folders (one per live or dead engine's store) in the run folder's swap folder.
std::size_t swap_folders(const scratch_dir& dir) {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path() / "swap", ec)) {
    if (entry.path().filename().string().starts_with("zoe-swap-")) ++n;
  }
  return n;
}

// n of the resumed run's "resumed from the checkpoint of step <n>" (-1 when absent).
long resumed_from(const std::string& output) {
  static const std::regex resumed(R"(resumed from the checkpoint of step ([0-9]+))");
  std::smatch m;
  return std::regex_search(output, m, resumed) ? std::stol(m[1]) : -1;
}

std::string run_flags(const scratch_dir& dir) {
  return tiny_model + " --json --steps " + std::to_string(steps) + " --checkpoint-every 1 --dir " + dir.path().string();
}

TEST(TrainMlpSoak, SigkillAtRandomMomentsResumesBitForBit) {
  const std::uint64_t rounds = env_or("ZOE_SOAK_ROUNDS", 5);
  const std::uint64_t seed = env_or("ZOE_SOAK_SEED", 22);
  ASSERT_GT(rounds, 0U);

  // The uninterrupted run, as the rounds run it (a checkpoint after every step): its losses, and
  // the window from its first checkpoint to its exit that the kills are drawn from; the shortest
  // of three runs, so that few kills come after a run has ended (the first run pays for cold caches).
  std::map<long, nlohmann::json> whole;
  std::chrono::microseconds window = std::chrono::microseconds::max();
  for (int calibration = 0; calibration < 3; ++calibration) {
    const scratch_dir dir;
    child c(split(run_flags(dir)));
    ASSERT_TRUE(c.started());
    ASSERT_TRUE(c.wait_for_line("checkpoint step 1 saved"));
    const auto first = std::chrono::steady_clock::now();
    const std::string output = c.whole_lines();
    window = std::min(window,
                      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - first));
    EXPECT_FALSE(c.kill_now()) << "the uninterrupted run ended by itself";
    const auto losses = steps_of(output);
    ASSERT_EQ(losses.size(), static_cast<std::size_t>(steps)) << output;
    if (calibration == 0) {
      whole = losses;
    } else {
      expect_losses_match(losses, whole);
    }
  }
  std::cout << "soak: " << rounds << " rounds, seed " << seed << ", kills drawn in [0, " << window.count()
            << ") us after the first checkpoint\n";

  std::mt19937_64 draw(seed);
  std::uniform_int_distribution<std::int64_t> moment(0, std::max<std::int64_t>(window.count() - 1, 0));
  std::uint64_t killed_mid_run = 0;
  for (std::uint64_t round = 1; round <= rounds; ++round) {
    const std::int64_t delay_us = moment(draw);
    const scratch_dir dir;
    std::string before;
    bool killed = false;
    {
      child c(split(run_flags(dir)));
      ASSERT_TRUE(c.started());
      ASSERT_TRUE(c.wait_for_line("checkpoint step 1 saved")) << "round " << round;
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
      killed = c.kill_now();
      before = c.whole_lines();
    }
    killed_mid_run += killed ? 1 : 0;
    // A run killed mid-run leaves its swap folder (none when the kill came after the engine was
    // destroyed, while the process wrote its report); one that exited removed it.
    EXPECT_LE(swap_folders(dir), killed ? 1U : 0U) << "round " << round;
    const long saved = last_saved(before);
    const run_result resumed =
        run(tiny_model + " --json --resume --steps " + std::to_string(steps) + " --dir " + dir.path().string());
    const long from = resumed_from(resumed.output);
    std::cout << "soak round " << round << "/" << rounds << ": SIGKILL " << delay_us << " us after checkpoint 1 ("
              << (killed ? "killed" : "had exited") << ", last saved step " << saved << "), resumed from step " << from
              << "\n"
              << std::flush;
    SCOPED_TRACE("round " + std::to_string(round) + ", seed " + std::to_string(seed) + ", kill at " +
                 std::to_string(delay_us) + " us");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_EQ(swap_folders(dir), 0U) << "the resumed run reaps the killed run's swap folder and removes its own";
    // The checkpoint it loaded is at least the last one reported saved: a save that returned is
    // never lost, and one cut short leaves the one before it.
    ASSERT_GE(from, std::max(saved, 1L)) << resumed.output;
    // The killed run's own steps, and the resumed run's, are the uninterrupted run's.
    expect_losses_match(steps_of(before), whole);
    const auto after = steps_of(resumed.output);
    if (from == steps) {
      EXPECT_TRUE(after.empty()) << resumed.output;
    } else {
      ASSERT_EQ(after.begin()->first, from + 1) << resumed.output;
      expect_resumed_run_matches(after, whole, steps);
    }
  }
  // The moments are drawn within the fastest uninterrupted run's time after its first checkpoint,
  // so nearly every kill lands mid-run; a soak whose runs mostly ended first tested nothing.
  EXPECT_GE(2 * killed_mid_run, rounds) << "only " << killed_mid_run << " of " << rounds
                                        << " rounds were killed mid-run";
  std::cout << "soak: " << rounds << " rounds passed (" << killed_mid_run << " killed mid-run, "
            << rounds - killed_mid_run << " after the run had ended), seed " << seed << "\n";
}

}  // namespace
}  // namespace zoe::testing
