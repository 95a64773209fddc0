#pragma once
// zoe-train-mlp as its tests run it: the built program, a small model, a run's output and its
// per-step lines. Shared by train_mlp_test.cpp (one process) and train_mlp_mpi_test.cpp (mpirun).

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "child_process.hpp"

namespace zoe::testing {

inline const std::string demo = ZOE_TRAIN_MLP_PATH;

// A model small enough for seconds a run, wide enough that shards span several aio chunks.
inline const std::string small_model = " --hidden 96 --layers 3 --batch 8 --seed 7 --lr 0.01 --device host";

// The demo with `flags`, stdout and stderr together.
inline run_result run(const std::string& flags) { return run_shell(demo + " " + flags + " 2>&1"); }

// Step -> loss line of a --json run's output.
inline std::map<long, nlohmann::json> steps_of(const std::string& output) {
  std::map<long, nlohmann::json> out;
  for (const nlohmann::json& j : json_lines(output)) {
    if (j.contains("step") && j.contains("loss")) out[j["step"].get<long>()] = j;
  }
  return out;
}

// Every step's loss in `got` against the same step's in `want`: bit for bit (relative 0), or
// within `relative` of it where the runs group the rows otherwise and only the order of fp32 sums
// differs.
inline void expect_losses_match(const std::map<long, nlohmann::json>& got, const std::map<long, nlohmann::json>& want,
                                double relative = 0.0) {
  ASSERT_FALSE(got.empty());
  for (const auto& [step, line] : got) {
    ASSERT_TRUE(want.contains(step)) << "step " << step;
    if (relative == 0.0) {
      EXPECT_EQ(line["loss_hex"], want.at(step)["loss_hex"]) << "step " << step;
    } else {
      const double x = line["loss"].get<double>();
      const double y = want.at(step)["loss"].get<double>();
      EXPECT_LE(std::fabs(x - y), relative * std::fabs(y)) << "step " << step << ": " << x << " vs " << y;
    }
  }
}

// A resumed run's losses, its steps (checkpoint, last], against the uninterrupted run's.
inline void expect_resumed_run_matches(const std::map<long, nlohmann::json>& resumed,
                                       const std::map<long, nlohmann::json>& whole, long last, double relative = 0.0) {
  ASSERT_FALSE(resumed.empty());
  ASSERT_EQ(resumed.rbegin()->first, last);
  expect_losses_match(resumed, whole, relative);
}

#ifdef ZOE_MPIRUN
// The demo on `ranks` processes of this machine under mpirun (oversubscribed: the tests share the
// cores): stdout, then stderr. Not merged as run() merges them: mpirun forwards the two streams
// apart, and a stderr line could land inside a stdout line longer than the pipe's 4 KiB writes (the
// --json summary), cutting that JSON in two.
inline run_result run_ranks(int ranks, const std::string& flags) {
  char errors[] = "/tmp/zoe-train-mlp-stderr.XXXXXX";
  const int fd = ::mkstemp(errors);
  if (fd < 0) return {};
  ::close(fd);
  run_result r =
      run_shell(std::string(ZOE_MPIRUN) + " -n " + std::to_string(ranks) + " " + demo + " " + flags + " 2>" + errors);
  std::ifstream in(errors);
  r.output += std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  std::remove(errors);
  return r;
}
#endif

}  // namespace zoe::testing
