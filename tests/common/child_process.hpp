#pragma once
// A command-line tool run as a separate process, as a user runs it: its exit code and output,
// and the JSON objects among its lines. Shared by the tests of zoe-bench and zoe-plan.

#include <sys/wait.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace zoe::testing {

struct run_result {
  int exit_code = -1;
  std::string output;  // what the command line wrote to its stdout (redirect stderr to see both)
};

// Runs a shell command line, capturing its stdout.
inline run_result run_shell(const std::string& command) {
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return {};
  run_result r;
  char buf[4096];
  while (const std::size_t n = std::fread(buf, 1, sizeof buf, pipe)) r.output.append(buf, n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// The JSON objects among the output's lines.
inline std::vector<nlohmann::json> json_lines(const std::string& output) {
  std::vector<nlohmann::json> out;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '{') out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

}  // namespace zoe::testing
