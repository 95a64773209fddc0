#pragma once
// zoe-bench run as a separate process, as a user runs it, for the tests of its subcommands.

#include <string>

#include "child_process.hpp"

namespace zoe::testing {

// Runs zoe-bench with `args`, stdout and stderr together.
inline run_result run(const std::string& args) {
  return run_shell(std::string(ZOE_BENCH_BINARY) + " " + args + " 2>&1");
}

}  // namespace zoe::testing
