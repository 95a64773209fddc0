// Checkpoints on many ranks (engine/checkpoint with a communicator), the ranks being threads of
// this process (thread_world): a checkpoint saved at one world size loads at any other, bit for
// bit; one rank's failure (a corrupt or truncated file it checks, a failed write on rank 0, a
// state it cannot read) fails every rank with that rank's error naming the file, changes no state
// and leaves the previous checkpoint loadable. tests/engine/checkpoint_mpi_test.cpp runs the same
// over real processes.

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <optional>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "fault_checkpoint_fs.hpp"
#include "rank_states.hpp"
#include "swap_store_support.hpp"
#include "thread_world.hpp"
#include "zoe/core/str.hpp"
#include "zoe/engine/checkpoint/checkpoint.hpp"

namespace zoe::testing {
namespace {

namespace fs = std::filesystem;
using ranks_t = std::vector<std::unique_ptr<rank_states>>;

ranks_t make_ranks(std::size_t n, rank_tier where, std::shared_ptr<fault_plan> faults_of_rank_2 = nullptr) {
  ranks_t out;
  for (std::size_t r = 0; r < n; ++r) {
    out.push_back(std::make_unique<rank_states>(uneven_model(), n, r, where, r == 2 ? faults_of_rank_2 : nullptr));
  }
  return out;
}

/// The real file system over the posix I/O backend: the ranks' threads make and drop I/O engines
/// at once, and io_uring's rings, mapped by liburing's own system calls, would reuse addresses
/// unseen by TSan (a false race between two rings).
engine::checkpoint_fs& files() {
  static const std::unique_ptr<engine::checkpoint_fs> fs =
      engine::make_posix_checkpoint_fs({.backend = "posix", .block_size = 64 * 1024, .write_buffers = 3});
  return *fs;
}

/// Every rank saves `ranks`' states under root/tag; rank 0 writes through `rank0_fs`.
void save_all(thread_world& world, ranks_t& ranks, const fs::path& root, const std::string& tag, int meta,
              engine::checkpoint_fs& rank0_fs = files()) {
  world.run([&](std::size_t r) {
    engine::save_checkpoint(root, tag, ranks[r]->tiers(), ranks[r]->io(), checkpoint_meta_of(meta),
                            engine::checkpoint_ranks{.comm = world.rank(r), .dev = ranks[r]->dev()},
                            r == 0 ? rank0_fs : files());
  });
}

/// Every rank loads root/tag; each rank's meta is checked against checkpoint_meta_of(meta).
void load_all(thread_world& world, ranks_t& ranks, const fs::path& root, const std::string& tag, int meta) {
  world.run([&](std::size_t r) {
    const engine::checkpoint_meta got =
        engine::load_checkpoint(root, tag, ranks[r]->tiers(), ranks[r]->io(),
                                engine::checkpoint_ranks{.comm = world.rank(r), .dev = ranks[r]->dev()}, files());
    EXPECT_EQ(got.scaler, checkpoint_meta_of(meta).scaler) << "rank " << r;
    EXPECT_EQ(got.lr, checkpoint_meta_of(meta).lr) << "rank " << r;
  });
}

/// What each rank's load threw (its message; empty for none), and whether it was of class E.
template <typename E>
std::vector<std::string> failures_of(thread_world& world, const std::function<void(std::size_t)>& body) {
  std::vector<std::string> out(world.size());
  world.run([&](std::size_t r) {
    try {
      body(r);
      out[r] = "";
    } catch (const E& e) {
      out[r] = e.what();
    } catch (const std::exception& e) {
      out[r] = std::string("of another class: ") + e.what();
    }
  });
  return out;
}

/// Every rank failed with a message holding each of `needles`.
void expect_every_rank_failed(const std::vector<std::string>& failures, const std::vector<std::string>& needles) {
  for (std::size_t r = 0; r < failures.size(); ++r) {
    EXPECT_FALSE(failures[r].empty()) << "rank " << r << " did not fail";
    for (const std::string& n : needles) {
      EXPECT_NE(failures[r].find(n), std::string::npos)
          << "rank " << r << ": " << failures[r] << "\n(wanted '" << n << "')";
    }
  }
}

void expect_holds(ranks_t& ranks, const model_values& values, const std::string& what) {
  for (auto& r : ranks) EXPECT_TRUE(r->holds(values)) << what;
}

TEST(checkpoint_ranks, SavedOnFourLoadsOnOneTwoThreeAndFour) {
  const scratch_dir root;
  ranks_t saving = make_ranks(4, rank_tier::nvme);
  const model_values values = random_model(saving[0]->layout(), 1);
  for (auto& r : saving) r->give(values);
  thread_world four(4);
  save_all(four, saving, root.path(), "step-1", 1);
  expect_holds(saving, values, "the saving ranks after the save");  // a save changes no state
  // Each rank's pieces go to rank 0 alone: point-to-point bytes, no broadcast of them; what ranks
  // 1-3 send is their shards, less than the files (rank 0's own shards are part of them).
  std::uint64_t file_bytes = 0;
  for (const auto& entry : fs::recursive_directory_iterator(root.path())) {
    if (entry.is_regular_file()) file_bytes += entry.file_size();
  }
  std::uint64_t to_rank0 = 0;
  for (std::size_t r = 0; r < 4; ++r) {
    const engine::comm_stats s = four.rank(r).stats();
    EXPECT_EQ(s.of(engine::collective::broadcast).total(), 0U) << "rank " << r;
    if (r == 0) {
      EXPECT_EQ(s.of(engine::collective::point_to_point).total(), 0U);
    }
    to_rank0 += s.of(engine::collective::point_to_point).total();
  }
  EXPECT_GT(to_rank0, 0U);
  EXPECT_LT(to_rank0, file_bytes);

  for (const std::size_t n : {1U, 2U, 3U, 4U}) {
    for (const rank_tier where : {rank_tier::host, rank_tier::nvme}) {
      ranks_t loading = make_ranks(n, where);
      for (auto& r : loading) r->give(random_model(r->layout(), 2));  // the load must overwrite these
      thread_world world(n);
      load_all(world, loading, root.path(), "", 1);
      expect_holds(loading, values,
                   str("loaded on ", n, " ranks, states on ", where == rank_tier::host ? "host" : "nvme"));
    }
  }
}

TEST(checkpoint_ranks, SavedOnOneLoadsOnFourAndSavedAgainOnFourIsTheSameFiles) {
  const scratch_dir root;
  rank_states alone(uneven_model(), 1, 0, rank_tier::host);
  const model_values values = random_model(alone.layout(), 3);
  alone.give(values);
  engine::save_checkpoint(root.path(), "one", alone.tiers(), alone.io(), checkpoint_meta_of(3), files());

  ranks_t four = make_ranks(4, rank_tier::nvme);
  thread_world world(4);
  load_all(world, four, root.path(), "one", 3);
  expect_holds(four, values, "loaded on 4 ranks");

  // The files do not depend on the world size: saved again on 4 ranks, they are the same bytes.
  save_all(world, four, root.path(), "four", 3);
  for (const std::string file : {"working.bin", "master.bin", "exp_avg.bin", "exp_avg_sq.bin"}) {
    std::ifstream a(root.path() / "one" / file, std::ios::binary);
    std::ifstream b(root.path() / "four" / file, std::ios::binary);
    const std::string x((std::istreambuf_iterator<char>(a)), std::istreambuf_iterator<char>());
    const std::string y((std::istreambuf_iterator<char>(b)), std::istreambuf_iterator<char>());
    EXPECT_FALSE(x.empty()) << file;
    EXPECT_EQ(x, y) << file << " differs between the saves on 1 and 4 ranks";
  }
}

TEST(checkpoint_ranks, ACorruptOrTruncatedFileFailsEveryRankNamingItAndChangesNoState) {
  const scratch_dir root;
  ranks_t saving = make_ranks(4, rank_tier::host);
  const model_values values = random_model(saving[0]->layout(), 4);
  for (auto& r : saving) r->give(values);
  thread_world world(4);
  save_all(world, saving, root.path(), "step-1", 1);

  ranks_t loading = make_ranks(4, rank_tier::nvme);
  const model_values before = random_model(loading[0]->layout(), 5);
  for (auto& r : loading) r->give(before);
  const auto load = [&](std::size_t r) {
    (void)engine::load_checkpoint(root.path(), "", loading[r]->tiers(), loading[r]->io(),
                                  engine::checkpoint_ranks{.comm = world.rank(r), .dev = loading[r]->dev()}, files());
  };
  // File i's checksum is checked by rank i mod 4: each rank in turn finds the damage.
  const std::vector<std::string> files = {"working.bin", "master.bin", "exp_avg.bin", "exp_avg_sq.bin"};
  for (std::size_t i = 0; i < files.size(); ++i) {
    const fs::path file = root.path() / "step-1" / files[i];
    flip_byte(file, fs::file_size(file) / 2);
    expect_every_rank_failed(failures_of<engine::checkpoint_error>(world, load),
                             {str("rank ", i, " of 4"), file.string(), "checksum"});
    expect_holds(loading, before, "after a load refused for a corrupt " + files[i]);
    flip_byte(file, fs::file_size(file) / 2);
  }
  // A truncated file: every rank checks every size.
  const fs::path master = root.path() / "step-1" / "master.bin";
  fs::resize_file(master, fs::file_size(master) - 1);
  expect_every_rank_failed(failures_of<engine::checkpoint_error>(world, load),
                           {"rank 0 of 4", master.string(), "truncated"});
  expect_holds(loading, before, "after a load refused for a truncated file");
}

TEST(checkpoint_ranks, AFailedWriteOnRankZeroFailsEveryRankAndKeepsAWholeCheckpoint) {
  const scratch_dir root;
  ranks_t ranks = make_ranks(4, rank_tier::host);
  const model_values first = random_model(ranks[0]->layout(), 6);
  const model_values second = random_model(ranks[0]->layout(), 7);
  for (auto& r : ranks) r->give(first);
  thread_world world(4);
  save_all(world, ranks, root.path(), "step-1", 1);
  for (auto& r : ranks) r->give(second);

  std::uint64_t operations = 0;
  {
    const scratch_dir probe_root;
    fault_checkpoint_fs probe(files(), probe_root.path());
    save_all(world, ranks, probe_root.path(), "step-2", 2, probe);
    operations = probe.operations();
  }
  ASSERT_GT(operations, 10U);
  int kept_first = 0;
  for (std::uint64_t k = 0; k < operations; ++k) {
    // Every 5th operation of the stream's many alike, and each of the renames, syncs and `latest`
    // at the end.
    if (k % 5 != 0 && k + 10 < operations) continue;
    SCOPED_TRACE(str("rank 0's file operation ", k, " of ", operations, " fails"));
    // No step-2 and no staging folder, as in the probe's root, so operation k is the probe's k.
    fs::remove_all(root.path() / "step-2");
    fs::remove_all(root.path() / ".step-2.partial");
    fault_checkpoint_fs faulty(files(), root.path());
    faulty.fail_at(k);
    const std::vector<std::string> failures = failures_of<io_error>(world, [&](std::size_t r) {
      engine::save_checkpoint(root.path(), "step-2", ranks[r]->tiers(), ranks[r]->io(), checkpoint_meta_of(2),
                              engine::checkpoint_ranks{.comm = world.rank(r), .dev = ranks[r]->dev()},
                              r == 0 ? static_cast<engine::checkpoint_fs&>(faulty) : files());
    });
    if (k + 1 == operations) {
      // The last operation is the cleanup's look for what the save replaced, once the checkpoint
      // and `latest` are durable: its failure is only logged, and the save succeeds.
      for (std::size_t r = 0; r < failures.size(); ++r) EXPECT_EQ(failures[r], "") << "rank " << r;
      EXPECT_EQ(engine::latest_checkpoint(root.path(), files()), "step-2");
    } else {
      expect_every_rank_failed(failures, {"rank 0 of 4"});
    }
    // `latest` names a whole checkpoint, which loads on 2 ranks.
    const std::optional<std::string> latest = engine::latest_checkpoint(root.path(), files());
    ASSERT_TRUE(latest.has_value());
    ranks_t two = make_ranks(2, rank_tier::host);
    thread_world pair(2);
    load_all(pair, two, root.path(), "", *latest == "step-1" ? 1 : 2);
    expect_holds(two, *latest == "step-1" ? first : second, "loaded from " + *latest);
    kept_first += *latest == "step-1" ? 1 : 0;
    // The staging folder is removed, unless the failure came once it had been exchanged with an
    // older step-2 (it holds that one then, and the next save of step-2 removes it).
    EXPECT_TRUE(!fs::exists(root.path() / ".step-2.partial") || fs::exists(root.path() / "step-2"));
    if (*latest != "step-1") {
      // The failure came after `latest` was written: start the next case from step-1 again.
      for (auto& r : ranks) r->give(first);
      save_all(world, ranks, root.path(), "step-1", 1);
      for (auto& r : ranks) r->give(second);
    }
  }
  EXPECT_GT(kept_first, 0);
}

TEST(checkpoint_ranks, AStateRankTwoCannotReadMidSaveFailsEveryRankAndKeepsThePreviousCheckpoint) {
  const scratch_dir root;
  const auto faults = std::make_shared<fault_plan>();
  ranks_t ranks = make_ranks(4, rank_tier::nvme, faults);
  const model_values values = random_model(ranks[0]->layout(), 8);
  for (auto& r : ranks) r->give(values);
  thread_world world(4);
  save_all(world, ranks, root.path(), "step-1", 1);

  faults->add({.op = io::io_op::read, .inject_errno = EIO, .times = -1});  // every read of rank 2's store
  expect_every_rank_failed(
      failures_of<io_error>(world,
                            [&](std::size_t r) {
                              engine::save_checkpoint(
                                  root.path(), "step-2", ranks[r]->tiers(), ranks[r]->io(), checkpoint_meta_of(2),
                                  engine::checkpoint_ranks{.comm = world.rank(r), .dev = ranks[r]->dev()}, files());
                            }),
      {"rank 2 of 4"});
  EXPECT_EQ(engine::latest_checkpoint(root.path(), files()), "step-1");
  EXPECT_FALSE(fs::exists(root.path() / "step-2"));
  EXPECT_FALSE(fs::exists(root.path() / ".step-2.partial"));
  ranks_t one = make_ranks(1, rank_tier::host);
  thread_world alone(1);
  load_all(alone, one, root.path(), "", 1);
  expect_holds(one, values, "the previous checkpoint, loaded on 1 rank");
}

TEST(checkpoint_ranks, ALayoutForAnotherWorldSizeIsAUsageError) {
  const scratch_dir root;
  ranks_t ranks = make_ranks(2, rank_tier::host);
  thread_world world(1);
  EXPECT_THROW(engine::save_checkpoint(root.path(), "x", ranks[0]->tiers(), ranks[0]->io(), checkpoint_meta_of(1),
                                       engine::checkpoint_ranks{.comm = world.rank(0), .dev = ranks[0]->dev()}),
               usage_error);
  EXPECT_THROW(engine::save_checkpoint(root.path(), "x", ranks[0]->tiers(), ranks[0]->io(), checkpoint_meta_of(1)),
               usage_error);
}

}  // namespace
}  // namespace zoe::testing
