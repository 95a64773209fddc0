#pragma once
// zoe-train-mlp as its tests run it: the built program, a small model, a run's output and its
// per-step lines. Shared by train_mlp_test.cpp (one process) and train_mlp_mpi_test.cpp (mpirun).

#include <map>
#include <string>

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

}  // namespace zoe::testing
