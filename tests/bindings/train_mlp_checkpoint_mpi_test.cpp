// zoe-train-mlp's checkpoints across world sizes under mpirun (label mpi): every rank saves into the
// one shared DIR/checkpoints, and a run saved on 4 ranks resumes on 2 and 1 (and saved on 1 and 2,
// resumes on 4), continuing the losses of the 4-rank run that never stopped.
//
// Bit for bit: with a global batch of 512 rows every world size here gives each rank a
// power-of-two number of the demo's 128-row leaves, and the demo sums its gradients over the leaves
// and zoe sums the ranks in one pairwise tree (leaf_tree.h, pairwise_tree.hpp), so 1, 2 and 4 ranks
// compute the same bits, and a checkpoint crossing between them continues exactly. That a
// checkpoint itself changes no bit, whatever the world size, the engine's own checkpoint tests
// prove (tests/engine/checkpoint_ranks_test.cpp, checkpoint_mpi_test.cpp).
#include <filesystem>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "child_process.hpp"
#include "io_test_support.hpp"
#include "train_mlp_support.hpp"

namespace zoe::testing {
namespace {

constexpr long total_steps = 6;
constexpr long saved_step = 3;
// A small model whose global batch gives every rank whole leaves.
std::string flags_of(const std::filesystem::path& dir) {
  return " --hidden 32 --layers 3 --batch 512 --seed 7 --lr 0.01 --device host --json --dir " + dir.string();
}

// The losses of the 4-rank run that never stops.
std::map<long, nlohmann::json> uninterrupted_on_four() {
  const scratch_dir dir;
  const run_result r = run_ranks(4, flags_of(dir.path()) + " --steps " + std::to_string(total_steps));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto steps = steps_of(r.output);
  EXPECT_EQ(steps.size(), static_cast<std::size_t>(total_steps)) << r.output;
  return steps;
}

// Trains steps 1..saved_step on `ranks` ranks with a checkpoint after the last; checks what the
// run printed and left in `dir`.
void save_on(int ranks, const std::filesystem::path& dir) {
  const std::string flags =
      flags_of(dir) + " --steps " + std::to_string(saved_step) + " --checkpoint-every " + std::to_string(saved_step);
  const run_result r = ranks == 1 ? run(flags) : run_ranks(ranks, flags);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Rank 0 alone says so, once.
  const std::string said = "checkpoint step " + std::to_string(saved_step) + " saved in";
  const std::size_t at = r.output.find(said);
  ASSERT_NE(at, std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(said, at + 1), std::string::npos) << r.output;
  // One checkpoint for every rank; the swap files in a folder per rank (DIR/swap on one).
  const std::filesystem::path checkpoint = dir / "checkpoints" / ("step-" + std::to_string(saved_step));
  EXPECT_TRUE(std::filesystem::is_regular_file(checkpoint / "manifest.json")) << checkpoint;
  for (int k = 0; k < ranks; ++k) {
    const std::string swap = ranks == 1 ? "swap" : "rank-" + std::to_string(k);
    EXPECT_TRUE(std::filesystem::is_directory(dir / swap)) << swap;
  }
}

// Steps saved_step+1..total_steps from `dir`'s checkpoint on `ranks` ranks.
std::map<long, nlohmann::json> resume_on(int ranks, const std::filesystem::path& dir) {
  const std::string flags = flags_of(dir) + " --resume --steps " + std::to_string(total_steps);
  const run_result r = ranks == 1 ? run(flags) : run_ranks(ranks, flags);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from the checkpoint of step " + std::to_string(saved_step)), std::string::npos)
      << r.output;
  auto steps = steps_of(r.output);
  // Rank 0 alone prints the step lines, and the run continued from the checkpoint.
  EXPECT_EQ(steps.size(), static_cast<std::size_t>(total_steps - saved_step)) << r.output;
  if (!steps.empty()) {
    EXPECT_EQ(steps.begin()->first, saved_step + 1) << r.output;
  }
  return steps;
}

TEST(TrainMlpCheckpointMpi, SavedOnFourRanksResumesOnTwoAndOne) {
  const auto whole = uninterrupted_on_four();
  ASSERT_FALSE(::testing::Test::HasFailure());
  const scratch_dir dir;
  save_on(4, dir.path());
  // Resuming reads the checkpoint and saves none: both resume from the same one.
  expect_resumed_run_matches(resume_on(1, dir.path()), whole, total_steps);
  expect_resumed_run_matches(resume_on(2, dir.path()), whole, total_steps);
}

TEST(TrainMlpCheckpointMpi, SavedOnOneAndTwoRanksResumesOnFour) {
  const auto whole = uninterrupted_on_four();
  ASSERT_FALSE(::testing::Test::HasFailure());
  const scratch_dir from_one;
  save_on(1, from_one.path());
  expect_resumed_run_matches(resume_on(4, from_one.path()), whole, total_steps);
  const scratch_dir from_two;
  save_on(2, from_two.path());
  expect_resumed_run_matches(resume_on(4, from_two.path()), whole, total_steps);
}

}  // namespace
}  // namespace zoe::testing
