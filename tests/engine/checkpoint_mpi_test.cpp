// Checkpoints on many ranks over real processes (label mpi: each case under mpirun, one CTest
// entry per case and rank count). A checkpoint saved by one mpirun and loaded by another needs
// several invocations: SavesOnThisWorld (on 1 and 4 ranks) writes root/world-<n> under
// $ZOE_CHECKPOINT_MPI_DIR, and LoadsWhatEveryWorldSaved (on 1, 2 and 4 ranks) loads each of them;
// the CTest fixture checkpoint_mpi_saved orders them (tests/engine/CMakeLists.txt). The refusals
// (a corrupt file, a failed write) run within one invocation. TimesASaveAndALoad prints the time
// of a save and a load of a 56 MiB checkpoint when ZOE_CHECKPOINT_TIMING is set.

#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "fault_checkpoint_fs.hpp"
#include "rank_states.hpp"
#include "swap_store_support.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/checkpoint/checkpoint.hpp"
#include "zoe/engine/comm/communicator.hpp"

namespace zoe::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// This process's rank of the mpirun world, with a host device for the collectives.
struct mpi_rank {
  mpi_rank() : dev(make_host_device()), comm(engine::make_communicator(*dev, options())) {}
  static engine::comm_options options() {
    engine::comm_options o;
    o.backend = "mpi";
    o.timeout = 60s;
    return o;
  }
  [[nodiscard]] engine::checkpoint_ranks ranks() { return {.comm = *comm, .dev = *dev}; }
  [[nodiscard]] std::size_t rank() const { return comm->rank(); }
  [[nodiscard]] std::size_t size() const { return comm->size(); }

  std::unique_ptr<device> dev;
  std::unique_ptr<engine::communicator> comm;
};

/// The folder every rank and every invocation shares.
fs::path shared_dir() {
  const char* dir = std::getenv("ZOE_CHECKPOINT_MPI_DIR");
  return dir != nullptr ? fs::path(dir) : fs::temp_directory_path() / "zoe_checkpoint_mpi";
}

/// A folder of this invocation's own under the shared one, made by rank 0 (every rank waits).
fs::path fresh_folder(mpi_rank& me, const std::string& name) {
  const fs::path dir = shared_dir() / name;
  if (me.rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  me.comm->barrier();
  return dir;
}

constexpr std::uint64_t saved_seed = 11;

TEST(checkpoint_mpi, SavesOnThisWorld) {
  mpi_rank me;
  if (me.size() != 1 && me.size() != 4) GTEST_SKIP() << "saved on 1 and 4 ranks";
  rank_states states(uneven_model(), me.size(), me.rank(), rank_tier::nvme);
  states.give(random_model(states.layout(), saved_seed + me.size()));
  const fs::path root = fresh_folder(me, str("world-", me.size()));
  engine::save_checkpoint(root, "step-1", states.tiers(), states.io(), checkpoint_meta_of(1), me.ranks());
  EXPECT_TRUE(states.holds(random_model(states.layout(), saved_seed + me.size())));
}

TEST(checkpoint_mpi, LoadsWhatEveryWorldSaved) {
  mpi_rank me;
  if (me.size() != 1 && me.size() != 2 && me.size() != 4) GTEST_SKIP() << "loaded on 1, 2 and 4 ranks";
  for (const std::size_t saved_on : {1U, 4U}) {
    const fs::path root = shared_dir() / str("world-", saved_on);
    ASSERT_TRUE(fs::exists(root / "latest")) << root << ": run checkpoint_mpi.SavesOnThisWorld first";
    rank_states states(uneven_model(), me.size(), me.rank(), rank_tier::host);
    states.give(random_model(states.layout(), 99));  // the load overwrites these
    const engine::checkpoint_meta got = engine::load_checkpoint(root, "", states.tiers(), states.io(), me.ranks());
    EXPECT_EQ(got.scaler, checkpoint_meta_of(1).scaler);
    EXPECT_TRUE(states.holds(random_model(states.layout(), saved_seed + saved_on)))
        << "saved on " << saved_on << " ranks, loaded on " << me.size();
  }
}

/// The message of the E `f` threw; "" when it threw nothing, and a failure for another class.
template <typename E, typename F>
std::string failure_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "another class: " << e.what();
    return e.what();
  }
  return "";
}

