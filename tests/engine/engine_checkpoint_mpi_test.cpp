// The engine's checkpoints on many ranks over real processes (label mpi): a run on 4 ranks (and
// one on 1) trains, saves and trains on (TrainsSavesAndTrainsOn, writing the states it ends with);
// runs on 1, 2 and 4 ranks load each checkpoint and train the same steps
// (ResumesBitForBitOnAnyWorld): their masters and moments are the never-stopped run's bit for
// bit. fp32 with the same reduction order whatever the world size: every rank hands in the same
// gradients, small integers times a power of two, so their mean over the ranks is exact.
// The CTest fixture engine_checkpoint_mpi_trained orders the invocations (tests/engine/CMakeLists.txt).

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine_rig.hpp"
#include "zoe/core/str.hpp"

namespace zoe::testing {
namespace {

namespace fs = std::filesystem;
using engine::state_kind;

constexpr std::uint64_t steps_before = 3;  // steps before the checkpoint
constexpr std::uint64_t steps_after = 3;   // and after it
constexpr state_kind compared[] = {state_kind::master, state_kind::exp_avg, state_kind::exp_avg_sq};

fs::path shared_dir() {
  const char* dir = std::getenv("ZOE_CHECKPOINT_MPI_DIR");
  return dir != nullptr ? fs::path(dir) : fs::temp_directory_path() / "zoe_checkpoint_mpi";
}

/// Gradients every rank hands in alike: (k - 4) / 64 for k in 0..8, exact in fp32, so the mean of
/// any number of equal copies is exact whatever the order.
std::vector<std::vector<float>> exact_gradients(const engine::model_layout& layout, std::uint64_t step) {
  std::vector<std::vector<float>> out;
  for (const engine::parameter_layout& p : layout.parameters()) {
    std::vector<float> g(p.numel);
    for (std::size_t i = 0; i < g.size(); ++i) {
      g[i] = static_cast<float>(static_cast<int>((i * 7 + step * 13 + p.id * 3) % 9) - 4) / 64.0F;
    }
    out.push_back(std::move(g));
  }
  return out;
}

void train(rig& r, std::uint64_t first, std::uint64_t count) {
  for (std::uint64_t step = first; step < first + count; ++step) {
    r.micro_batch(exact_gradients(r.e->layout(), step));
    (void)r.e->step(1e-3);
  }
}

/// The compared states of every parameter, as bytes (collective: read_state gathers).
std::string states_of(rig& r) {
  std::string out;
  for (const state_kind k : compared) {
    for (const std::vector<float>& v : r.state(k)) {
      out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));  // NOLINT
    }
  }
  return out;
}

rig on_mpi(const std::string& where) {
  return rig(where, kernels::dtype::fp32, [](engine::engine_config& c) { c.zoe.comm.backend = "mpi"; });
}

TEST(engine_checkpoint_mpi, TrainsSavesAndTrainsOn) {
  rig r = on_mpi("nvme");
  const std::size_t ranks = r.e->layout().options().world_size;
  if (ranks != 1 && ranks != 4) GTEST_SKIP() << "trained on 1 and 4 ranks";
  const fs::path root = shared_dir() / str("train-", ranks);
  train(r, 0, steps_before);
  EXPECT_EQ(r.e->save_checkpoint(root), str("step-", steps_before));
  train(r, steps_before, steps_after);
  const std::string final_states = states_of(r);
  if (r.e->resources().comm().rank() != 0) return;  // rank 0 writes the states
  std::ofstream(root / "final-states.bin", std::ios::binary) << final_states;
}

TEST(engine_checkpoint_mpi, ResumesBitForBitOnAnyWorld) {
  for (const std::size_t saved_on : {1U, 4U}) {
    const fs::path root = shared_dir() / str("train-", saved_on);
    ASSERT_TRUE(fs::exists(root / "final-states.bin")) << root << ": run engine_checkpoint_mpi.TrainsSavesAndTrainsOn";
    rig r = on_mpi("host");
    const std::size_t ranks = r.e->layout().options().world_size;
    if (ranks != 1 && ranks != 2 && ranks != 4) GTEST_SKIP() << "resumed on 1, 2 and 4 ranks";
    r.e->load_checkpoint(root);
    train(r, steps_before, steps_after);
    std::ifstream in(root / "final-states.bin", std::ios::binary);
    const std::string never_stopped((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string resumed = states_of(r);
    ASSERT_EQ(resumed.size(), never_stopped.size());
    EXPECT_EQ(std::memcmp(resumed.data(), never_stopped.data(), resumed.size()), 0)
        << "saved on " << saved_on << " ranks, resumed on " << ranks << ": the masters and moments differ";
  }
  // The runs on 1 and 4 ranks that never stopped are the same bits too (exact gradients).
  std::ifstream one(shared_dir() / "train-1" / "final-states.bin", std::ios::binary);
  std::ifstream four(shared_dir() / "train-4" / "final-states.bin", std::ios::binary);
  EXPECT_TRUE(std::equal(std::istreambuf_iterator<char>(one), std::istreambuf_iterator<char>(),
                         std::istreambuf_iterator<char>(four), std::istreambuf_iterator<char>()));
}

}  // namespace
}  // namespace zoe::testing
