// The checkpoint fuzz target's entry (fuzz/entries/checkpoint_entry.cpp) on its seed corpus and on
// every crash input the fuzzer found, and the checks that its input format reaches the loader.
#include <gtest/gtest.h>

#include <algorithm>
#include <string_view>

#include "checkpoint_entry.hpp"
#include "fuzz_inputs.hpp"

namespace zoe::fuzz {
namespace {

class checkpoint_fuzz_inputs : public ::testing::TestWithParam<std::filesystem::path> {};

TEST_P(checkpoint_fuzz_inputs, run_without_a_bug) {
  checkpoint_target target;
  (void)target.run(read_input(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(recorded, checkpoint_fuzz_inputs, ::testing::ValuesIn(testing::fuzz_inputs("checkpoint")),
                         testing::fuzz_input_name);

// The corpus's seed is a checkpoint this build saves and loads; when it stops loading (the format
// or the fuzz model changed), make it again: ZOE_FUZZ_WRITE_SEED=fuzz/corpus/checkpoint/saved
// build/fuzz/fuzz/zoe_fuzz_checkpoint -runs=0 (fuzz/README.md).
TEST(checkpoint_fuzz, committed_seed_loads) {
  checkpoint_target target;
  EXPECT_EQ(target.run(read_input(std::filesystem::path(ZOE_FUZZ_DIR) / "corpus/checkpoint/saved")), outcome::accepted);
}

TEST(checkpoint_fuzz, saved_input_loads) {
  checkpoint_target target;
  EXPECT_EQ(target.run(target.saved_input()), outcome::accepted);
}

/// The saved input with the last byte of its exp_avg_sq.bin record (selector 4) changed.
std::vector<std::uint8_t> with_state_byte_flipped(std::vector<std::uint8_t> input) {
  for (std::size_t at = 1; at + 3 <= input.size();) {
    const std::size_t length = input[at + 1] | (std::size_t{input[at + 2]} << 8);
    if (input[at] == 4 && length > 0) {
      input[at + 2 + length] ^= 0x5a;
      return input;
    }
    at += 3 + length;
  }
  ADD_FAILURE() << "the saved input has no exp_avg_sq.bin record";
  return input;
}

// A changed state file fails its checksum, unless the input asks the entry to repair the checksums
// (flags 1 and 2): then the load gets past them to the states.
TEST(checkpoint_fuzz, repaired_checksums_reach_the_states) {
  checkpoint_target target;
  std::vector<std::uint8_t> changed = with_state_byte_flipped(target.saved_input());
  EXPECT_EQ(target.run(changed), outcome::refused);
  changed[0] |= 1;  // the file's checksum in the manifest repaired: the manifest's own fails
  EXPECT_EQ(target.run(changed), outcome::refused);
  changed[0] |= 2;
  EXPECT_EQ(target.run(changed), outcome::accepted);
}

}  // namespace
}  // namespace zoe::fuzz