TEST(checkpoint_mpi, ACorruptFileFailsEveryRankNamingItAndChangesNoState) {
  mpi_rank me;
  if (me.size() < 2) GTEST_SKIP() << "a world of several ranks";
  const fs::path root = fresh_folder(me, str("corrupt-", me.size()));
  rank_states states(uneven_model(), me.size(), me.rank(), rank_tier::nvme);
  states.give(random_model(states.layout(), 1));
  engine::save_checkpoint(root, "step-1", states.tiers(), states.io(), checkpoint_meta_of(1), me.ranks());
  // exp_avg_sq.bin is the 4th file: its checksum is checked by rank 3 mod n.
  const fs::path file = root / "step-1" / "exp_avg_sq.bin";
  if (me.rank() == 0) flip_byte(file, fs::file_size(file) / 3);
  me.comm->barrier();
  states.give(random_model(states.layout(), 2));
  const std::string failure = failure_of<engine::checkpoint_error>(
      [&] { (void)engine::load_checkpoint(root, "", states.tiers(), states.io(), me.ranks()); });
  EXPECT_NE(failure.find(str("rank ", 3 % me.size(), " of ", me.size())), std::string::npos) << failure;
  EXPECT_NE(failure.find(file.string()), std::string::npos) << failure;
  EXPECT_TRUE(states.holds(random_model(states.layout(), 2))) << "no state changed";
}

TEST(checkpoint_mpi, AFailedWriteOnRankZeroFailsEveryRankAndKeepsThePreviousCheckpoint) {
  mpi_rank me;
  const fs::path root = fresh_folder(me, str("failed-write-", me.size()));
  rank_states states(uneven_model(), me.size(), me.rank(), rank_tier::host);
  states.give(random_model(states.layout(), 1));
  engine::save_checkpoint(root, "step-1", states.tiers(), states.io(), checkpoint_meta_of(1), me.ranks());
  states.give(random_model(states.layout(), 2));
  // Rank 0's write of the second state file fails (operations: the staging folder, then a file's
  // create, appends and sync...): some operation well inside the stream.
  fault_checkpoint_fs faulty(engine::checkpoint_fs::posix(), root);
  faulty.fail_at(12);
  const std::string failure = failure_of<io_error>([&] {
    engine::save_checkpoint(
        root, "step-2", states.tiers(), states.io(), checkpoint_meta_of(2), me.ranks(),
        me.rank() == 0 ? static_cast<engine::checkpoint_fs&>(faulty) : engine::checkpoint_fs::posix());
  });
  EXPECT_FALSE(failure.empty()) << "rank " << me.rank() << " did not fail";
  if (me.size() > 1) {
    EXPECT_NE(failure.find(str("rank 0 of ", me.size())), std::string::npos) << failure;
  }
  EXPECT_EQ(engine::latest_checkpoint(root), "step-1");
  EXPECT_FALSE(fs::exists(root / "step-2"));
  states.give(random_model(states.layout(), 3));
  (void)engine::load_checkpoint(root, "", states.tiers(), states.io(), me.ranks());
  EXPECT_TRUE(states.holds(random_model(states.layout(), 1))) << "the previous checkpoint loads";
}

/// Two modules of two fp16 parameters of a million elements: files of 8 + 3 x 16 MiB.
std::vector<engine::module_spec> timing_model() {
  std::vector<engine::module_spec> out;
  for (int m = 0; m < 2; ++m) {
    engine::module_spec spec{.name = str("m", m), .parameters = {}};
    for (int p = 0; p < 2; ++p) {
      spec.parameters.push_back({.name = str("m", m, ".p", p), .shape = {1024, 1024}, .dtype = kernels::dtype::fp16});
    }
    out.push_back(std::move(spec));
  }
  return out;
}

TEST(checkpoint_mpi, TimesASaveAndALoad) {
  if (std::getenv("ZOE_CHECKPOINT_TIMING") == nullptr) GTEST_SKIP() << "set ZOE_CHECKPOINT_TIMING to time";
  mpi_rank me;
  const fs::path root = fresh_folder(me, str("timing-", me.size()));
  rank_states states(timing_model(), me.size(), me.rank(), rank_tier::nvme);
  states.give(random_model(states.layout(), 1));
  for (int round = 0; round < 2; ++round) {
    me.comm->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    engine::save_checkpoint(root, "step-1", states.tiers(), states.io(), checkpoint_meta_of(1), me.ranks());
    const auto t1 = std::chrono::steady_clock::now();
    (void)engine::load_checkpoint(root, "", states.tiers(), states.io(), me.ranks());
    const auto t2 = std::chrono::steady_clock::now();
    if (me.rank() == 0) {
      std::printf("checkpoint timing: %zu ranks, round %d: save %.3f s, load %.3f s\n", me.size(), round,
                  std::chrono::duration<double>(t1 - t0).count(), std::chrono::duration<double>(t2 - t1).count());
    }
  }
  EXPECT_TRUE(states.holds(random_model(states.layout(), 1)));
}

}  // namespace
}  // namespace zoe::testing
