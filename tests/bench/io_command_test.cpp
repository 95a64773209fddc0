// zoe-bench io run as a separate process, as a user would: bad input exits 2 naming the flag,
// and --verify in a later process finds changed, moved and torn data by file and offset.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "bench_process.hpp"
#include "io_test_support.hpp"

namespace zoe::testing {
namespace {

class io_command : public ::testing::Test {
 protected:
  std::string base_without_sizes() const { return "io --path " + dir_.path().string() + " --loops 1"; }
  std::string base() const { return base_without_sizes() + " --size 1MiB --block-size 64KiB"; }
  std::filesystem::path data_file() const { return dir_ / "zoe-bench.dat"; }

  // Overwrites `bytes.size()` bytes of the benchmark file at `offset`.
  void poke(std::uint64_t offset, const std::vector<std::byte>& bytes) const {
    std::fstream f(data_file(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(offset));
    f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  std::vector<std::byte> peek(std::uint64_t offset, std::size_t n) const {
    const auto all = read_whole_file(data_file());
    return {all.begin() + static_cast<std::ptrdiff_t>(offset), all.begin() + static_cast<std::ptrdiff_t>(offset + n)};
  }

  scratch_dir dir_;
};

TEST_F(io_command, BadValuesExitTwoNamingTheFlag) {
  for (const auto& [args, flag] :
       std::vector<std::pair<std::string, std::string>>{{" --queue-depth 0", "--queue-depth"},
                                                        {" --size 12parsecs", "--size"},
                                                        {" --size 1000", "--size"},
                                                        {" --block-size 1000", "--block-size"},
                                                        {" --op sideways", "--op"},
                                                        {" --engine warp", "--engine"},
                                                        {" --threads 0", "--threads"}}) {
    const auto r = run(base_without_sizes() + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find(flag), std::string::npos) << args << ": " << r.output;
  }
}

TEST_F(io_command, SweepWithAFlagItWouldIgnoreExitsTwoNamingTheFlag) {
  for (const auto& [args, flag] : std::vector<std::pair<std::string, std::string>>{
           {" --sweep --verify", "--verify"}, {" --sweep --store", "--store"}, {" --sweep --op read", "--op"}}) {
    const auto r = run(base() + args);
    EXPECT_EQ(r.exit_code, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find(flag), std::string::npos) << args << ": " << r.output;
  }
}

TEST_F(io_command, MissingPathExitsTwoNamingIt) {
  const auto r = run("io --path /nonexistent/zoe --size 1MiB");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("/nonexistent/zoe"), std::string::npos) << r.output;
}

TEST_F(io_command, FileSizeLimitIsAnErrorNamingTheFileNotACrash) {
  // ulimit -f counts 1 KiB blocks here: 512 KiB, less than the 1 MiB file.
  const std::string command =
      "sh -c 'ulimit -f 512 && exec " + std::string(ZOE_BENCH_BINARY) + " " + base() + " --op write' 2>&1";
  const auto r = run_shell(command);
  EXPECT_EQ(r.exit_code, 1) << "exit 1, not a signal: " << r.output;
  EXPECT_NE(r.output.find("File too large"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(data_file().string()), std::string::npos) << r.output;
}

TEST_F(io_command, JsonReportsEveryField) {
  const auto r = run(base() + " --op both --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int results = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    const auto j = nlohmann::json::parse(line);
    ++results;
    EXPECT_EQ(j.at("bench"), "io");
    // The default engine is auto: the first backend of this build the kernel accepts.
    EXPECT_TRUE(j.at("engine") == "uring" || j.at("engine") == "aio" || j.at("engine") == "posix") << j.dump();
    EXPECT_TRUE(j.at("direct").get<bool>());
    EXPECT_EQ(j.at("block_size"), 65536);
    EXPECT_EQ(j.at("queue_depth"), 32);
    EXPECT_EQ(j.at("threads"), 1);
    EXPECT_EQ(j.at("bytes"), 1 << 20);
    EXPECT_GT(j.at("seconds").get<double>(), 0.0);
    EXPECT_GT(j.at("gib_per_s").get<double>(), 0.0);
    // The rate is the bytes over the seconds reported beside it, and with one loop the best is it.
    const double rate = (1 << 20) / j.at("seconds").get<double>() / (1 << 30);
    EXPECT_NEAR(j.at("gib_per_s").get<double>(), rate, rate * 1e-9) << j.dump();
    EXPECT_NEAR(j.at("best_gib_per_s").get<double>(), rate, rate * 1e-9) << j.dump();
  }
  EXPECT_EQ(results, 2) << r.output;
}

TEST_F(io_command, StoreModeIsReportedBesideRawAndVerifies) {
  const auto r = run(base() + " --store --verify --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::map<std::string, int> modes;
  for (const auto& j : json_lines(r.output)) {
    ++modes[j.at("mode").get<std::string>() + "/" + j.at("op").get<std::string>()];
    EXPECT_GT(j.at("gib_per_s").get<double>(), 0.0);
  }
  EXPECT_EQ(modes,
            (std::map<std::string, int>{{"raw/read", 1}, {"raw/write", 1}, {"store/read", 1}, {"store/write", 1}}));
  EXPECT_NE(r.output.find("verified store"), std::string::npos) << r.output;
  std::size_t left = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    EXPECT_EQ(entry.path().filename(), "zoe-bench.dat") << "the swap store left " << entry.path();
    ++left;
  }
  EXPECT_EQ(left, 1u);
}

TEST_F(io_command, SweepPrintsEveryPointAndADeepSpeedAioBlock) {
  const auto r = run(base_without_sizes() +
                     " --size 1MiB --sweep --sweep-block-sizes 64KiB,128KiB --sweep-queue-depths 2,4 --sweep-threads 1"
                     " --sweep-engines posix --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto lines = json_lines(r.output);
  ASSERT_EQ(lines.size(), 5u) << r.output;
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(lines[i].at("mode"), "sweep");
    EXPECT_GT(lines[i].at("read_gib_per_s").get<double>(), 0.0);
  }
  const auto& aio = lines[4].at("aio");
  EXPECT_EQ(lines[4].at("mode"), "sweep_best");
  for (const char* key : {"block_size", "queue_depth", "intra_op_parallelism", "single_submit", "overlap_events"}) {
    EXPECT_TRUE(aio.contains(key)) << key << " in " << aio.dump();
  }
}

TEST_F(io_command, VerifyPassesOnAnIntactFileInALaterProcess) {
  ASSERT_EQ(run(base() + " --op write --seed 1").exit_code, 0);
  const auto r = run(base() + " --op read --verify --threads 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("verified"), std::string::npos) << r.output;
}

// The bytes after each sector's 32-byte stamp, one string per sector.
std::vector<std::string> sector_bodies(const std::vector<std::byte>& file) {
  std::vector<std::string> bodies;
  for (std::size_t at = 0; at + 4096 <= file.size(); at += 4096) {
    bodies.emplace_back(reinterpret_cast<const char*>(file.data()) + at + 32, 4096 - 32);
  }
  return bodies;
}

TEST_F(io_command, EveryRunAndEverySectorWritesItsOwnBytesAndStillVerifies) {
  ASSERT_EQ(run(base() + " --op write").exit_code, 0);
  const auto first = sector_bodies(read_whole_file(data_file()));
  ASSERT_EQ(run(base() + " --op write").exit_code, 0);
  const auto second = sector_bodies(read_whole_file(data_file()));
  ASSERT_EQ(first.size(), 256u);
  ASSERT_EQ(second.size(), first.size());
  EXPECT_EQ(std::set<std::string>(first.begin(), first.end()).size(), first.size()) << "a body repeats within a run";
  for (std::size_t i = 0; i < first.size(); ++i) EXPECT_NE(first[i], second[i]) << "sector " << i << " kept its bytes";
  const auto r = run(base() + " --op read --verify");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(io_command, VerifyFindsAChangedByte) {
  ASSERT_EQ(run(base() + " --op write --seed 1").exit_code, 0);
  auto b = peek(12345, 1);
  b[0] = ~b[0];
  poke(12345, b);
  const auto r = run(base() + " --op read --verify");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("at offset 12288"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(data_file().string()), std::string::npos) << r.output;
}

TEST_F(io_command, VerifyFindsAMovedSector) {
  ASSERT_EQ(run(base() + " --op write --seed 1").exit_code, 0);
  poke(8192, peek(20480, 4096));
  const auto r = run(base() + " --op read --verify");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("at offset 8192"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("moved"), std::string::npos) << r.output;
}

TEST_F(io_command, VerifyFindsATornBlock) {
  ASSERT_EQ(run(base() + " --op write --seed 1").exit_code, 0);
  const auto old_half = peek(65536 + 32768, 32768);  // second half of block 1, run 1
  ASSERT_EQ(run(base() + " --op write --seed 2").exit_code, 0);
  poke(65536 + 32768, old_half);  // as if only the first half of run 2's write landed
  const auto r = run(base() + " --op read --verify");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("at offset 98304"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("torn"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace zoe::testing
